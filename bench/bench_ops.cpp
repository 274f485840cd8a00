// Speed of the core ops on the selected device, beside PyTorch on the CPU run
// in the same bench and the machine's measured FP32 peak. Prints a table.
//
//   build/bench/bench_ops [--device D] [--no-torch] [--dtype f32|f16|bf16] [--only NAME_PREFIX]
//
// The PyTorch baseline runs as a well-set-up user would run it: OpenBLAS with
// the fastest OPENBLAS_CORETYPE for this CPU (measured, bench_util.hpp) and
// transparent huge pages through GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (3.6x
// faster here), 2 threads.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "bench_util.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "peak_flops.hpp"

using namespace nanscope;

namespace {

using bench::Clock;
using bench::seconds_since;

HostTensor random_host(const Shape& shape, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = dist(rng);
  return HostTensor::from_f32(shape, v, t);
}

// Seconds per call: one warm-up call (kernel builds), then repeats for >= 1 s.
double time_op(Backend& be, const std::function<void()>& fn) {
  fn();
  be.synchronize();
  int n = 0;
  const auto t0 = Clock::now();
  do {
    fn();
    be.synchronize();
    ++n;
  } while (seconds_since(t0) < 1.0 || n < 3);
  return seconds_since(t0) / n;
}

std::map<std::string, double> run_torch() {
  std::map<std::string, double> out;
  const auto j = bench::run_python_baseline("torch_ops.py", "2");
  if (!j) return out;
  for (auto it = j->begin(); it != j->end(); ++it) out[it.key()] = it.value().get<double>();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pin = device_pin_from_env();
  bool torch = true;
  DType dtype = DType::f32;
  std::string only;  // run only the ops whose name starts with this
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      pin = argv[++i];
    else if (a == "--no-torch")
      torch = false;
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--dtype" && i + 1 < argc)
      dtype = parse_dtype(argv[++i]).value_or(DType::f32);
    else {
      std::fprintf(stderr, "usage: bench_ops [--device D] [--no-torch] [--dtype f32|f16|bf16] [--only NAME_PREFIX]\n");
      return 2;
    }
  }
  try {
    // Measured before and after the ops (the larger counts): a busy moment lowers one, never raises it.
    const double peak_before = bench::measure_peak_flops();
    const DeviceList devices = enumerate_devices();
    const DeviceInfo& dev = select_device(devices, pin);
    auto be = make_backend(dev, backend_options_from_environment());
    OpContext ctx;
    ctx.backend = be.get();
    ctx.path = "bench";
    ctx.precision.dtype = dtype;

    struct Row {
      std::string name;
      double flops;
      double ours;
    };
    std::vector<Row> rows;
    const auto wanted = [&](const std::string& name) { return name.rfind(only, 0) == 0; };
    for (int size : {1024, 2048}) {
      if (!wanted("gemm_" + std::to_string(size))) continue;
      const Tensor a = be->upload(random_host({size, size}, dtype, 1));
      const Tensor b = be->upload(random_host({size, size}, dtype, 2));
      const double s = time_op(*be, [&] { ops::matmul(ctx, a, b); });
      rows.push_back({"gemm_" + std::to_string(size), 2.0 * size * size * size, s});
    }
    if (wanted("conv3x3_320_64")) {
      const Tensor x = be->upload(random_host({1, 320, 64, 64}, dtype, 3));
      const Tensor w = be->upload(random_host({320, 320, 3, 3}, dtype, 4));
      const Tensor bias = be->upload(random_host({320}, dtype, 5));
      const double s = time_op(*be, [&] { ops::conv2d(ctx, x, w, &bias, 1, 1); });
      rows.push_back({"conv3x3_320_64", 2.0 * 320 * 320 * 9 * 64 * 64, s});
    }
    // SD 1.x self-attention at 256x256, 512x512 and 1024x1024 images (8 heads x 40). The materialised
    // bmm path only up to 4096 tokens: at 16384 its 8 score matrices alone are 8.6 GB.
    for (const int tokens : {1024, 4096, 16384}) {
      const std::string name = "attention_" + std::to_string(tokens) + "x8x40";
      if (!wanted(name)) continue;
      const Tensor q = be->upload(random_host({1, tokens, 320}, dtype, 6));
      const Tensor k = be->upload(random_host({1, tokens, 320}, dtype, 7));
      const Tensor v = be->upload(random_host({1, tokens, 320}, dtype, 8));
      for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::bmm}) {
        if (impl == AttentionImpl::bmm && tokens > 4096) continue;
        ctx.attention.impl = impl;
        const double s = time_op(*be, [&] { ops::attention(ctx, q, k, v, 8, 1.0f / std::sqrt(40.0f)); });
        rows.push_back({name, 4.0 * 8 * double(tokens) * double(tokens) * 40, s});
        rows.back().name += impl == AttentionImpl::fused ? " (fused)" : " (bmm)";
      }
    }

    const double peak = std::max(peak_before, bench::measure_peak_flops());
    std::map<std::string, double> ref;
    if (torch) ref = run_torch();

    std::printf("\nbench_ops on \"%s\" (%s storage), FP32 peak of this CPU: %.0f GFLOP/s\n\n", dev.name.c_str(),
                std::string(dtype_name(dtype)).c_str(), peak / 1e9);
    std::printf("| op | ours ms | ours GFLOP/s | %% of peak | PyTorch ms | PyTorch / ours |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (const auto& r : rows) {
      const std::string key = r.name.substr(0, r.name.find(' '));
      const auto it = ref.find(key);
      const double gf = r.flops / r.ours / 1e9;
      if (it != ref.end()) {
        std::printf("| %s | %.2f | %.1f | %.0f%% | %.2f | %.2fx |\n", r.name.c_str(), r.ours * 1e3, gf,
                    100.0 * gf * 1e9 / peak, it->second * 1e3, it->second / r.ours);
      } else {
        std::printf("| %s | %.2f | %.1f | %.0f%% | - | - |\n", r.name.c_str(), r.ours * 1e3, gf,
                    100.0 * gf * 1e9 / peak);
      }
    }
    std::printf("\n(PyTorch / ours > 1 means NaNscope is faster.)\n");
    if (torch) std::printf("%s.\n", bench::best_openblas_coretype().report.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
