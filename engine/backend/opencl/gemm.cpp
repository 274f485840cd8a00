#include "backend/opencl/gemm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::opencl::gemm {

using detail::ceil_div;
using detail::to_uint;

namespace {

// The tuning table. CPU entries: rows x columns of the per-work-item block,
// sized to the vector register file (AVX2: 16 ymm -> 6 x 16 floats in 12
// accumulators; AVX-512: 32 zmm -> 8 x 32 in 16). GPU entries: tile sizes per
// vendor; 256 work-items per group unless the device allows fewer.
struct Entry {
  std::string_view vendor;  // substring of the vendor name, "" = any
  DeviceKind kind;
  int native_float_width;  // CPU entries: minimum CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT; 0 = any
  Tuning t;
};

const Entry kTable[] = {
    {"", DeviceKind::cpu, 16, {8, 2, 512, 64, 64, 16, 4, 4, "cpu, 16-wide float vectors"}},
    {"", DeviceKind::cpu, 0, {6, 1, 256, 64, 64, 16, 4, 4, "cpu, default"}},
    {"NVIDIA", DeviceKind::gpu, 0, {6, 1, 256, 128, 128, 16, 8, 8, "gpu, NVIDIA"}},
    {"Advanced Micro Devices", DeviceKind::gpu, 0, {6, 1, 256, 64, 64, 16, 4, 4, "gpu, AMD"}},
    {"Intel", DeviceKind::gpu, 0, {6, 1, 256, 32, 64, 16, 2, 4, "gpu, Intel"}},
    {"", DeviceKind::gpu, 0, {6, 1, 256, 32, 32, 16, 2, 2, "gpu, default"}},
};
const Tuning kSmallGroups{6, 1, 256, 32, 32, 8, 4, 4, "small work-groups (64)"};
// GPU tiles for problems too small to fill the device with the table's tiles.
const Tuning kSmallTiles{6, 1, 256, 64, 64, 16, 4, 4, "gpu, small problems"};
// GPU tiles where the GPU style runs on a device that is not a GPU (forced on a
// CPU to test the GPU kernels there; the Oclgrind simulator): the largest tiles
// of the table, so they are the ones tested, for the problems that fill them
// (tiles_for).
const Tuning kForcedGpuTiles{6, 1, 256, 128, 128, 16, 8, 8, "gpu style forced on a CPU device"};
const Tuning kDefaults{};  // kernels/matmul.cl's defaults: no -D needed

bool vendor_matches(std::string_view vendor, std::string_view needle) {
  return needle.empty() || vendor.find(needle) != std::string_view::npos;
}

Tuning lookup(const DeviceInfo& device) {
  const DeviceKind kind = device.kind == DeviceKind::accelerator ? DeviceKind::gpu
                          : device.kind == DeviceKind::gpu       ? DeviceKind::gpu
                                                                 : DeviceKind::cpu;
  const int width = native_float_width(device);
  Tuning t = kDefaults;
  for (const Entry& e : kTable) {
    if (e.kind != kind || !vendor_matches(device.vendor, e.vendor)) continue;
    if (e.native_float_width && width < e.native_float_width) continue;
    t = e.t;
    break;
  }
  // For measuring other CPU blockings on a new machine (bench/README.md): MR,NV,KC.
  if (const char* v = std::getenv("NANSCOPE_GEMM_CPU"); v && *v && kind == DeviceKind::cpu) {
    int mr = 0, nv = 0, kc = 0;
    if (std::sscanf(v, "%d,%d,%d", &mr, &nv, &kc) == 3 && (mr == 4 || mr == 6 || mr == 8) && (nv >= 1 && nv <= 3) &&
        kc >= 16 && kc % 16 == 0) {
      t.mr = mr, t.nv = nv, t.kc = kc, t.source = "NANSCOPE_GEMM_CPU";
    } else {
      log::warn("NANSCOPE_GEMM_CPU={} is not MR,NV,KC (MR 4, 6 or 8; NV 1, 2 or 3; KC a multiple of 16); ignored", v);
    }
  }
  const std::size_t group = static_cast<std::size_t>(t.ts_m / t.wpt_m) * static_cast<std::size_t>(t.ts_n / t.wpt_n);
  if (device.max_work_group_size && device.max_work_group_size < group) {
    const int mr = t.mr, nv = t.nv, kc = t.kc;
    t = kSmallGroups;
    t.mr = mr, t.nv = nv, t.kc = kc;
  }
  return t;
}

}  // namespace

int native_float_width(const DeviceInfo& device) {
  cl_uint width = 0;
  if (!device.cl_device ||
      clGetDeviceInfo(static_cast<cl_device_id>(device.cl_device), CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof(width),
                      &width, nullptr) != CL_SUCCESS) {
    return 0;
  }
  return static_cast<int>(width);
}

const Tuning& tuning(const DeviceInfo& device) {
  // One lookup per device for the process (the table is static).
  static std::mutex mutex;
  static std::vector<std::pair<std::string, Tuning>> cache;
  std::lock_guard lock(mutex);
  const std::string key = device.id + "|" + device.name + "|" + device.driver_version;
  for (const auto& [k, t] : cache) {
    if (k == key) return t;
  }
  cache.emplace_back(key, lookup(device));
  const Tuning& t = cache.back().second;
  log::debug("GEMM tuning for \"{}\": {} (panels {}x{}, tiles {}x{}x{} / {}x{})", device.name, t.source, t.mr, t.nr(),
             t.ts_m, t.ts_n, t.ts_k, t.wpt_m, t.wpt_n);
  return t;
}

std::string tuning_options(const Tuning& t) {
  std::string o;
  if (t.mr != kDefaults.mr || t.nv != kDefaults.nv) {
    o += " -DGEMM_MR=" + std::to_string(t.mr) + " -DGEMM_NV=" + std::to_string(t.nv);
  }
  if (t.ts_m != kDefaults.ts_m || t.ts_n != kDefaults.ts_n || t.ts_k != kDefaults.ts_k || t.wpt_m != kDefaults.wpt_m ||
      t.wpt_n != kDefaults.wpt_n) {
    o += " -DTS_M=" + std::to_string(t.ts_m) + " -DTS_N=" + std::to_string(t.ts_n) +
         " -DTS_K=" + std::to_string(t.ts_k) + " -DWPT_M=" + std::to_string(t.wpt_m) +
         " -DWPT_N=" + std::to_string(t.wpt_n);
  }
  return o;
}

std::int64_t a_panel_floats(const Tuning& t, std::int64_t m, std::int64_t k) {
  return static_cast<std::int64_t>(ceil_div(m, t.mr)) * t.mr * k;
}
std::int64_t b_panel_floats(const Tuning& t, std::int64_t n, std::int64_t k) {
  return static_cast<std::int64_t>(ceil_div(n, t.nr())) * t.nr() * k;
}

