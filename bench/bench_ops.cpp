// Speed of the core ops on the selected device, beside PyTorch on the CPU run
// in the same bench and the machine's measured FP32 peak. Prints a table.
//
//   build/bench/bench_ops [--device D] [--no-torch] [--dtype f32|f16|bf16] [--only PREFIX[,PREFIX...]]
//                         [--shapes sd15 [--latent 64]] [--json FILE]
//
// The default set: GEMMs, 3x3 convs at the UNet's and the VAE's shapes (the
// VAE's 128-512 channels at 64-512 px of a 512x512 decode), attention, the
// transformer block's feed-forward projection with its GEGLU as two ops and
// fused, and the memory-bound ops (norms, activations, adds, upsampling) as a share of the
// memory bandwidth, measured in the same run right before and after each of
// them (bandwidth.hpp).
//
// --shapes sd15 times every distinct conv, linear and attention shape of one
// SD 1.5 UNet call instead (batch 2, bench/unet_shapes.hpp), each with its
// count in the call, so the table shows where a call's time goes by shape
// (`--only` keeps the rows whose name starts with one of its comma-separated
// prefixes, e.g. attention_2_4096_77, or geglu,upsample for memory-bound rows
// alone).
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
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "bandwidth.hpp"
#include "bench_util.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "peak_flops.hpp"
#include "unet_shapes.hpp"

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

// Seconds per call: one warm-up call (kernel builds), then repeats for >= 1 s; the median call (on a shared
// VM another guest takes the memory bus or a core for milliseconds at a time: a mean carries those).
double time_op(Backend& be, const std::function<void()>& fn) {
  fn();
  be.synchronize();
  std::vector<double> calls;
  const auto t0 = Clock::now();
  do {
    const auto t = Clock::now();
    fn();
    be.synchronize();
    calls.push_back(seconds_since(t));
  } while (seconds_since(t0) < 1.0 || calls.size() < 3);
  std::nth_element(calls.begin(), calls.begin() + calls.size() / 2, calls.end());
  return calls[calls.size() / 2];
}

// shapes_file: a JSON list of bench::OpShape::json() cases for torch_ops.py ("" for its own set).
std::string fmt_ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", s * 1e3);
  return b;
}
std::string fmt_ratio(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", r);
  return b;
}

std::map<std::string, double> run_torch(const std::string& shapes_file) {
  std::map<std::string, double> out;
  const auto j =
      bench::run_python_baseline("torch_ops.py", "2" + (shapes_file.empty() ? "" : " '" + shapes_file + "'"));
  if (!j) return out;
  for (auto it = j->begin(); it != j->end(); ++it) out[it.key()] = it.value().get<double>();
  return out;
}

std::vector<std::string> split_prefixes(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool has_prefix(const std::string& name, const std::vector<std::string>& prefixes) {
  return prefixes.empty() ||
         std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return name.rfind(p, 0) == 0; });
}

}  // namespace

