// ATTENTION host side. fused: kernels/attention.cl (online softmax, no score
// matrix). At f32 accumulation and f32 softmax a flash kernel: on GPU-style
// backends attention_flash (local-memory tiles; attention_flash_mma on
// NVIDIA's tensor cores for f16 storage) where there is no causal mask; on
// CPU-style ones attention_flash_cpu (query rows along the vector lanes, K and
// V packed per call), causal or not. Otherwise the per-work-item kernel
// (attention_fused, which also carries the exact native-precision emulation).
// bmm and sliced: per group of (batch, head) pairs, scores = scale * Q.K^T on
// the GEMM panels, softmax rows (kernels/softmax.cl) into the probabilities P
// in the storage dtype, then out = P.V on the GEMM. sliced takes slice_size
// pairs at a time; both split further (whole pairs, else query rows) to keep
// the scratch within budget, which cannot change a result: every query row is
// computed the same way in any split.
#include <algorithm>

#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "core/log.hpp"

namespace nanscope::opencl {

using detail::ceil_div;
using detail::to_uint;

namespace {

constexpr std::int64_t kFusedQueryRows = 4;  // ATTN_QB in attention.cl
constexpr std::int64_t kFusedMaxHead = 512;  // ATTN_MAX_D in attention.cl
constexpr std::int64_t kFlashCpuCols =
    8;  // FV in attention/flash_cpu.cl (8, or 4 at two halves): V rows are whole passes

// attention_flash_cpu's geometry (-DFLW, -DFLH in attention/flash_cpu.cl): query rows along `lanes`-wide vectors, one
// or two halves of them per work-item, and the keys a block that fit the registers beside them. 16-wide float vectors
// (AVX-512): 32 rows (two halves) x 8 keys, or 16 x 16 (one half); 8-wide (AVX2): 16 x 6 or 8 x 12. `blocks` key
// blocks make one softmax block (-DFLB: 48-64 keys); the key chunks of flash_cpu_blocking are whole softmax
// blocks, so a row's running maximum moves at the same keys whatever the chunk (results bit for bit).
struct FlashCpuGeometry {
  std::int64_t lanes, rows, keys, blocks;
};
FlashCpuGeometry flash_cpu_geometry(const OpenClBackend& be) {
  const std::int64_t lanes = be.attention_cpu_lanes(), rows = be.attention_cpu_rows();
  const std::int64_t keys = lanes == 16 ? (rows == 32 ? 8 : 16) : (rows == 16 ? 6 : 12);
  return {lanes, rows, keys, keys <= 8 ? 8 : 4};
}

// The CPU family's programs carry attention_flash_cpu's geometry; the GPU family's leave
// that kernel and its packers out (-DGPU_KERNELS: a GPU compiler builds every kernel of a
// program, and it was most of the fused attention program's build on NVIDIA). In the CPU
// family, native precision runs attention_fused, in a program of its own (-DATTN_FUSED,
// attention.cl), and every other precision attention_flash_cpu.
std::string attention_options(OpenClBackend& be, const Precision& p) {
  std::string o = be.precision_options(p) + detail::exact_math_options(be.device());
  if (be.kernel_style() == KernelStyle::gpu) return o + " -DGPU_KERNELS";
  const FlashCpuGeometry g = flash_cpu_geometry(be);
  if (g.lanes == 8) o += " -DFLW=8";
  if (g.rows == 2 * g.lanes) o += " -DFLH=2";
  o += " -DFLB=" + std::to_string(g.blocks);
  o += " -DCPU_KERNELS";  // common.cl CPU_ONE_ITEM
  if (p.native_accumulation() || p.native_softmax()) o += " -DATTN_FUSED";
  return o;
}
std::string softmax_options(OpenClBackend& be, const Precision& p) {
  return be.precision_options(Precision{p.dtype, Accumulate::f32, p.softmax}) + detail::exact_math_options(be.device());
}

[[maybe_unused]] const bool kRegistered = (register_program_options("attention", attention_options), true);

// attention_fused's options. Private row buffers: the 512-wide default on CPUs (one program for
// every head size); GPUs get them sized to the head (a power of two from 64) since private memory
// there is scarce.
std::string fused_options(OpenClBackend& be, const Precision& p, std::int64_t d, std::int64_t dv) {
  std::string opts = attention_options(be, p);
  if (be.kernel_style() == KernelStyle::cpu) {
    if (!p.native_accumulation() && !p.native_softmax()) opts += " -DATTN_FUSED";
  } else {
    std::int64_t width = 64;
    while (width < std::max(d, dv)) width *= 2;
    opts += " -DATTN_MAX_D=" + std::to_string(width);
  }
  return opts;
}

// The CPU family's attention_fused at f32 accumulation and softmax: for the calls attention_flash_cpu refuses.
[[maybe_unused]] const bool kRegisteredFused =
    (register_program_more_variants("attention",
                                    [](OpenClBackend& be, const Precision& p) {
                                      return be.kernel_style() == KernelStyle::cpu
                                                 ? std::vector<std::string>{fused_options(be, p, 0, 0)}
                                                 : std::vector<std::string>{};
                                    }),
     true);

void fused(OpenClBackend& be, const AttentionArgs& a) {
  const char* op = "ATTENTION";
  const bool cpu = be.kernel_style() == KernelStyle::cpu;
  cl_kernel k = be.kernel("attention", "attention_fused", fused_options(be, a.precision, a.d, a.dv));
  OpenClBackend::set_args(k, be.buffer(a.q), be.buffer(a.k), be.buffer(a.v), be.buffer(a.out), to_uint(a.sq, op, "sq"),
                          to_uint(a.sk, op, "sk"), to_uint(a.heads, op, "heads"), to_uint(a.d, op, "d"),
                          to_uint(a.dv, op, "dv"), a.scale, cl_int(a.causal ? 1 : 0));
  // CPUs: one work-item per group (each is long-running with large private arrays, which a driver-
  // chosen group would replicate per work-item on the worker's stack). GPUs: small groups.
  const size_t group = cpu ? 1 : 16;
  const size_t global[3] = {ceil_div(static_cast<std::int64_t>(ceil_div(a.sq, kFusedQueryRows)), group) * group,
                            static_cast<size_t>(a.heads), static_cast<size_t>(a.batch)};
  const size_t local[3] = {group, 1, 1};
  be.launch(k, op, 3, global, local);
}

// The packed V's row width: dv rounded up to whole passes of the kernel's column loop.
std::int64_t flash_cpu_columns(std::int64_t dv) {
  return static_cast<std::int64_t>(ceil_div(dv, kFlashCpuCols)) * kFlashCpuCols;
}

// attention_flash_cpu's blocking over memory (its `groups` and `chunk`): row_blocks blocks of query rows per
// work-item take the packed K and V in chunks of key_chunk key blocks, each chunk read from memory once for all
// of them. Where one (batch, head)'s K and V fit the caches (SD's UNet heads up to 4096 tokens) one row block
// streams them whole; beyond (the VAE's 512-wide head: 8 MiB at 4096 tokens, 64 MiB at 16384) a chunk is about
// half of a core's L2 and up to 256 query rows (16 blocks of 16, 8 of 32) share it, as long as 32 work-items
// remain for the cores (the rows' state, 512 KiB at d = dv = 512, stays within a core's L2; 32 blocks of 32
// rows made the 16384-token decode attention 1.2x slower on a Zen 5).
struct FlashCpuBlocking {
  std::int64_t row_blocks = 1, key_chunk = 1;
};
constexpr std::uint64_t kFlashCpuCachedKv = 1u << 20;      // K and V bytes of one (batch, head) that stay cached
constexpr std::uint64_t kFlashCpuChunkBytes = 192u << 10;  // K and V bytes of one chunk
constexpr std::int64_t kFlashCpuMaxRowBlocks = 16, kFlashCpuMaxRows = 256;

// Local memory bytes of `row_blocks` row blocks' state (Q^T, O^T, m and l: attention/flash_cpu.cl).
std::uint64_t flash_cpu_state_bytes(const FlashCpuGeometry& g, std::int64_t row_blocks, std::int64_t d,
                                    std::int64_t dvp) {
  return static_cast<std::uint64_t>(row_blocks * (d + dvp + 2) * g.rows) * sizeof(float);
}

FlashCpuBlocking flash_cpu_blocking(const OpenClBackend& be, std::int64_t pairs, std::int64_t sq, std::int64_t sk,
                                    std::int64_t d, std::int64_t dvp) {
  const FlashCpuGeometry g = flash_cpu_geometry(be);
  const std::int64_t nkb = static_cast<std::int64_t>(ceil_div(sk, g.keys));
  const std::int64_t qblocks = static_cast<std::int64_t>(ceil_div(sq, g.rows));
  const auto block_bytes = static_cast<std::uint64_t>(g.keys * (d + dvp)) * sizeof(float);
  FlashCpuBlocking b{1, nkb};
  if (static_cast<std::uint64_t>(nkb) * block_bytes > kFlashCpuCachedKv) {
    b.row_blocks = std::min(kFlashCpuMaxRowBlocks, kFlashCpuMaxRows / g.rows);
    while (b.row_blocks > 1 && static_cast<std::int64_t>(ceil_div(qblocks, b.row_blocks)) * pairs < 32) {
      b.row_blocks /= 2;
    }
    b.key_chunk = std::max<std::int64_t>(1, static_cast<std::int64_t>(kFlashCpuChunkBytes / block_bytes));
  }
  if (be.attention_cpu_row_blocks() > 0) b.row_blocks = be.attention_cpu_row_blocks();
  if (be.attention_cpu_key_chunk() > 0) b.key_chunk = be.attention_cpu_key_chunk();
  b.row_blocks = std::min(b.row_blocks, qblocks);
  const std::uint64_t local = be.device().local_mem_bytes;
  while (b.row_blocks > 1 && local && flash_cpu_state_bytes(g, b.row_blocks, d, dvp) > local) --b.row_blocks;
  b.key_chunk = std::min(b.key_chunk, nkb);
  b.key_chunk = static_cast<std::int64_t>(ceil_div(b.key_chunk, g.blocks)) * g.blocks;  // whole softmax blocks
  return b;
}

// Why the CPU flash kernel cannot take this attention (empty: it can).
std::string flash_cpu_refusal(const OpenClBackend& be, const Precision& p, std::int64_t pairs, std::int64_t sk,
                              std::int64_t d, std::int64_t dv) {
  if (p.native_accumulation() || p.native_softmax()) {
    return "native accumulation or softmax (the exact emulation runs in attention_fused)";
  }
  const std::uint64_t state = flash_cpu_state_bytes(flash_cpu_geometry(be), 1, d, flash_cpu_columns(dv));
  if (be.device().local_mem_bytes && state > be.device().local_mem_bytes) {
    return "the state of one block of query rows (" + std::to_string(state) + " bytes) above the device's " +
           std::to_string(be.device().local_mem_bytes) + " bytes of local memory";
  }
  const std::int64_t keys = flash_cpu_geometry(be).keys;
  // The packed V (the larger of the two packs) must fit one allocation.
  const auto packed = static_cast<std::uint64_t>(pairs * static_cast<std::int64_t>(ceil_div(sk, keys)) * keys *
                                                 std::max(d, flash_cpu_columns(dv))) *
                      sizeof(float);
  if (be.device().max_alloc_bytes && packed > be.device().max_alloc_bytes) {
    return "packed keys and values (" + std::to_string(packed >> 20) + " MiB) above the device's allocation limit";
  }
  return {};
}

// attention_flash_cpu: K and V packed once per call (f32, keys in blocks), then one
// work-item per block of query rows of a (batch, head) (flash_cpu_geometry).
void flash_cpu(OpenClBackend& be, const AttentionArgs& a) {
  const char* op = "ATTENTION";
  const FlashCpuGeometry g = flash_cpu_geometry(be);
  const std::string opts = attention_options(be, a.precision);
  const std::int64_t nkb = static_cast<std::int64_t>(ceil_div(a.sk, g.keys));
  const std::int64_t dvp = flash_cpu_columns(a.dv);
  const std::int64_t pairs = a.batch * a.heads;
  detail::ScratchBuffer kt(be, static_cast<std::size_t>(pairs * nkb * g.keys * a.d) * sizeof(float),
                           "ATTENTION packed K");
  detail::ScratchBuffer vp(be, static_cast<std::size_t>(pairs * nkb * g.keys * dvp) * sizeof(float),
                           "ATTENTION packed V");
  const size_t pack_global[3] = {static_cast<size_t>(nkb), static_cast<size_t>(a.heads), static_cast<size_t>(a.batch)};
  cl_kernel pk = be.kernel("attention", "attn_pack_kt", opts);
  OpenClBackend::set_args(pk, be.buffer(a.k), kt.mem(), to_uint(a.sk, op, "sk"), to_uint(a.heads, op, "heads"),
                          to_uint(a.d, op, "d"));
  be.launch(pk, op, 3, pack_global, nullptr);
  cl_kernel pv = be.kernel("attention", "attn_pack_v", opts);
  OpenClBackend::set_args(pv, be.buffer(a.v), vp.mem(), to_uint(a.sk, op, "sk"), to_uint(a.heads, op, "heads"),
                          to_uint(a.dv, op, "dv"), to_uint(dvp, op, "dvp"));
  be.launch(pv, op, 3, pack_global, nullptr);
  const FlashCpuBlocking blk = flash_cpu_blocking(be, pairs, a.sq, a.sk, a.d, dvp);
  cl_kernel k = be.kernel("attention", "attention_flash_cpu", opts);
  OpenClBackend::set_args(k, be.buffer(a.q), kt.mem(), vp.mem(), be.buffer(a.out),
                          LocalMem{static_cast<size_t>(flash_cpu_state_bytes(g, blk.row_blocks, a.d, dvp))},
                          cl_uint(blk.row_blocks), to_uint(blk.key_chunk, op, "key chunk"), to_uint(a.sq, op, "sq"),
                          to_uint(a.sk, op, "sk"), to_uint(a.heads, op, "heads"), to_uint(a.d, op, "d"),
                          to_uint(a.dv, op, "dv"), to_uint(dvp, op, "dvp"), a.scale, cl_int(a.causal ? 1 : 0));
  const size_t global[3] = {ceil_div(a.sq, g.rows * blk.row_blocks), static_cast<size_t>(a.heads),
                            static_cast<size_t>(a.batch)};
  const size_t local[3] = {1, 1, 1};
  be.launch(k, op, 3, global, local);
}

// attention_flash's tiles (kernels/attention/flash_gpu.cl), chosen per head size: 8 query
// rows per work-item and 16 x ty work-items per group, so 8 * ty query rows per
// group (their Q block held in local memory for the whole key loop), and tiles
// of 16 * kn keys. Q, the K (or V) tile and P all fit in local memory:
//   padded head <= 48 (SD 40):   64 rows, 64 keys, 128 work-items, 40 KiB at d 40;
//   padded head <= 96 (64, 80):  64 rows, 32 keys, 128 work-items, 34-40 KiB;
//   padded head <= 160 (160):    32 rows, 32 keys,  64 work-items, 46 KiB.
struct FlashTiles {
  std::int64_t ty = 0, kn = 0, d = 0, dj = 0;  // -DFL_TY, -DFL_KN, -DFL_D, -DFL_DJ
  std::int64_t rows() const { return 8 * ty; }
  std::int64_t threads() const { return 16 * ty; }
};
constexpr std::int64_t kFlashMaxHead = 160;

FlashTiles flash_tiles(std::int64_t d, std::int64_t dv) {
  FlashTiles t;
  t.d = static_cast<std::int64_t>(ceil_div(d, 4)) * 4;
  t.dj = static_cast<std::int64_t>(ceil_div(dv, 16));
  const std::int64_t width = std::max(t.d, 16 * t.dj);
  t.ty = width <= 96 ? 8 : 4;
  t.kn = width <= 48 ? 4 : 2;
  return t;
}

// FL_LOCAL in attention/flash_gpu.cl: Q block, K tile or V tile, P, and two floats per row.
std::size_t flash_local_bytes(const FlashTiles& t) {
  const std::int64_t bq = t.rows(), bk = 16 * t.kn;
  const std::int64_t kv = std::max(t.d * (bk + t.kn), bk * 16 * t.dj);
  return sizeof(float) * static_cast<std::size_t>(t.d * bq + kv + bk * (bq + 4) + 2 * bq);
}

// Why the flash kernel cannot take attention of this kind on this backend (empty: it can).
std::string flash_refusal(const OpenClBackend& be, const Precision& p, bool causal, std::int64_t d, std::int64_t dv) {
  if (be.kernel_style() != KernelStyle::gpu) return "cpu-style kernels";
  if (p.native_accumulation() || p.native_softmax()) {
    return "native accumulation or softmax (the exact emulation runs in attention_fused)";
  }
  if (causal) return "causal mask";
  if (d > kFlashMaxHead || dv > kFlashMaxHead) {
    return "head size above " + std::to_string(kFlashMaxHead) + " (d=" + std::to_string(d) +
           " dv=" + std::to_string(dv) + ")";
  }
  const FlashTiles t = flash_tiles(d, dv);
  const std::size_t need = flash_local_bytes(t);
  if (be.device().local_mem_bytes && be.device().local_mem_bytes < need) {
    return "local memory " + std::to_string(be.device().local_mem_bytes) + " bytes < " + std::to_string(need);
  }
  const auto threads = static_cast<std::size_t>(t.threads());
  if (be.device().max_work_group_size && be.device().max_work_group_size < threads) {
    return "work-groups under " + std::to_string(threads);
  }
  return {};
}

std::string flash_options(OpenClBackend& be, const Precision& p, const FlashTiles& t) {
  return attention_options(be, p) + " -DFL_TY=" + std::to_string(t.ty) + " -DFL_KN=" + std::to_string(t.kn) +
         " -DFL_D=" + std::to_string(t.d) + " -DFL_DJ=" + std::to_string(t.dj);
}

void flash(OpenClBackend& be, const AttentionArgs& a) {
  const char* op = "ATTENTION";
  const FlashTiles t = flash_tiles(a.d, a.dv);
  cl_kernel k = be.kernel("attention", "attention_flash", flash_options(be, a.precision, t));
  OpenClBackend::set_args(k, be.buffer(a.q), be.buffer(a.k), be.buffer(a.v), be.buffer(a.out), to_uint(a.sq, op, "sq"),
                          to_uint(a.sk, op, "sk"), to_uint(a.heads, op, "heads"), to_uint(a.d, op, "d"),
                          to_uint(a.dv, op, "dv"), a.scale);
  const auto threads = static_cast<size_t>(t.threads());
  const size_t global[2] = {threads * ceil_div(a.sq, t.rows()), static_cast<size_t>(a.batch * a.heads)};
  const size_t local[2] = {threads, 1};
  be.launch(k, op, 2, global, local);
}

// attention_flash_mma (tensor cores, kernels/attention/flash_mma.cl): 4 warps of 16 query
// rows (64 rows, 128 work-items per group), key tiles of 64 (32 above head size
// 96: the scores of a smaller tile leave registers for the larger Q and O), the
// head padded to whole mma steps: -DFM_DK (d rounded up to 16), -DFM_DV (dv
// rounded up to 8), -DFM_BK.
constexpr std::int64_t kFlashMmaRows = 64, kFlashMmaThreads = 128;
struct FlashMmaTiles {
  std::int64_t dk = 0, dv = 0, keys = 64;
};
FlashMmaTiles flash_mma_tiles(std::int64_t d, std::int64_t dv) {
  FlashMmaTiles t;
  t.dk = static_cast<std::int64_t>(ceil_div(d, 16)) * 16;
  t.dv = static_cast<std::int64_t>(ceil_div(dv, 8)) * 8;
  t.keys = std::max(t.dk, t.dv) > 96 ? 32 : 64;
  return t;
}
// The K tile [key][channel pair] and the V tile [column][key pair] (4 pairs of
// padding a row), and the emulation's exchange words (kernels/common.cl).
std::size_t flash_mma_local_bytes(const OpenClBackend& be, const FlashMmaTiles& t) {
  const std::int64_t exchange = be.tensor_cores_emulated() ? 6 * kFlashMmaThreads : 1;
  return sizeof(std::uint32_t) * static_cast<std::size_t>(t.keys * (t.dk / 2 + 4) + t.dv * (t.keys / 2 + 4) + exchange);
}

// Why attention_flash_mma cannot take what attention_flash can (empty: it can).
std::string flash_mma_refusal(const OpenClBackend& be, const Precision& p, std::int64_t d, std::int64_t dv) {
  if (!gemm::tensor_cores_for(be, p)) return "no tensor cores for this precision or device";
  if (d % 2 != 0 || dv % 2 != 0) return "odd head size (pairs of halves are read as 32-bit words)";
  const std::size_t need = flash_mma_local_bytes(be, flash_mma_tiles(d, dv));
  if (be.device().local_mem_bytes && be.device().local_mem_bytes < need) {
    return "local memory " + std::to_string(be.device().local_mem_bytes) + " bytes < " + std::to_string(need);
  }
  if (be.device().max_work_group_size && be.device().max_work_group_size < kFlashMmaThreads) {
    return "work-groups under " + std::to_string(kFlashMmaThreads);
  }
  return {};
}

std::string flash_mma_options(OpenClBackend& be, const Precision& p, const FlashMmaTiles& t) {
  return attention_options(be, p) + gemm::tensor_core_options(be) + " -DFM_DK=" + std::to_string(t.dk) +
         " -DFM_DV=" + std::to_string(t.dv) + " -DFM_BK=" + std::to_string(t.keys);
}

void flash_mma(OpenClBackend& be, const AttentionArgs& a) {
  const char* op = "ATTENTION";
  cl_kernel k =
      be.kernel("attention", "attention_flash_mma", flash_mma_options(be, a.precision, flash_mma_tiles(a.d, a.dv)));
  OpenClBackend::set_args(k, be.buffer(a.q), be.buffer(a.k), be.buffer(a.v), be.buffer(a.out), to_uint(a.sq, op, "sq"),
                          to_uint(a.sk, op, "sk"), to_uint(a.heads, op, "heads"), to_uint(a.d, op, "d"),
                          to_uint(a.dv, op, "dv"), a.scale);
  const size_t global[2] = {static_cast<size_t>(kFlashMmaThreads) * ceil_div(a.sq, kFlashMmaRows),
                            static_cast<size_t>(a.batch * a.heads)};
  const size_t local[2] = {static_cast<size_t>(kFlashMmaThreads), 1};
  be.launch(k, op, 2, global, local);
}

// The materialised path's scores GEMM: rounded to the dtype by the native GEMM, or f32 (stored in
// the dtype when softmax=native).
Precision score_precision(const Precision& p) {
  if (p.native_accumulation()) return Precision{p.dtype, Accumulate::native, SoftmaxPrecision::f32};
  return Precision{!p.native_softmax() ? DType::f32 : p.dtype};
}

// The materialised path for query rows [i0, i0 + rows) of the pairs [bh0, bh0 + count).
struct Unit {
  std::int64_t bh0, count, i0, rows;
};

void materialised_unit(OpenClBackend& be, const AttentionArgs& a, const Unit& u, cl_mem scores, cl_mem probs) {
  const char* op = "ATTENTION";
  const DType t = a.out.dtype();
  const Precision& p = a.precision;
  const gemm::Tuning& tune = gemm::tuning(be.device());
  const std::string pack_opts = gemm::options(be, detail::storage_only(t));
  const bool scores_f32 = !p.native_accumulation() && !p.native_softmax();
  const Precision score_prec = score_precision(p);
  const std::int64_t qs = a.heads * a.d, vs = a.heads * a.dv, ss = u.rows * a.sk;

  const std::int64_t qa = gemm::a_panel_floats(tune, u.rows, a.d), kb = gemm::b_panel_floats(tune, a.sk, a.d);
  detail::ScratchBuffer q_panels(be, static_cast<std::size_t>(qa * u.count) * sizeof(float), "ATTENTION Q panels");
  detail::ScratchBuffer k_panels(be, static_cast<std::size_t>(kb * u.count) * sizeof(float), "ATTENTION K panels");

  // Each run of pairs within one batch item has uniform strides: one launch per run.
  for (std::int64_t bh = u.bh0; bh < u.bh0 + u.count;) {
    const std::int64_t b = bh / a.heads, h0 = bh % a.heads;
    const std::int64_t nh = std::min(a.heads - h0, u.bh0 + u.count - bh);
    const std::int64_t slot = bh - u.bh0;  // index of the first pair of the run within the unit
    const gemm::Operand q{be.buffer(a.q), (b * a.sq + u.i0) * qs + h0 * a.d, a.d, qs, 1};
    const gemm::Operand kt{be.buffer(a.k), b * a.sk * qs + h0 * a.d, a.d, 1, qs};  // element (c, j) of K^T
    gemm::pack_a(be, detail::storage_only(t), q, nh, u.rows, a.d, q_panels.mem(), qa, op);
    gemm::pack_b(be, pack_opts, kt, nh, a.d, a.sk, k_panels.mem(), kb, op);
    gemm::Problem sp;
    sp.b_panels = k_panels.mem();  // this run's panels start at 0
    sp.b_panels_bs = kb;
    sp.c = scores;
    sp.c_off = slot * ss;
    sp.c_bs = ss;
    sp.ldc = a.sk;
    sp.batch = nh;
    sp.m = u.rows;
    sp.n = a.sk;
    sp.k = a.d;
    sp.alpha = a.scale;
    gemm::compute_panels(be, score_prec, q_panels.mem(), 0, qa, sp, op);
    bh += nh;
  }

  cl_kernel sm = be.kernel("softmax", scores_f32 ? "softmax_rows_f32in" : "softmax_rows", softmax_options(be, p));
  const size_t local = detail::reduction_group_size(be);
  OpenClBackend::set_args(sm, scores, cl_ulong(0), probs, cl_ulong(0), to_uint(a.sk, op, "sk"),
                          cl_uint(a.causal ? a.sq : 0), to_uint(u.i0, op, "row"),
                          LocalMem{std::max<size_t>(local, 2) * sizeof(float)});
  const size_t global[1] = {local * static_cast<size_t>(u.count * u.rows)};
  const size_t local_size[1] = {local};
  be.launch(sm, op, 1, global, local_size);

  for (std::int64_t bh = u.bh0; bh < u.bh0 + u.count;) {
    const std::int64_t b = bh / a.heads, h0 = bh % a.heads;
    const std::int64_t nh = std::min(a.heads - h0, u.bh0 + u.count - bh);
    gemm::Problem pv;
    pv.a = {probs, (bh - u.bh0) * ss, ss, a.sk, 1};
    pv.b = {be.buffer(a.v), b * a.sk * vs + h0 * a.dv, a.dv, vs, 1};
    pv.c = be.buffer(a.out);
    pv.c_off = (b * a.sq + u.i0) * vs + h0 * a.dv;
    pv.c_bs = a.dv;
    pv.ldc = vs;
    pv.batch = nh;
    pv.m = u.rows;
    pv.n = a.dv;
    pv.k = a.sk;
    gemm::run(be, Precision{t, p.accumulate, SoftmaxPrecision::f32}, pv, op);
    bh += nh;
  }
}

void materialised(OpenClBackend& be, const AttentionArgs& a) {
  const DType t = a.out.dtype();
  const std::int64_t pairs = a.batch * a.heads;
  const bool scores_f32 = !a.precision.native_accumulation() && !a.precision.native_softmax();
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(t));
  // Scratch per query row of one pair: its scores, probabilities, and (in the GEMM) packed probabilities.
  const std::int64_t row_bytes = a.sk * ((scores_f32 ? 4 : es) + es + 4) + 4 * a.d;
  const auto budget = static_cast<std::int64_t>(gemm::scratch_budget(be.device()));
  std::int64_t per_unit = a.config.impl == AttentionImpl::sliced ? std::max(1, a.config.slice_size) : pairs;
  per_unit = std::min(per_unit, std::max<std::int64_t>(1, budget / std::max<std::int64_t>(1, row_bytes * a.sq)));
  std::int64_t rows = a.sq;
  if (row_bytes * a.sq > budget) rows = std::clamp<std::int64_t>(budget / row_bytes, 1, a.sq);