std::int64_t k_block(const Tuning& t, std::int64_t k) {
  if (k <= t.kc + t.kc / 2) return k;  // one block: no pass overhead
  const std::int64_t passes = static_cast<std::int64_t>(ceil_div(k, t.kc));
  return static_cast<std::int64_t>(ceil_div(static_cast<std::int64_t>(ceil_div(k, passes)), 16)) * 16;
}

namespace {

// The GEMM program options for a precision and a tile set. GEMM and im2col
// kernels never touch softmax values: one program serves both softmax settings
// (precompile built four redundant matmul and conv2d variants). Each kernel
// family's programs leave the other family's compute kernels out (matmul.cl
// CPU_KERNELS, GPU_KERNELS): a compiler builds every kernel of a program (PoCL
// when the cache asks for the binary; NVIDIA's always). gemm_cpu stays in both:
// the attention's bmm path multiplies packed panels with it in either family.
// CPU_PREFETCH: the CPU family's stores prefetch C (gemm_cpu.cl GEMM_PREFETCH_ROW) on a CPU device only, where
// the prefetch is an instruction (Oclgrind, which also runs that family, refuses LLVM's prefetch intrinsic).
std::string options_with(const OpenClBackend& be, const Precision& p, const Tuning& t) {
  Precision q = p;
  q.softmax = SoftmaxPrecision::f32;
  const bool cpu = be.kernel_style() == KernelStyle::cpu;
  return be.precision_options(q) + tuning_options(t) + (cpu ? " -DCPU_KERNELS" : " -DGPU_KERNELS") +
         (cpu && be.device().kind == DeviceKind::cpu ? " -DCPU_PREFETCH" : "");
}

}  // namespace

std::string options(OpenClBackend& be, const Precision& p) { return options_with(be, p, tuning(be.device())); }

bool uses_panels(const OpenClBackend& be, const Precision& p) {
  return p.native_accumulation() || be.kernel_style() == KernelStyle::cpu;
}

std::size_t scratch_budget(const DeviceInfo& device) {
  std::size_t budget = std::size_t{256} << 20;
  if (device.max_alloc_bytes) budget = std::min<std::size_t>(budget, device.max_alloc_bytes / 2);
  return std::max<std::size_t>(budget, std::size_t{16} << 20);
}

std::string packed_a_options(OpenClBackend& be, const Precision& p) {
  std::string o = options(be, p);
  if (be.kernel_style() == KernelStyle::cpu && !p.native_accumulation()) o += " -DGEMM_PACKED_A";
  return o;
}

namespace {
[[maybe_unused]] const bool kRegisteredPackedA =
    (register_program_more_variants(
         "matmul",
         [](OpenClBackend& be, const Precision& p) { return std::vector<std::string>{packed_a_options(be, p)}; }),
     true);
}  // namespace

void pack_a(OpenClBackend& be, const Precision& p, const Operand& a, std::int64_t batch, std::int64_t m, std::int64_t k,
            cl_mem dst, std::int64_t dst_bs, const char* op) {
  const Tuning& t = tuning(be.device());
  cl_kernel kern = be.kernel("matmul", "gemm_pack_a", packed_a_options(be, p));
  OpenClBackend::set_args(kern, a.mem, cl_ulong(a.off), cl_ulong(a.bs), cl_ulong(a.rs), cl_ulong(a.cs), dst,
                          cl_ulong(dst_bs), to_uint(m, op, "m"), to_uint(k, op, "k"), to_uint(k_block(t, k), op, "kc"));
  const size_t global[3] = {ceil_div(k, 16), ceil_div(m, t.mr), static_cast<size_t>(batch)};
  be.launch(kern, op, 3, global, nullptr);
}

void pack_b(OpenClBackend& be, const std::string& options, const Operand& b, std::int64_t batch, std::int64_t k,
            std::int64_t n, cl_mem dst, std::int64_t dst_bs, const char* op, std::int64_t split) {
  const Tuning& t = tuning(be.device());
  if (split != 0 && (split * 2 != t.nr() || n % t.nr() != 0 || b.cs == 1)) {
    throw OpError(std::string(op) + ": GEGLU panels need B's columns contiguous along k and n (" + std::to_string(n) +
                  ") a multiple of " + std::to_string(t.nr()));
  }
  cl_kernel kern = be.kernel("matmul", "gemm_pack_b", options);
  OpenClBackend::set_args(kern, b.mem, cl_ulong(b.off), cl_ulong(b.bs), cl_ulong(b.rs), cl_ulong(b.cs), dst,
                          cl_ulong(dst_bs), to_uint(n, op, "n"), to_uint(k, op, "k"), to_uint(k_block(t, k), op, "kc"),
                          cl_uint(split));
  const size_t global[3] = {ceil_div(k, 16), ceil_div(n, t.nr()), static_cast<size_t>(batch)};
  be.launch(kern, op, 3, global, nullptr);
}

