// Speed of the core ops on the selected device, beside PyTorch on the CPU run
// in the same bench and the machine's measured FP32 peak. Prints a table.
//
//   build/bench/bench_ops [--device D] [--no-torch] [--dtype f32|f16|bf16] [--only NAME_PREFIX]
//
// The PyTorch baseline runs as a well-set-up user would run it: OpenBLAS with
// the fastest OPENBLAS_CORETYPE for this CPU (measured, bench_util.hpp) and
// transparent huge pages through GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (3.6x
// faster here), 2 threads.

#include <immintrin.h>

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

using namespace nanscope;

namespace {

using bench::Clock;
using bench::seconds_since;

// Peak FP32 FLOP/s: independent FMA chains on every hardware thread.
// Twelve named accumulators (not an array, which the compiler may keep in
// memory and so chain every FMA through a store and a load), each starting
// from its own value: chains that start equal are one chain to the compiler,
// which then runs one latency-bound chain and copies it (measured here: a
// "peak" of 530-620 GFLOP/s on a CPU whose real peak is 215).
#define NANSCOPE_FMA12(V, FMA, SET1)                                                                              \
  V a0 = SET1(1.00f), a1 = SET1(1.01f), a2 = SET1(1.02f), a3 = SET1(1.03f), a4 = SET1(1.04f), a5 = SET1(1.05f),   \
    a6 = SET1(1.06f), a7 = SET1(1.07f), a8 = SET1(1.08f), a9 = SET1(1.09f), a10 = SET1(1.10f), a11 = SET1(1.11f); \
  for (long i = 0; i < iters; ++i) {                                                                              \
    a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);                               \
    a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);                               \
    a8 = FMA(a8, m, c), a9 = FMA(a9, m, c), a10 = FMA(a10, m, c), a11 = FMA(a11, m, c);                           \
  }                                                                                                               \
  const V acc[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};

__attribute__((target("avx512f"))) double fma_chains_avx512(long iters) {
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  NANSCOPE_FMA12(__m512, _mm512_fmadd_ps, _mm512_set1_ps)
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps header trips -Wuninitialized.
  alignas(64) float out[16];
  float sink = 0;
  for (auto& a : acc) {
    _mm512_store_ps(out, a);
    for (float f : out) sink += f;
  }
  return sink;
}
__attribute__((target("avx2,fma"))) double fma_chains_avx2(long iters) {
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  NANSCOPE_FMA12(__m256, _mm256_fmadd_ps, _mm256_set1_ps)
  alignas(32) float out[8];
  float sink = 0;
  for (auto& a : acc) {
    _mm256_store_ps(out, a);
    for (float f : out) sink += f;
  }
  return sink;
}

double measure_peak_flops() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int lanes = avx512 ? 16 : 8;
  const long iters = 50'000'000;  // about 0.17 s on 2 Zen 4 cores
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  std::vector<double> sinks(threads);
  const auto t0 = Clock::now();
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { sinks[t] = avx512 ? fma_chains_avx512(iters) : fma_chains_avx2(iters); });
  for (auto& th : pool) th.join();
  const double s = seconds_since(t0);
  return 2.0 * lanes * 12.0 * static_cast<double>(iters) * threads / s;
}

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
    if (wanted("attention_4096x8x40")) {
      const Tensor q = be->upload(random_host({1, 4096, 320}, dtype, 6));
      const Tensor k = be->upload(random_host({1, 4096, 320}, dtype, 7));
      const Tensor v = be->upload(random_host({1, 4096, 320}, dtype, 8));
      for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::bmm}) {
        ctx.attention.impl = impl;
        const double s = time_op(*be, [&] { ops::attention(ctx, q, k, v, 8, 1.0f / std::sqrt(40.0f)); });
        rows.push_back({"attention_4096x8x40", 4.0 * 8 * 4096.0 * 4096.0 * 40, s});
        rows.back().name += impl == AttentionImpl::fused ? " (fused)" : " (bmm)";
      }
    }

    const double peak = measure_peak_flops();
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