  const std::int64_t cap = per_unit * rows * a.sk;
  detail::ScratchBuffer scores(be, static_cast<std::size_t>(cap * (scores_f32 ? 4 : es)), "ATTENTION scores");
  detail::ScratchBuffer probs(be, static_cast<std::size_t>(cap * es), "ATTENTION probabilities");
  for (std::int64_t bh0 = 0; bh0 < pairs; bh0 += per_unit) {
    const std::int64_t count = std::min(per_unit, pairs - bh0);
    for (std::int64_t i0 = 0; i0 < a.sq; i0 += rows) {
      materialised_unit(be, a, Unit{bh0, count, i0, std::min(rows, a.sq - i0)}, scores.mem(), probs.mem());
    }
  }
}

}  // namespace

void attention_call_variants(OpenClBackend& be, const KernelCalls& calls, ProgramVariants& out) {
  const auto add = [&out](const char* program, std::string options) { add_variant(out, program, std::move(options)); };
  for (const KernelCalls::Attention& a : calls.attention) {
    const bool fits_fused = a.d <= kFusedMaxHead && a.dv <= kFusedMaxHead;
    if (a.impl == AttentionImpl::fused && be.kernel_style() == KernelStyle::gpu &&
        flash_refusal(be, a.precision, a.causal, a.d, a.dv).empty()) {
      if (flash_mma_refusal(be, a.precision, a.d, a.dv).empty()) {
        add("attention", flash_mma_options(be, a.precision, flash_mma_tiles(a.d, a.dv)));
      } else {
        add("attention", flash_options(be, a.precision, flash_tiles(a.d, a.dv)));
      }
    } else if (a.impl == AttentionImpl::fused && fits_fused) {
      // On CPUs attention_flash_cpu with its packing kernels where it takes the call, else attention_fused.
      const bool flash_cpu = be.kernel_style() == KernelStyle::cpu &&
                             flash_cpu_refusal(be, a.precision, a.batch * a.heads, a.sk, a.d, a.dv).empty();
      add("attention", flash_cpu ? attention_options(be, a.precision) : fused_options(be, a.precision, a.d, a.dv));
    } else {
      // materialised(): Q and K packed in the storage dtype, the scores' GEMM, the softmax, P.V.
      const DType t = a.precision.dtype;
      const Precision& p = a.precision;
      add("matmul", gemm::options(be, detail::storage_only(t)));
      add("matmul", gemm::packed_a_options(be, detail::storage_only(t)));
      add("matmul", gemm::packed_a_options(be, score_precision(p)));
      add("matmul", gemm::run_options(be, Precision{t, p.accumulate, SoftmaxPrecision::f32}, a.batch * a.heads, a.sq,
                                      a.dv, a.sk));
      add("softmax", softmax_options(be, p));
    }
  }
}