namespace {

// Where gemm_cpu reads A: packed panels (a_blocks panels per batch), or the
// operand itself (gemm_cpu_direct_a: unit column stride).
struct ASource {
  cl_mem mem = nullptr;
  std::int64_t off = 0, bs = 0;
  bool direct = false;
  std::int64_t lda = 0;   // direct only
  bool f32_rows = false;  // direct only: f32 rows a half-precision build reads (gemm_cpu_direct_f32a)
};

// Row blocks per work-item of the panel kernels (of a_blocks, next to `columns` column panels x batches): many
// for cache reuse (at most max_blocks), few enough to keep every core busy. (Equal groups: an uneven last group
// would leave a thread idle at the end of the launch.)
std::int64_t row_group(std::int64_t a_blocks, std::int64_t columns, std::int64_t max_blocks = 16) {
  std::int64_t groups = static_cast<std::int64_t>(ceil_div(a_blocks, max_blocks));
  while (groups < a_blocks && columns * groups < 64) groups *= 2;
  groups = std::min(groups, a_blocks);
  return static_cast<std::int64_t>(ceil_div(a_blocks, groups));
}

void compute_blocks(OpenClBackend& be, const Precision& p, const ASource& src, const Problem& pr, const char* op) {
  const Tuning& t = tuning(be.device());
  const std::int64_t a_blocks = static_cast<std::int64_t>(ceil_div(pr.m, t.mr));
  const std::int64_t b_blocks = static_cast<std::int64_t>(ceil_div(pr.n, t.nr()));
  const std::int64_t kc = k_block(t, pr.k);
  if (p.native_accumulation()) {
    cl_kernel kern = be.kernel("matmul", "gemm_native", options(be, p));
    OpenClBackend::set_args(kern, src.mem, cl_ulong(src.off), cl_ulong(src.bs), cl_uint(a_blocks), pr.b_panels,
                            cl_ulong(pr.b_panels_off), cl_ulong(pr.b_panels_bs), cl_uint(b_blocks),
                            to_uint(kc, op, "kc"), pr.bias, cl_ulong(pr.bias_off), cl_int(pr.bias_mode), pr.c,
                            cl_ulong(pr.c_off), cl_ulong(pr.c_bs), cl_ulong(pr.ldc), to_uint(pr.m, op, "m"),
                            to_uint(pr.n, op, "n"), to_uint(pr.k, op, "k"), pr.alpha);
    const size_t global[3] = {static_cast<size_t>(b_blocks), static_cast<size_t>(a_blocks),
                              static_cast<size_t>(pr.batch)};
    be.launch(kern, op, 3, global, nullptr);
    return;
  }
  if (pr.epilogue == Epilogue::geglu && !src.direct) {
    throw OpError(std::string(op) + ": GEGLU's epilogue needs the kernel that reads A where it lies");
  }
  const bool geglu = pr.epilogue == Epilogue::geglu;
  const char* direct_name = src.f32_rows ? (geglu ? "gemm_cpu_direct_f32a_geglu" : "gemm_cpu_direct_f32a")
                                         : (geglu ? "gemm_cpu_direct_a_geglu" : "gemm_cpu_direct_a");
  cl_kernel kern = src.direct ? be.kernel("matmul", direct_name, options(be, p))
                              : be.kernel("matmul", "gemm_cpu", packed_a_options(be, p));
  // One launch for every k-block: each work-item keeps its blocks' running sums in local memory between them.
  const std::int64_t block_floats = static_cast<std::int64_t>(t.mr) * t.nr();
  std::int64_t max_blocks = 16;
  if (const std::uint64_t local = be.device().local_mem_bytes) {
    max_blocks =
        std::clamp<std::int64_t>(static_cast<std::int64_t>(local / 2 / (block_floats * sizeof(float))), 1, max_blocks);
  }
  const std::int64_t mgroup = row_group(a_blocks, b_blocks * pr.batch, max_blocks);
  if (src.direct) {
    OpenClBackend::set_args(kern, src.mem, cl_ulong(src.off), cl_ulong(src.bs), cl_ulong(src.lda));
  } else {
    OpenClBackend::set_args(kern, src.mem, cl_ulong(src.off), cl_ulong(src.bs), cl_uint(a_blocks));
  }
  OpenClBackend::set_args_from(kern, 4, pr.b_panels, cl_ulong(pr.b_panels_off), cl_ulong(pr.b_panels_bs),
                               cl_uint(b_blocks), LocalMem{static_cast<size_t>(mgroup * block_floats) * sizeof(float)},
                               to_uint(pr.k, op, "k"), to_uint(kc, op, "kc"), cl_uint(mgroup), pr.bias,
                               cl_ulong(pr.bias_off), cl_int(pr.bias_mode), pr.c, cl_ulong(pr.c_off), cl_ulong(pr.c_bs),
                               cl_ulong(pr.ldc), to_uint(pr.m, op, "m"), to_uint(pr.n, op, "n"), pr.alpha);
  const size_t global[3] = {static_cast<size_t>(b_blocks), ceil_div(a_blocks, mgroup), static_cast<size_t>(pr.batch)};
  // One work-item per group on any device: its local memory holds that work-item's sums.
  const size_t local[3] = {1, 1, 1};
  be.launch(kern, op, 3, global, local);
}

}  // namespace

void compute_panels(OpenClBackend& be, const Precision& p, cl_mem a_panels, std::int64_t a_panels_off,
                    std::int64_t a_panels_bs, const Problem& pr, const char* op) {
  compute_blocks(be, p, ASource{a_panels, a_panels_off, a_panels_bs}, pr, op);
}

bool reads_a_directly(const OpenClBackend& be, const Precision& p, const Operand& a) {
  // Every storage dtype: f16 / bf16 rows are converted to f32 in the kernel (exactly, as gemm_pack_a
  // does), so half-precision weights are no longer packed into f32 panels on every call.
  return !p.native_accumulation() && be.kernel_style() == KernelStyle::cpu && a.cs == 1;
}

namespace {

// gemm_a_rows_to_f32's chunk: about 8 MB of f32 rows, in whole row groups of 16 blocks.
constexpr std::int64_t kChunkFloats = std::int64_t{2} << 20;
std::int64_t group_rows(const Tuning& t) { return std::int64_t{16} * t.mr; }
std::int64_t chunk_groups(const Tuning& t, std::int64_t k) {
  return kChunkFloats / (std::max<std::int64_t>(1, k) * group_rows(t));
}

}  // namespace

bool converts_a_rows(const OpenClBackend& be, const Precision& p, const Operand& a, const Problem& pr) {
  const Tuning& t = tuning(be.device());
  // Half-precision A is converted to f32 rows where the GEMM would convert each row block again for every column
  // panel (of every batch, for an A the batches share): from 8 conversions a row on. With fewer, the rows' round
  // trip through the caches costs more (the UNet's 8x8 convolutions, whose 29 MB of f16 weights are read for 2
  // panels x 2 images, took longer converted first on a 2-core Zen 5).
  // Nor where a chunk would hold less than two row groups (k past 10922 on AVX2, 8192 on AVX-512: the UNet's
  // 1280- and 2560-input 3x3 convolutions at 8x8, through im2col): each chunk's GEMM then had one group's rows
  // for its 8 column panels, split into groups of 2 blocks to keep the cores busy, and read B's panels 8 times
  // per chunk; the 2560-input layer took 1.2-1.7x f32's time that way on a 2-core AVX2 Zen 3, about f32's
  // converted in the GEMM (bench_ops --shapes sd15 --dtype f16, alternating; bench/README.md 2026-12-07).
  if (p.dtype == DType::f32 || pr.batch * pr.m * pr.k == 0) return false;
  const std::int64_t reads = static_cast<std::int64_t>(ceil_div(pr.n, t.nr())) * (a.bs == 0 ? pr.batch : 1);
  const bool one_group_chunks = chunk_groups(t, pr.k) < 2 && pr.m > group_rows(t);
  return reads >= 8 && !one_group_chunks;
}