int main(int argc, char** argv) {
  std::string pin = device_pin_from_env();
  bool torch = true;
  DType dtype = DType::f32;
  std::vector<std::string> only;  // run only the ops whose name starts with one of these (all when empty)
  std::string shapes;             // "sd15": the UNet's own shapes
  std::int64_t latent = 64;
  std::string json_path;  // --json: the rows, the peak and the bandwidth (bench_report reads it)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      pin = argv[++i];
    else if (a == "--no-torch")
      torch = false;
    else if (a == "--only" && i + 1 < argc)
      only = split_prefixes(argv[++i]);
    else if (a == "--shapes" && i + 1 < argc)
      shapes = argv[++i];
    else if (a == "--latent" && i + 1 < argc)
      latent = std::max(8, std::atoi(argv[++i]));
    else if (a == "--dtype" && i + 1 < argc)
      dtype = parse_dtype(argv[++i]).value_or(DType::f32);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: bench_ops [--device D] [--no-torch] [--dtype f32|f16|bf16] [--only PREFIX[,PREFIX...]] "
                   "[--shapes sd15 [--latent 64]] [--json FILE]\n");
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

    if (!shapes.empty() && shapes != "sd15") throw ConfigError("--shapes takes sd15");
    struct Row {
      std::string name;
      double flops;
      double ours;
      int count = 0;           // --shapes: occurrences in one UNet call
      double bytes = 0.0;      // memory-bound rows: the bytes the op must read and write at least
      bool winograd = false;   // a convolution the backend runs as Winograd: its rate counts the direct work
      double bandwidth = 0.0;  // memory-bound rows: the machine's bandwidth measured beside the op (bytes/s)
    };
    // Whether the backend runs this convolution as Winograd (Backend::conv2d_winograd, as the device probe asks).
    const auto winograd = [&](const Tensor& x, const Tensor& w, int stride, int pad) {
      const auto& xs = x.shape();
      const auto& ws = w.shape();
      const std::int64_t oh = (xs[2] + 2 * pad - ws[2]) / stride + 1, ow = (xs[3] + 2 * pad - ws[3]) / stride + 1;
      Tensor out;
      return be->conv2d_winograd(Conv2dArgs{x, w, nullptr, out, xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], oh, ow,
                                            stride, pad, ctx.precision});
    };
    std::vector<Row> rows;
    std::string shapes_file;
    if (!shapes.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const bench::OpShape& sh : bench::sd15_unet_shapes(latent)) {
        if (!has_prefix(sh.name(), only)) continue;
        const auto& p = sh.p;
        double s = 0;
        bool wino = false;
        if (sh.kind == "conv") {
          const Tensor x = be->upload(random_host({p[0], p[1], p[2], p[3]}, dtype, 3));
          const Tensor w = be->upload(random_host({p[4], p[1], p[5], p[5]}, dtype, 4));
          const Tensor bias = be->upload(random_host({p[4]}, dtype, 5));
          s = time_op(*be, [&] { ops::conv2d(ctx, x, w, &bias, int(p[6]), int(p[5] / 2)); });
          wino = winograd(x, w, int(p[6]), int(p[5] / 2));
        } else if (sh.kind == "linear") {
          const Tensor x = be->upload(random_host({p[0], p[1]}, dtype, 3));
          const Tensor w = be->upload(random_host({p[2], p[1]}, dtype, 4));
          const Tensor bias = be->upload(random_host({p[2]}, dtype, 5));
          s = time_op(*be, [&] { ops::linear(ctx, x, w, &bias); });
        } else {
          const Tensor q = be->upload(random_host({p[0], p[1], p[3] * p[4]}, dtype, 6));
          const Tensor k = be->upload(random_host({p[0], p[2], p[3] * p[4]}, dtype, 7));
          const Tensor v = be->upload(random_host({p[0], p[2], p[3] * p[4]}, dtype, 8));
          s = time_op(*be, [&] { ops::attention(ctx, q, k, v, int(p[3]), 1.0f / std::sqrt(float(p[4]))); });
        }
        rows.push_back({sh.name(), sh.flops(), s, sh.count, 0.0, wino});
        list.push_back(sh.json());
      }
      shapes_file =
          (std::filesystem::temp_directory_path() / ("bench_ops_shapes_" + std::to_string(::getpid()) + ".json"))
              .string();
      std::ofstream(shapes_file) << list.dump();
    }
    const auto wanted = [&](const std::string& name) { return has_prefix(name, only); };
    for (int size : {1024, 2048}) {
      if (!shapes.empty() || !wanted("gemm_" + std::to_string(size))) continue;
      const Tensor a = be->upload(random_host({size, size}, dtype, 1));
      const Tensor b = be->upload(random_host({size, size}, dtype, 2));
      const double s = time_op(*be, [&] { ops::matmul(ctx, a, b); });
      rows.push_back({"gemm_" + std::to_string(size), 2.0 * size * size * size, s});
    }
    // The UNet's 320-channel 3x3 conv at latent 64, then the VAE decoder's at a 512x512 decode, then those a
    // 1024x1024 decode adds.
    for (const auto& [ch, res] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {320, 64}, {512, 64}, {512, 128}, {256, 256}, {128, 512}, {512, 256}, {256, 512}, {128, 1024}}) {
      const std::string name = "conv3x3_" + std::to_string(ch) + "_" + std::to_string(res);
      if (!shapes.empty() || !wanted(name)) continue;
      const Tensor x = be->upload(random_host({1, ch, res, res}, dtype, 3));
      const Tensor w = be->upload(random_host({ch, ch, 3, 3}, dtype, 4));
      const Tensor bias = be->upload(random_host({ch}, dtype, 5));
      const double s = time_op(*be, [&] { ops::conv2d(ctx, x, w, &bias, 1, 1); });
      rows.push_back({name, 2.0 * double(ch * ch * 9) * double(res * res), s, 0, 0.0, winograd(x, w, 1, 1)});
    }
    // SD 1.x self-attention at 256x256, 512x512 and 1024x1024 images (8 heads x 40), then the VAE mid-block's
    // one 512-wide head at 512x512 and 1024x1024 decodes. The materialised bmm path only up to 4096 tokens: at
    // 16384 its 8 score matrices alone are 8.6 GB.
    struct Attn {
      std::int64_t tokens, heads, d;
    };
    for (const Attn& a :
         {Attn{1024, 8, 40}, Attn{4096, 8, 40}, Attn{16384, 8, 40}, Attn{4096, 1, 512}, Attn{16384, 1, 512}}) {
      const std::string name =
          "attention_" + std::to_string(a.tokens) + "x" + std::to_string(a.heads) + "x" + std::to_string(a.d);
      if (!shapes.empty() || !wanted(name)) continue;
      const Tensor q = be->upload(random_host({1, a.tokens, a.heads * a.d}, dtype, 6));
      const Tensor k = be->upload(random_host({1, a.tokens, a.heads * a.d}, dtype, 7));
      const Tensor v = be->upload(random_host({1, a.tokens, a.heads * a.d}, dtype, 8));
      const float scale = 1.0f / std::sqrt(static_cast<float>(a.d));
      for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::bmm}) {
        if (impl == AttentionImpl::bmm && a.tokens > 4096) continue;
        ctx.attention.impl = impl;
        const double s = time_op(*be, [&] { ops::attention(ctx, q, k, v, int(a.heads), scale); });
        rows.push_back({name, 4.0 * double(a.heads) * double(a.tokens) * double(a.tokens) * double(a.d), s});
        rows.back().name += impl == AttentionImpl::fused ? " (fused)" : " (bmm)";
      }
    }
    // The UNet's feed-forward projection and its GEGLU (batch 2, latent 64: 8192 tokens of 320) as the two ops
    // and as one (the GEMM's epilogue, ops::linear_geglu; where the backend cannot fuse, both rows run the two
    // ops). Each variant has its own weight: a weight keeps one packed view.
    if (shapes.empty() && wanted("ff_proj_geglu_8192_320_2560")) {
      const Tensor x = be->upload(random_host({2, 4096, 320}, dtype, 3));
      const Tensor w1 = be->upload(random_host({2560, 320}, dtype, 4)),
                   w2 = be->upload(random_host({2560, 320}, dtype, 4));
      const Tensor bias = be->upload(random_host({2560}, dtype, 5));
      const double flops = 2.0 * 8192 * 320 * 2560;
      rows.push_back({"ff_proj_geglu_8192_320_2560 (two ops)", flops,
                      time_op(*be, [&] { ops::geglu(ctx, ops::linear(ctx, x, w1, &bias)); })});
      rows.push_back({"ff_proj_geglu_8192_320_2560 (fused)", flops,
                      time_op(*be, [&] { ops::linear_geglu(ctx, ctx, x, w2, &bias); })});
    }
    // Memory-bound ops at the UNet's shapes (batch 2, latent 64) and the VAE's (512x512 decode).
    // Bytes: what the op must read and write at least, each element once.
    const double es = static_cast<double>(dtype_size(dtype));
    // Each op's share is of the bandwidth measured right before and right
    // after it, the better of the two (bandwidth.hpp: the VM's drifts).
    std::unique_ptr<bench::BandwidthMeter> meter;
    const auto memory_row = [&](const std::string& name, const Shape& shape, double passes,
                                const std::function<void(const Tensor&)>& op) {
      if (!shapes.empty() || !wanted(name)) return;
      if (!meter) meter = std::make_unique<bench::BandwidthMeter>();
      const Tensor x = be->upload(random_host(shape, dtype, 9));
      const double before = meter->measure();
      const double s = time_op(*be, [&] { op(x); });
      const double bandwidth = std::max(before, meter->measure());
      rows.push_back({name, 0.0, s, 0, passes * static_cast<double>(shape_numel(shape)) * es, false, bandwidth});
    };
    const Tensor gamma320 = be->upload(random_host({320}, dtype, 10)),
                 beta320 = be->upload(random_host({320}, dtype, 11));
    const Tensor gamma128 = be->upload(random_host({128}, dtype, 12)),
                 beta128 = be->upload(random_host({128}, dtype, 13));
    memory_row("group_norm_2x320x64x64", {2, 320, 64, 64}, 2,
               [&](const Tensor& x) { ops::group_norm(ctx, x, 32, &gamma320, &beta320, 1e-5f); });
    memory_row("group_norm_1x128x512x512", {1, 128, 512, 512}, 2,
               [&](const Tensor& x) { ops::group_norm(ctx, x, 32, &gamma128, &beta128, 1e-6f); });
    memory_row("layer_norm_2x4096x320", {2, 4096, 320}, 2,
               [&](const Tensor& x) { ops::layer_norm(ctx, x, &gamma320, &beta320, 1e-5f); });
    memory_row("silu_2x320x64x64", {2, 320, 64, 64}, 2, [&](const Tensor& x) { ops::silu(ctx, x); });
    const Tensor residual = be->upload(random_host({2, 320, 64, 64}, dtype, 14));
    memory_row("add_2x320x64x64", {2, 320, 64, 64}, 3, [&](const Tensor& x) { ops::add(ctx, x, residual); });
    memory_row("geglu_2x4096x2560", {2, 4096, 2560}, 1.5, [&](const Tensor& x) { ops::geglu(ctx, x); });
    memory_row("upsample2x_1x512x128x128", {1, 512, 128, 128}, 5,
               [&](const Tensor& x) { ops::upsample_nearest2x(ctx, x); });

    const double peak = std::max(peak_before, bench::measure_peak_flops());
    const double block = bench::measure_gemm_block_flops();
    meter.reset();
    const bool memory_rows = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.bytes > 0; });
    double bandwidth = 0.0, bandwidth_low = 0.0;  // the best and the lowest of the rows' measurements
    for (const auto& r : rows) {
      if (r.bytes <= 0) continue;
      bandwidth = std::max(bandwidth, r.bandwidth);
      bandwidth_low = bandwidth_low > 0 ? std::min(bandwidth_low, r.bandwidth) : r.bandwidth;
    }
    std::map<std::string, double> ref;
    if (torch) ref = run_torch(shapes_file);
    if (!shapes_file.empty()) std::filesystem::remove(shapes_file);

    std::printf("\nbench_ops on \"%s\" (%s storage), FP32 peak of this CPU: %.0f GFLOP/s\n\n", dev.name.c_str(),
                std::string(dtype_name(dtype)).c_str(), peak / 1e9);
    std::printf(
        "The CPU GEMM's register block alone (operands in L1, no memory traffic): %.0f GFLOP/s, %.0f%% of "
        "the peak.\n\n",
        block / 1e9, 100.0 * block / peak);
    const bool counted = !shapes.empty();
    if (counted) {
      std::printf(
          "SD 1.5 UNet call at latent %lld, batch 2: every distinct shape, with its count in the call\n"
          "(conv: n c h w -> o, k, stride; linear: rows in out; attention: batch, queries, keys, heads, d)\n\n",
          static_cast<long long>(latent));
      std::printf(
          "| op | count | ours ms | ours GFLOP/s | %% of peak | PyTorch ms | PyTorch / ours | ours ms x count |\n");
      std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
      std::printf("| op | ours ms | ours GFLOP/s | %% of peak | PyTorch ms | PyTorch / ours |\n");
      std::printf("|---|---:|---:|---:|---:|---:|\n");
    }
    double ours_call = 0, torch_call = 0, flops_call = 0;
    bool torch_all = true;
    for (const auto& r : rows) {
      if (r.bytes > 0) continue;  // the memory-bound table below
      const std::string key = r.name.substr(0, r.name.find(' '));
      const auto it = ref.find(key);
      const double gf = r.flops / r.ours / 1e9;
      const std::string theirs = it != ref.end() ? fmt_ms(it->second) : "-";
      const std::string ratio = it != ref.end() ? fmt_ratio(it->second / r.ours) : "-";
      if (counted) {
        ours_call += r.ours * r.count;
        flops_call += r.flops * r.count;
        if (it != ref.end()) torch_call += it->second * r.count;
        torch_all = torch_all && it != ref.end();
        std::printf("| %s | %d | %.2f | %.1f | %.0f%%%s | %s | %s | %.1f |\n", r.name.c_str(), r.count, r.ours * 1e3,
                    gf, 100.0 * gf * 1e9 / peak, r.winograd ? " *" : "", theirs.c_str(), ratio.c_str(),
                    r.ours * r.count * 1e3);
      } else {
        std::printf("| %s | %.2f | %.1f | %.0f%%%s | %s | %s |\n", r.name.c_str(), r.ours * 1e3, gf,
                    100.0 * gf * 1e9 / peak, r.winograd ? " *" : "", theirs.c_str(), ratio.c_str());
      }
    }
    if (counted && ours_call > 0) {
      std::printf("\nSum over %s: ours %.2f s (%.0f GFLOP, %.0f%% of peak)",
                  only.empty() ? "the call" : "these rows (--only)", ours_call, flops_call / 1e9,
                  100.0 * flops_call / ours_call / peak);
      if (torch_all && torch_call > 0) std::printf(", PyTorch %.2f s (%.2fx)", torch_call, torch_call / ours_call);
      std::printf("; norms, activations and adds are not in these rows.\n");
    }
    if (memory_rows) {
      std::printf(
          "\nMemory-bound ops; memory bandwidth of this machine %.1f-%.1f GB/s (STREAM scale, all cores, measured\n"
          "right before and after each op, the better of the two is the row's; bytes: each element the op must\n"
          "read or write, once)\n\n",
          bandwidth_low / 1e9, bandwidth / 1e9);
      std::printf("| op | ours ms | ours GB/s | bandwidth GB/s | %% of bandwidth | PyTorch ms | PyTorch / ours |\n");
      std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
      for (const auto& r : rows) {
        if (r.bytes <= 0) continue;
        const auto it = ref.find(r.name);
        const double gbs = r.bytes / r.ours / 1e9;
        std::printf("| %s | %.2f | %.1f | %.1f | %.0f%% | %s | %s |\n", r.name.c_str(), r.ours * 1e3, gbs,
                    r.bandwidth / 1e9, 100.0 * gbs * 1e9 / r.bandwidth,
                    it != ref.end() ? fmt_ms(it->second).c_str() : "-",
                    it != ref.end() ? fmt_ratio(it->second / r.ours).c_str() : "-");
      }
    }
    std::printf("\n(PyTorch / ours > 1 means NaNscope is faster.)\n");
    if (std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.winograd; })) {
      std::printf(
          "* GFLOP/s count the convolution's direct multiply-adds: NaNscope ran it as Winograd F(4x4, 3x3), 4x "
          "fewer\n(NANSCOPE_WINOGRAD=0: direct), so the rate is an effective one and may pass the peak.\n");
    }
    if (torch) std::printf("%s.\n", bench::best_openblas_coretype().report.c_str());

    nlohmann::json out = {{"bench", "ops"},
                          {"device", dev.name},
                          {"dtype", std::string(dtype_name(dtype))},
                          {"shapes", shapes},
                          {"peak_gflops", peak / 1e9},
                          {"gemm_block_gflops", block / 1e9},
                          {"bandwidth_gbs", bandwidth / 1e9},
                          {"rows", nlohmann::json::array()}};
    for (const auto& r : rows) {
      nlohmann::json row = {{"name", r.name}, {"ms", r.ours * 1e3}};
      if (r.bytes > 0) {
        row["gbs"] = r.bytes / r.ours / 1e9;
        row["bandwidth_gbs"] = r.bandwidth / 1e9;
        row["pct_bandwidth"] = 100.0 * r.bytes / r.ours / r.bandwidth;
      } else {
        row["gflops"] = r.flops / r.ours / 1e9;
        row["pct_peak"] = 100.0 * r.flops / r.ours / peak;
      }
      if (r.count) row["count"] = r.count;
      if (r.winograd) row["winograd"] = true;
      if (const auto it = ref.find(r.name.substr(0, r.name.find(' '))); it != ref.end())
        row["torch_ms"] = it->second * 1e3;
      out["rows"].push_back(row);
    }
    if (!bench::write_json_file(json_path, out)) return 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