void OpenClBackend::attention(const AttentionArgs& args) {
  if (args.batch * args.sq * args.heads * args.dv == 0) return;
  if (args.config.impl == AttentionImpl::fused) {
    if (kernel_style() == KernelStyle::gpu) {
      const std::string why = flash_refusal(*this, args.precision, args.causal, args.d, args.dv);
      if (why.empty()) {
        if (!flash_mma_refusal(*this, args.precision, args.d, args.dv).empty() ||
            !gemm::try_tensor_cores(*this, "ATTENTION", [&] { flash_mma(*this, args); })) {
          flash(*this, args);
        }
        return;
      }
      if (!args.precision.native_accumulation() && !args.precision.native_softmax()) {
        note_fallback("flash attention not used (per-work-item fused kernel instead): " + why);
      }
    }
    if (args.d <= kFusedMaxHead && args.dv <= kFusedMaxHead) {
      if (kernel_style() == KernelStyle::cpu) {
        const std::string why =
            flash_cpu_refusal(*this, args.precision, args.batch * args.heads, args.sk, args.d, args.dv);
        if (why.empty()) {
          flash_cpu(*this, args);
          return;
        }
        if (!args.precision.native_accumulation() && !args.precision.native_softmax()) {
          note_fallback("flash attention not used (per-work-item fused kernel instead): " + why);
        }
      }
      fused(*this, args);
      return;
    }
    note_fallback("fused attention supports head sizes up to " + std::to_string(kFusedMaxHead) + "; d=" +
                  std::to_string(args.d) + " dv=" + std::to_string(args.dv) + " ran the bmm implementation instead");
  }
  materialised(*this, args);
}

}  // namespace nanscope::opencl