void compute_direct_a(OpenClBackend& be, const Precision& p, const Operand& a, const Problem& pr, const char* op) {
  if (!converts_a_rows(be, p, a, pr)) {
    compute_blocks(be, p, ASource{a.mem, a.off, a.bs, true, a.rs}, pr, op);
    return;
  }
  // In chunks of whole row groups of about 8 MB of f32 rows, which the GEMM reads back from the last-level cache
  // (the rows of a 8192 x 1280 activation written to memory and read back cost more than converting them per
  // panel), and each chunk's conversion writes into the cache lines the last one left there. A weight (shared by
  // the batches) is converted once for all of them.
  const Tuning& t = tuning(be.device());
  const bool shared = a.bs == 0;
  const std::int64_t mc = std::min(pr.m, std::max<std::int64_t>(1, chunk_groups(t, pr.k)) * group_rows(t));
  const std::int64_t bg = shared      ? pr.batch
                          : mc < pr.m ? 1
                                      : std::clamp<std::int64_t>(kChunkFloats / (pr.m * pr.k), 1, pr.batch);
  const std::int64_t copies = shared ? 1 : bg;
  detail::ScratchBuffer rows(be, static_cast<std::size_t>(copies * mc * pr.k) * sizeof(float),
                             std::string(op) + " A rows in f32");
  cl_kernel convert = be.kernel("matmul", "gemm_a_rows_to_f32", options(be, p));
  for (std::int64_t b0 = 0; b0 < pr.batch; b0 += bg) {
    const std::int64_t nb = std::min(bg, pr.batch - b0);
    for (std::int64_t m0 = 0; m0 < pr.m; m0 += mc) {
      const std::int64_t mm = std::min(mc, pr.m - m0);
      OpenClBackend::set_args(convert, a.mem, cl_ulong(a.off + b0 * a.bs + m0 * a.rs), cl_ulong(a.bs), cl_ulong(a.rs),
                              rows.mem(), to_uint(mm, op, "m"), to_uint(pr.k, op, "k"));
      const size_t global[2] = {static_cast<size_t>(mm), static_cast<size_t>(shared ? 1 : nb)};
      be.launch(convert, op, 2, global, nullptr);
      Problem chunk = pr;
      chunk.batch = nb;
      chunk.m = mm;
      chunk.b_panels_off = pr.b_panels_off + b0 * pr.b_panels_bs;
      chunk.c_off = pr.c_off + b0 * pr.c_bs + m0 * pr.ldc;
      chunk.bias_off = pr.bias_off + (pr.bias_mode == kBiasRow ? m0 : 0);
      compute_blocks(be, p, ASource{rows.mem(), 0, shared ? 0 : mm * pr.k, true, pr.k, true}, chunk, op);
    }
  }
}

std::string device_key(const DeviceInfo& d) { return d.id + "|" + d.name + "|" + d.driver_version; }

namespace {

// The tiles for one problem: the tuned or the table's, unless they would leave
// compute units idle where the smaller tiles would not (fewer groups than units).
// The GPU style forced on a device that is not a GPU has no units to fill: the
// largest tiles where the problem is larger than the small tiles both ways, the
// small tiles otherwise, as a GPU with tens of units picks for such problems.
// (Both are tested; the simulator does not interpret a 128x128 tile that is
// nine tenths padding for a 13 x 77 problem.)
Tuning tiles_for(const OpenClBackend& be, const Problem& pr) {
  const std::optional<Tuning> tuned = tuned_tiles(be);
  const bool gpu_device = be.device().kind == DeviceKind::gpu || be.device().kind == DeviceKind::accelerator;
  if (!tuned && !gpu_device) {
    return pr.m > kSmallTiles.ts_m && pr.n > kSmallTiles.ts_n ? kForcedGpuTiles : kSmallTiles;
  }
  const Tuning t = tuned ? *tuned : tuning(be.device());
  const auto groups = [&](const Tuning& x) {
    return static_cast<std::int64_t>(ceil_div(pr.m, x.ts_m) * ceil_div(pr.n, x.ts_n)) * pr.batch;
  };
  const std::size_t small_group = static_cast<std::size_t>(kSmallTiles.ts_m / kSmallTiles.wpt_m) *
                                  static_cast<std::size_t>(kSmallTiles.ts_n / kSmallTiles.wpt_n);
  const auto units = static_cast<std::int64_t>(std::max<std::uint32_t>(1, be.device().compute_units));
  if (t.ts_m * t.ts_n > kSmallTiles.ts_m * kSmallTiles.ts_n && groups(t) < units &&
      (!be.device().max_work_group_size || be.device().max_work_group_size >= small_group)) {
    return kSmallTiles;
  }
  return t;
}

}  // namespace

void run_tiled(OpenClBackend& be, const Precision& p, const Problem& pr, const Tuning& t, const char* op) {
  if (pr.a.cs != 1) throw OpError(std::string(op) + ": the tiled GEMM needs A with unit column stride");
  cl_kernel kern = be.kernel("matmul", "gemm_tiled", options_with(be, p, t));
  OpenClBackend::set_args(kern, pr.a.mem, cl_ulong(pr.a.off), cl_ulong(pr.a.bs), cl_ulong(pr.a.rs), pr.b.mem,
                          cl_ulong(pr.b.off), cl_ulong(pr.b.bs), cl_ulong(pr.b.rs), cl_ulong(pr.b.cs), pr.bias,
                          cl_ulong(pr.bias_off), cl_int(pr.bias_mode), pr.c, cl_ulong(pr.c_off), cl_ulong(pr.c_bs),
                          cl_ulong(pr.ldc), to_uint(pr.m, op, "m"), to_uint(pr.n, op, "n"), to_uint(pr.k, op, "k"),
                          pr.alpha);
  const size_t lx = static_cast<size_t>(t.ts_n / t.wpt_n), ly = static_cast<size_t>(t.ts_m / t.wpt_m);
  const size_t global[3] = {ceil_div(pr.n, t.ts_n) * lx, ceil_div(pr.m, t.ts_m) * ly, static_cast<size_t>(pr.batch)};
  const size_t local[3] = {lx, ly, 1};
  be.launch(kern, op, 3, global, local);
}

namespace {

// Devices (id|name|driver) whose tensor-core program failed to build or launch:
// gemm_tiled from then on (the failure is noted once on the backend).
std::mutex mma_failed_mutex;
std::vector<std::string> mma_failed;

std::optional<MmaTiles> mma_tiles_for(OpenClBackend& be, const Precision& p, std::int64_t batch, std::int64_t m,
                                      std::int64_t n, std::int64_t k) {
  if (!tensor_cores_for(be, p)) return std::nullopt;  // the device, precision and failure checks
  const DeviceInfo& d = be.device();
  TensorCoreCase c;
  c.gpu_style = be.kernel_style() == KernelStyle::gpu;
  c.allowed = be.tensor_cores_allowed();
  c.nv_compute_capability = be.tensor_cores_emulated() ? 80 : d.nv_compute_capability;
  c.dtype = p.dtype;
  c.native_accumulation = p.native_accumulation();
  c.batch = batch, c.m = m, c.n = n, c.k = k;
  c.compute_units = d.compute_units;
  c.max_work_group_size = d.max_work_group_size;
  return tensor_core_tiles(c);
}

std::string mma_options(OpenClBackend& be, const Precision& p, const MmaTiles& t) {
  return options(be, p) + " -DGEMM_MMA" + tensor_core_options(be) + " -DMMA_WARPS_M=" + std::to_string(t.warps_m) +
         " -DMMA_WARPS_N=" + std::to_string(t.warps_n);
}

bool run_mma(OpenClBackend& be, const Precision& p, const Problem& pr, const char* op) {
  const std::optional<MmaTiles> t = mma_tiles_for(be, p, pr.batch, pr.m, pr.n, pr.k);
  if (!t || pr.a.cs != 1) return false;
  return try_tensor_cores(be, op, [&] {
    cl_kernel kern = be.kernel("matmul", "gemm_mma", mma_options(be, p, *t));
    OpenClBackend::set_args(kern, pr.a.mem, cl_ulong(pr.a.off), cl_ulong(pr.a.bs), cl_ulong(pr.a.rs), pr.b.mem,
                            cl_ulong(pr.b.off), cl_ulong(pr.b.bs), cl_ulong(pr.b.rs), cl_ulong(pr.b.cs), pr.bias,
                            cl_ulong(pr.bias_off), cl_int(pr.bias_mode), pr.c, cl_ulong(pr.c_off), cl_ulong(pr.c_bs),
                            cl_ulong(pr.ldc), to_uint(pr.m, op, "m"), to_uint(pr.n, op, "n"), to_uint(pr.k, op, "k"),
                            pr.alpha);
    const auto threads = static_cast<size_t>(t->threads());
    const size_t global[3] = {ceil_div(pr.n, t->tn()) * threads, ceil_div(pr.m, t->tm()),
                              static_cast<size_t>(pr.batch)};
    const size_t local[3] = {threads, 1, 1};
    be.launch(kern, op, 3, global, local);
  });
}

}  // namespace

std::optional<MmaTiles> tensor_core_tiles(const TensorCoreCase& c) {
  if (!c.gpu_style || !c.allowed || c.nv_compute_capability < 80 || c.dtype != DType::f16 || c.native_accumulation) {
    return std::nullopt;
  }
  if (c.m < 64 || c.n < 64 || c.k < 32) return std::nullopt;  // too small to pay for the tiles: gemm_tiled
  const MmaTiles big{2, 4}, small{1, 4};
  const auto fits = [&](const MmaTiles& t) {
    return !c.max_work_group_size || c.max_work_group_size >= static_cast<std::size_t>(t.threads());
  };
  const auto blocks = static_cast<std::int64_t>(ceil_div(c.m, big.tm()) * ceil_div(c.n, big.tn())) * c.batch;
  if (fits(big) && blocks >= static_cast<std::int64_t>(c.compute_units)) return big;
  if (fits(small)) return small;
  return std::nullopt;
}

std::string tensor_core_options(const OpenClBackend& be) {
  return be.tensor_cores_emulated() ? " -DMMA_EMULATE" : " -DNS_ASM=asm -DMMA_PTX";
}

bool tensor_cores_for(const OpenClBackend& be, const Precision& p) {
  const DeviceInfo& d = be.device();
  if (be.kernel_style() != KernelStyle::gpu || !be.tensor_cores_allowed() || p.dtype != DType::f16 ||
      p.native_accumulation() || (!be.tensor_cores_emulated() && d.nv_compute_capability < 80)) {
    return false;
  }
  std::lock_guard lock(mma_failed_mutex);
  return std::find(mma_failed.begin(), mma_failed.end(), device_key(d)) == mma_failed.end();
}

bool try_tensor_cores(OpenClBackend& be, const char* op, const std::function<void()>& launch) {
  try {
    launch();
    return true;
  } catch (const ClError& e) {  // build or enqueue failure; bad arguments (OpError) are not the kernel's fault
    std::string why = e.what();
    if (const auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
    if (why.size() > 300) why = why.substr(0, 300) + "...";
    {
      std::lock_guard lock(mma_failed_mutex);
      mma_failed.push_back(device_key(be.device()));
    }
    be.note_fallback(std::string("tensor cores not used (") + op +
                     " and later f16 work run the CUDA-core kernels gemm_tiled and attention_flash): " + why);
    return false;
  }
}

namespace {

// dst[o][t][c] = src[o][c][t] for weights stored as `dtype` (o < o_count, c < c_count, t < taps):
// kernels/shape_ops.cl conv_weights_tap_major.
void transpose_taps(OpenClBackend& be, DType dtype, cl_mem src, cl_mem dst, std::int64_t o_count, std::int64_t c_count,
                    std::int64_t taps, const char* op) {
  cl_kernel k = be.kernel("shape_ops", "conv_weights_tap_major", be.precision_options(detail::storage_only(dtype)));
  OpenClBackend::set_args(k, src, dst, to_uint(c_count, op, "c"), to_uint(taps, op, "taps"));
  to_uint(o_count * c_count * taps, op, "o*c*taps");
  const size_t global[2] = {static_cast<size_t>(c_count), static_cast<size_t>(o_count)};
  be.launch(k, op, 2, global, nullptr);
}

// The implicit convolution as a GEMM, for the tile choice: M = output channels, N = output positions, per image.
Problem implicit_conv_problem(const ConvShape& s) {
  Problem shape;
  shape.batch = s.n;
  shape.m = s.o;
  shape.n = s.oh * s.ow;
  shape.k = s.c * s.kh * s.kw;
  return shape;
}

// conv_implicit_mma's blocks where it takes the convolution. It walks whole blocks of 32 input channels (fewer
// would be mostly padding: a first layer's 4 channels run on conv_implicit_gemm, a negligible share of a UNet),
// and its image offsets are 32-bit: 33 channel planes from a tile's first channel.
std::optional<MmaTiles> implicit_conv_mma(OpenClBackend& be, const Precision& p, const ConvShape& s) {
  const Problem shape = implicit_conv_problem(s);
  const bool mma_fits = s.c >= 32 && s.h * s.w * 33 < (std::int64_t{1} << 32);
  return mma_fits ? mma_tiles_for(be, p, shape.batch, shape.m, shape.n, shape.k) : std::nullopt;
}

}  // namespace

std::string conv_run_options(OpenClBackend& be, const Precision& p, const ConvShape& s) {
  if (uses_panels(be, p)) return options(be, p);
  if (const std::optional<MmaTiles> mt = implicit_conv_mma(be, p, s)) return mma_options(be, p, *mt);
  return options_with(be, p, tiles_for(be, implicit_conv_problem(s)));
}

void run_implicit_conv(OpenClBackend& be, const Precision& p, const ConvShape& s, cl_mem w, cl_mem x, cl_mem bias,
                       cl_mem out, const char* op) {
  const Problem shape = implicit_conv_problem(s);
  to_uint(shape.k, op, "c*kh*kw");
  // Both implicit-GEMM kernels walk k in blocks of input channels tap by tap and take the weights
  // tap-major, w[o][tap][c]: a copy per call (one read and one write of the weights; 0.8 ms per
  // SD 1.5 UNet call at 1024x1024 in f16 on an H200).
  const std::int64_t taps = s.kh * s.kw;
  std::optional<detail::ScratchBuffer> tap_major;
  if (taps > 1) {
    tap_major.emplace(be, static_cast<std::size_t>(s.o * shape.k) * dtype_size(p.dtype), std::string(op) + " weights");
    transpose_taps(be, p.dtype, w, tap_major->mem(), s.o, s.c, taps, op);
  }
  const cl_mem wt = tap_major ? tap_major->mem() : w;
  if (const std::optional<MmaTiles> mt = implicit_conv_mma(be, p, s)) {
    const bool ran = try_tensor_cores(be, op, [&] {
      cl_kernel kern = be.kernel("matmul", "conv_implicit_mma", mma_options(be, p, *mt));
      OpenClBackend::set_args(kern, wt, x, cl_ulong(s.c * s.h * s.w), bias, cl_int(bias ? kBiasRow : kBiasNone), out,
                              cl_ulong(s.o * s.oh * s.ow), to_uint(s.o, op, "o"), to_uint(s.c, op, "c"),
                              to_uint(s.h, op, "h"), to_uint(s.w, op, "w"), to_uint(s.kh, op, "kh"),
                              to_uint(s.kw, op, "kw"), to_uint(s.stride, op, "stride"),
                              to_uint(s.padding, op, "padding"), to_uint(s.oh, op, "oh"), to_uint(s.ow, op, "ow"));
      const auto threads = static_cast<size_t>(mt->threads());
      const size_t global[3] = {ceil_div(shape.n, mt->tn()) * threads, ceil_div(shape.m, mt->tm()),
                                static_cast<size_t>(s.n)};
      const size_t local[3] = {threads, 1, 1};
      be.launch(kern, op, 3, global, local);
    });
    if (ran) return;
  }
  const Tuning t = tiles_for(be, shape);
  cl_kernel kern = be.kernel("matmul", "conv_implicit_gemm", options_with(be, p, t));
  OpenClBackend::set_args(kern, wt, x, cl_ulong(s.c * s.h * s.w), bias, cl_int(bias ? kBiasRow : kBiasNone), out,
                          cl_ulong(s.o * s.oh * s.ow), to_uint(s.o, op, "o"), to_uint(s.c, op, "c"),
                          to_uint(s.h, op, "h"), to_uint(s.w, op, "w"), to_uint(s.kh, op, "kh"),
                          to_uint(s.kw, op, "kw"), to_uint(s.stride, op, "stride"), to_uint(s.padding, op, "padding"),
                          to_uint(s.oh, op, "oh"), to_uint(s.ow, op, "ow"));
  const size_t lx = static_cast<size_t>(t.ts_n / t.wpt_n), ly = static_cast<size_t>(t.ts_m / t.wpt_m);
  const size_t global[3] = {ceil_div(shape.n, t.ts_n) * lx, ceil_div(shape.m, t.ts_m) * ly, static_cast<size_t>(s.n)};
  const size_t local[3] = {lx, ly, 1};
  be.launch(kern, op, 3, global, local);
}

namespace {

// conv_cpu's blocking: np column panels and mgroup row blocks per work-item, k in blocks of kc.
struct CpuConvBlocks {
  std::int64_t kc = 0, np = 1, mgroup = 1, nblk = 0, a_blocks = 0;
};

CpuConvBlocks cpu_conv_blocks(const Tuning& t, const ConvShape& s) {
  CpuConvBlocks b;
  const std::int64_t k = s.c * s.kh * s.kw;
  b.kc = k_block(t, k);
  b.nblk = static_cast<std::int64_t>(ceil_div(s.oh * s.ow, t.nr()));
  b.a_blocks = static_cast<std::int64_t>(ceil_div(s.o, t.mr));
  // Up to 4 panels per work-item (a weight slice serves 4x the columns), while at least 32 column groups remain
  // to spread over the cores.
  b.np = 4;  // at most 4: conv_cpu keeps the positions of 4 x NV vectors
  while (b.np > 1 && static_cast<std::int64_t>(ceil_div(b.nblk, b.np)) * s.n < 32) b.np /= 2;
  // Up to 128 rows per work-item (16 blocks of 8 on AVX-512, 22 of 6 on AVX2): each gathered sub-panel serves
  // them all, so the gather's share of the work falls with the rows. AVX2's 6-row blocks were capped at 16
  // blocks like AVX-512's 8-row ones before: 96 rows, and 66 for the VAE's 128 channels (two groups of 11);
  // 22 blocks ran those 3x3 convs 5-10% faster (bench_ops, alternating on a 2-core AVX2 EPYC).
  b.mgroup = row_group(b.a_blocks, static_cast<std::int64_t>(ceil_div(b.nblk, b.np)) * s.n,
                       static_cast<std::int64_t>(ceil_div(128, t.mr)));
  return b;
}

}  // namespace

bool runs_cpu_conv(const OpenClBackend& be, const Precision& p, const ConvShape& s) {
  if (!reads_a_directly(be, p, Operand{nullptr, 0, 0, s.c * s.kh * s.kw, 1})) return false;
  // Where conv_cpu beats conv_im2col_panels + gemm_cpu (bench_ops --shapes sd15, Zen 4, 1 MB L2 per core):
  // - its gather's vector paths only: stride 1, whole 16-position vectors per output row. Strided convolutions
  //   and 8x8 images gather one element at a time, and that for every row group: 30-50% of peak against 63-82%;
  // - weights read from memory at most about 1.5 MB per column panel a work-item owns (its row blocks' slice
  //   of W over all of k, divided by its panels): W is streamed once per work-item, where gemm_cpu keeps a
  //   k-block's slice in L2 across every column panel. 2x320x64x64 -> 320 (1.0 MB): 87% against 81%;
  //   2x640x32x32 -> 640 (1.5 MB): 88% against 81%; 2x960x32x32 -> 640 (2.2 MB): 84% against 87%;
  //   2x1280x16x16 -> 1280 (5.9 MB): 81% against 89%.
  if (s.stride != 1 || s.ow % 16 != 0 || s.w < 16) return false;
  const Tuning& t = tuning(be.device());
  const CpuConvBlocks b = cpu_conv_blocks(t, s);
  const auto w_stream = static_cast<double>(b.mgroup * t.mr * s.c * s.kh * s.kw) *
                        static_cast<double>(dtype_size(p.dtype)) / static_cast<double>(b.np);
  if (w_stream > 1.5 * 1024 * 1024) return false;
  const std::uint64_t local = static_cast<std::uint64_t>(b.np * (b.kc + b.mgroup * t.mr) * t.nr()) * sizeof(float);
  return !be.device().local_mem_bytes || local <= be.device().local_mem_bytes;
}

void run_cpu_conv(OpenClBackend& be, const Precision& p, const ConvShape& s, cl_mem w, cl_mem x, cl_mem bias,
                  cl_mem out, const char* op) {
  const Tuning& t = tuning(be.device());
  const CpuConvBlocks b = cpu_conv_blocks(t, s);
  const std::int64_t k = s.c * s.kh * s.kw;
  const std::int64_t n = s.oh * s.ow;
  cl_kernel kern = be.kernel("matmul", "conv_cpu", options(be, p));
  OpenClBackend::set_args(
      kern, w, x, cl_ulong(s.c * s.h * s.w), to_uint(s.h, op, "h"), to_uint(s.w, op, "w"), to_uint(s.kh, op, "kh"),
      to_uint(s.kw, op, "kw"), to_uint(s.stride, op, "stride"), to_uint(s.padding, op, "padding"),
      to_uint(s.ow, op, "ow"), LocalMem{static_cast<size_t>(b.np * b.kc * t.nr()) * sizeof(float)},
      LocalMem{static_cast<size_t>(b.np * b.mgroup * t.mr * t.nr()) * sizeof(float)}, to_uint(b.kc, op, "kc"),
      cl_uint(b.mgroup), cl_uint(b.np), bias, cl_int(bias ? kBiasRow : kBiasNone), out, cl_ulong(s.o * n),
      to_uint(s.o, op, "o"), to_uint(n, op, "oh*ow"), to_uint(k, op, "c*kh*kw"));
  const size_t global[3] = {ceil_div(b.nblk, b.np), ceil_div(b.a_blocks, b.mgroup), static_cast<size_t>(s.n)};
  // One work-item per group on any device: its local memory holds that work-item's panels and sums (a group a
  // driver chose would share them: the CPU family forced on a GPU, NANSCOPE_KERNEL_STYLE=cpu).
  const size_t local[3] = {1, 1, 1};
  be.launch(kern, op, 3, global, local);
}

std::string run_options(OpenClBackend& be, const Precision& p, std::int64_t batch, std::int64_t m, std::int64_t n,
                        std::int64_t k) {
  if (uses_panels(be, p)) return options(be, p);
  if (const std::optional<MmaTiles> t = mma_tiles_for(be, p, batch, m, n, k)) return mma_options(be, p, *t);
  Problem pr;
  pr.batch = batch, pr.m = m, pr.n = n, pr.k = k;
  return options_with(be, p, tiles_for(be, pr));
}

namespace {

// B's panels kept with its weight buffer, packed now if this is their first use; null where the weight keeps none
// (the budget or the device has no room, or the weight keeps another view's panels).
cl_mem kept_panels(OpenClBackend& be, const std::string& opts, const Operand& b, const Storage* weight, std::int64_t k,
                   std::int64_t n, const char* op, std::int64_t split, bool ahead = false) {
  WeightPanels& kept = be.weight_panels();
  const std::string key = opts + " " + std::to_string(b.off) + "/" + std::to_string(b.rs) + "/" + std::to_string(b.cs) +
                          " " + std::to_string(k) + "x" + std::to_string(n) + " split " + std::to_string(split);
  cl_mem panels = ahead ? nullptr : kept.find(weight, key);
  if (!panels) {
    const auto bytes = static_cast<std::size_t>(b_panel_floats(tuning(be.device()), n, k)) * sizeof(float);
    panels = kept.make(weight, key, bytes, ahead);
    if (panels) pack_b(be, opts, b, 1, k, n, panels, 0, op, split);
  }
  return panels;
}

// The panel order an epilogue multiplies: GEGLU's split panels, else B's own column order.
std::int64_t panel_split(const Tuning& t, Epilogue e) { return e == Epilogue::geglu ? t.nr() / 2 : 0; }

}  // namespace

void prepare_weight(OpenClBackend& be, const Precision& p, const Operand& b, const Storage* weight, std::int64_t k,
                    std::int64_t n, const char* op, bool geglu) {
  // What run() does at the weight's first call: the CPU kernels reading A where it lies (a row-major activation)
  // against B's kept panels, when they fit the scratch budget.
  const Operand row_major_a{nullptr, 0, 0, k, 1};
  if (!uses_panels(be, p) || !reads_a_directly(be, p, row_major_a) || b.bs != 0 || n * k == 0) return;
  const std::int64_t budget = static_cast<std::int64_t>(scratch_budget(be.device()) / sizeof(float));
  if (b_panel_floats(tuning(be.device()), n, k) > budget) return;
  // Only with the program at hand (built, or in the kernel cache): at a cold start its build at load time would
  // run outside the run's kernel plan and its parallel builds (report R4), so the first call packs instead.
  const std::string opts = options(be, p);
  if (!be.programs().ready("matmul", opts)) return;
  Problem pr;
  pr.a = row_major_a;
  pr.b = b;
  pr.b_weight = weight;
  pr.n = n;
  pr.k = k;
  pr.epilogue = geglu ? Epilogue::geglu : Epilogue::store;
  if (geglu && !fuses_epilogue(be, p, pr)) return;  // its calls run the GEMM and GEGLU apart, on B's own order
  kept_panels(be, opts, b, weight, k, n, op, panel_split(tuning(be.device()), pr.epilogue), true);
}

bool fuses_epilogue(const OpenClBackend& be, const Precision& p, const Problem& pr) {
  if (!uses_panels(be, p) || !reads_a_directly(be, p, pr.a) || pr.b_panels || pr.b.bs != 0) return false;
  const Tuning& t = tuning(be.device());
  const auto budget = static_cast<std::int64_t>(scratch_budget(be.device()) / sizeof(float));
  if (b_panel_floats(t, pr.n, pr.k) > budget) return false;
  switch (pr.epilogue) {
    case Epilogue::store: return true;
    case Epilogue::geglu: return t.nv <= 2 && pr.n % t.nr() == 0 && pr.b.cs != 1 && pr.bias_mode != kBiasRow;
  }
  return false;
}

void run(OpenClBackend& be, const Precision& p, const Problem& pr, const char* op) {
  if (pr.batch * pr.m * pr.n == 0) return;
  if (!uses_panels(be, p) && !pr.b_panels) {
    if (run_mma(be, p, pr, op)) return;
    run_tiled(be, p, pr, tiles_for(be, pr), op);
    return;
  }
  const Tuning& t = tuning(be.device());
  const std::string opts = options(be, p);
  const std::int64_t budget = static_cast<std::int64_t>(scratch_budget(be.device()) / sizeof(float));
  if (pr.epilogue != Epilogue::store && !fuses_epilogue(be, p, pr)) {
    throw OpError(std::string(op) + ": this GEMM cannot apply its epilogue here (gemm::fuses_epilogue)");
  }
  if (reads_a_directly(be, p, pr.a) && !pr.b_panels) {
    // Only B is packed: whole batches while its panels fit the budget, else column chunks per batch (never with
    // an epilogue: fuses_epilogue).
    const std::int64_t b_f = b_panel_floats(t, pr.n, pr.k);
    const bool b_shared = pr.b.bs == 0;
    const std::int64_t split = panel_split(t, pr.epilogue);
    if (pr.b_weight && b_shared && b_f <= budget) {
      // A weight's panels, packed at its first use (or ahead of it: prepare_weight) and kept with it.
      if (const cl_mem panels = kept_panels(be, opts, pr.b, pr.b_weight, pr.k, pr.n, op, split)) {
        Problem whole = pr;
        whole.b_panels = panels;
        whole.b_panels_bs = 0;
        compute_direct_a(be, p, pr.a, whole, op);
        return;
      }
    }
    std::int64_t bg =
        b_shared ? pr.batch : std::clamp<std::int64_t>(budget / std::max<std::int64_t>(1, b_f), 1, pr.batch);
    std::int64_t nc = pr.n;
    if (b_f > budget) {
      bg = 1;
      nc = std::max<std::int64_t>(1, budget / (pr.k * t.nr())) * t.nr();
    }
    const std::int64_t b_cbs = b_shared ? 0 : b_panel_floats(t, nc, pr.k);
    detail::ScratchBuffer b_buf(
        be, static_cast<std::size_t>(b_panel_floats(t, nc, pr.k) * (b_shared ? 1 : bg)) * sizeof(float),
        std::string(op) + " B panels");
    for (std::int64_t b0 = 0; b0 < pr.batch; b0 += bg) {
      const std::int64_t nb = std::min(bg, pr.batch - b0);
      for (std::int64_t n0 = 0; n0 < pr.n; n0 += nc) {
        const std::int64_t nn = std::min(nc, pr.n - n0);
        if (!(b_shared && nc == pr.n && b0 > 0)) {
          Operand b = pr.b;
          b.off += b0 * pr.b.bs + n0 * pr.b.cs;
          pack_b(be, opts, b, b_shared ? 1 : nb, pr.k, nn, b_buf.mem(), b_cbs, op, split);
        }
        Problem chunk = pr;
        chunk.batch = nb;
        chunk.n = nn;
        chunk.b_panels = b_buf.mem();
        chunk.b_panels_bs = b_cbs;
        chunk.c_off = pr.c_off + b0 * pr.c_bs + n0;
        chunk.bias_off = pr.bias_off + (pr.bias_mode == kBiasCol ? n0 : 0);
        Operand a = pr.a;
        a.off += b0 * pr.a.bs;
        compute_direct_a(be, p, a, chunk, op);
      }
    }
    return;
  }
  const bool a_shared = pr.a.bs == 0;
  const bool b_given = pr.b_panels != nullptr;
  const bool b_shared = b_given ? pr.b_panels_bs == 0 : pr.b.bs == 0;
  const std::int64_t a_f = a_panel_floats(t, pr.m, pr.k), b_f = b_panel_floats(t, pr.n, pr.k);

  // Chunking: whole batches while the panels fit the budget; otherwise one batch
  // at a time with rows (A) and columns (B) split into panel-aligned chunks.
  std::int64_t bg = pr.batch, mc = pr.m, nc = pr.n;
  const std::int64_t fixed = (a_shared ? a_f : 0) + (!b_given && b_shared ? b_f : 0);
  const std::int64_t per_batch = (a_shared ? 0 : a_f) + (!b_given && !b_shared ? b_f : 0);
  if (fixed + per_batch * pr.batch > budget) {
    bg = per_batch > 0 ? std::max<std::int64_t>(1, (budget - fixed) / per_batch) : pr.batch;
    if (fixed + per_batch * bg > budget) {
      bg = 1;
      const std::int64_t half = budget / 2;
      if (a_f > half) mc = std::max<std::int64_t>(1, half / (pr.k * t.mr)) * t.mr;
      if (!b_given && b_f > half) nc = std::max<std::int64_t>(1, half / (pr.k * t.nr())) * t.nr();
    }
  }
  if (b_given) nc = pr.n;  // given panels are used whole
  const std::int64_t a_batches = a_shared ? 1 : bg, b_batches = b_shared ? 1 : bg;
  detail::ScratchBuffer a_buf(be, static_cast<std::size_t>(a_panel_floats(t, mc, pr.k) * a_batches) * sizeof(float),
                              std::string(op) + " A panels");
  std::optional<detail::ScratchBuffer> b_buf;
  if (!b_given) {
    b_buf.emplace(be, static_cast<std::size_t>(b_panel_floats(t, nc, pr.k) * b_batches) * sizeof(float),
                  std::string(op) + " B panels");
  }
  const std::int64_t a_cbs = a_shared ? 0 : a_panel_floats(t, mc, pr.k);
  const std::int64_t b_cbs = b_given ? pr.b_panels_bs : (b_shared ? 0 : b_panel_floats(t, nc, pr.k));
  bool a_packed = false, b_packed = false;

  for (std::int64_t b0 = 0; b0 < pr.batch; b0 += bg) {
    const std::int64_t nb = std::min(bg, pr.batch - b0);
    for (std::int64_t n0 = 0; n0 < pr.n; n0 += nc) {
      const std::int64_t nn = std::min(nc, pr.n - n0);
      if (!b_given && !(b_shared && b_packed && nc == pr.n)) {
        Operand b = pr.b;
        b.off += b0 * pr.b.bs + n0 * pr.b.cs;
        pack_b(be, opts, b, b_shared ? 1 : nb, pr.k, nn, b_buf->mem(), b_cbs, op);
        b_packed = true;
      }
      for (std::int64_t m0 = 0; m0 < pr.m; m0 += mc) {
        const std::int64_t mm = std::min(mc, pr.m - m0);
        if (!(a_shared && a_packed && mc == pr.m)) {
          Operand a = pr.a;
          a.off += b0 * pr.a.bs + m0 * pr.a.rs;
          pack_a(be, p, a, a_shared ? 1 : nb, mm, pr.k, a_buf.mem(), a_cbs, op);
          a_packed = true;
        }
        Problem chunk = pr;
        chunk.batch = nb;
        chunk.m = mm;
        chunk.n = nn;
        chunk.b_panels = b_given ? pr.b_panels : b_buf->mem();
        chunk.b_panels_off = b_given ? pr.b_panels_off + b0 * pr.b_panels_bs : 0;
        chunk.b_panels_bs = b_cbs;
        chunk.c_off = pr.c_off + b0 * pr.c_bs + m0 * pr.ldc + n0;
        chunk.bias_off = pr.bias_off + (pr.bias_mode == kBiasCol ? n0 : pr.bias_mode == kBiasRow ? m0 : 0);
        compute_panels(be, p, a_buf.mem(), 0, a_cbs, chunk, op);
      }
    }
  }
}

}  // namespace nanscope::opencl::gemm
