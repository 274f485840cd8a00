// Winograd F(4x4, 3x3) convolutions for the CPU kernel family (gemm.hpp
// runs_winograd, kernels/conv2d.cl): per chunk of output tiles, the input
// transform into the GEMM's B panels, one batched f32 GEMM over the 36
// transformed planes, and the output transform with the bias.
#include <algorithm>
#include <optional>

#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl::gemm {

using detail::ceil_div;
using detail::to_uint;

namespace {

constexpr std::int64_t kPlanes = 36;  // the 6x6 transformed tile
constexpr std::int64_t kTile = 4;     // outputs per tile side
// Scratch for the transformed weights of one block of output channels: 64 MB keeps the SD models' weights in
// one block up to 640 x 640 channels (2560 x 1280 in eight).
constexpr std::int64_t kWeightBytes = std::int64_t{64} << 20;
// Scratch for one chunk's transformed inputs and products: as much as the transformed weights, which each chunk
// reads again (so they are read about as often as the tiles), within 8-64 MB. The 1280-wide UNet layers at 16x16
// take their tiles in one chunk; the 128-256-channel VAE layers at 512-1024 px, where a decode's memory peaks
// beside activations of 128-512 MB, take chunks of 8-10 MB (110-230 tiles), no slower than 64 MB ones
// (bench_ops conv3x3_*) and 170 MB less at the peak of a 512x512 decode (bench_unet --component vae: 1241 MB).
constexpr std::int64_t kTileBytesMin = std::int64_t{8} << 20, kTileBytesMax = std::int64_t{64} << 20;
// Input channels per step of winograd_fused_cpu's weight transform (kernels/matmul/conv_cpu.cl WINO_KS).
constexpr std::int64_t kFusedChannels = 32;

}  // namespace

bool runs_winograd(const OpenClBackend& be, const Precision& p, const ConvShape& s) {
  if (!be.winograd_allowed() || be.kernel_style() != KernelStyle::cpu || p.native_accumulation()) return false;
  if (s.kh != 3 || s.kw != 3 || s.stride != 1) return false;
  // Where it is faster (bench_ops --shapes sd15 and the VAE's shapes, Zen 4): 1.6-2.7x at 16x16 and larger with
  // 320-2560 channels. At 8x8 (batch 2: 8 tiles, a quarter of one column panel) the direct path is.
  return s.c >= 64 && s.o >= 64 && s.oh * s.ow >= 256;
}

namespace {

// How run_winograd splits a convolution: blocks of output channels, chunks of tiles, and whether the weights are
// transformed inside the GEMM.
struct Plan {
  std::int64_t ob = 0;                       // output channels per block (whole row blocks of the GEMM)
  std::int64_t th = 0, tw = 0, tiles = 0;    // tile rows and columns per image, tiles of the call
  std::int64_t tc = 0;                       // tiles per chunk (whole column panels)
  std::int64_t kc = 0, v_bs = 0;             // V's k-blocks and floats per plane
  std::int64_t panels = 0;                   // column panels of a chunk
  std::int64_t a_blocks = 0, mgroup = 0;     // the fused GEMM's row blocks, and per work-item
  std::int64_t u_bytes = 0, sums_bytes = 0;  // its local memory: a work-item's U and the running sums
  bool one_chunk = false, fused = false;
};

Plan plan(const OpenClBackend& be, const ConvShape& s) {
  const Tuning& t = tuning(be.device());
  const auto limit = static_cast<std::int64_t>(scratch_budget(be.device()));
  const auto f = static_cast<std::int64_t>(sizeof(float));
  Plan pl;
  pl.ob = std::max<std::int64_t>(1, std::min(kWeightBytes, limit) / (kPlanes * s.c * f) / t.mr) * t.mr;
  pl.ob = std::min(pl.ob, s.o);
  pl.th = static_cast<std::int64_t>(ceil_div(s.oh, kTile));
  pl.tw = static_cast<std::int64_t>(ceil_div(s.ow, kTile));
  pl.tiles = s.n * pl.th * pl.tw;
  const std::int64_t tile_bytes = std::min(std::clamp(kPlanes * pl.ob * s.c * f, kTileBytesMin, kTileBytesMax), limit);
  pl.tc = std::max<std::int64_t>(1, tile_bytes / (kPlanes * (s.c + pl.ob) * f) / t.nr()) * t.nr();
  pl.tc = std::min<std::int64_t>(pl.tc, static_cast<std::int64_t>(ceil_div(pl.tiles, t.nr())) * t.nr());
  pl.kc = k_block(t, s.c);
  pl.v_bs = b_panel_floats(t, pl.tc, s.c);
  // All tiles in one chunk (the 16x16 layers of the SD UNet at 512x512, the 32x32 ones with 1280-1920 inputs:
  // wide weights in more than one block, few tiles): the inputs are transformed once instead of once per block
  // of output channels (bench_ops, 2-core Xeon: the 2560-input 16x16 layer 87-93 -> 75 ms, the 1920-input 32x32
  // one 85-91 -> 75-77 ms). Smaller weight blocks, which the GEMM would read back from the caches, are slower
  // there (8 MB: 91 ms; 2 MB: 103 ms), and so are streamed stores of them (86 ms).
  pl.one_chunk = pl.tiles <= pl.tc;
  pl.panels = static_cast<std::int64_t>(ceil_div(pl.tc, t.nr()));
  // Tiles that fill at most two column panels, in one chunk (the SD UNet's 16x16 layers at batch 2: 32 tiles):
  // the weights are transformed inside the GEMM (winograd_fused_cpu), where writing U to memory and reading it
  // back took about half of such a layer's time. Row groups of up to 16 blocks (128 rows on AVX-512), each of
  // which reads all of V, and at least 8 work-items; the group's U and sums in local memory.
  // Fewer blocks where the group's U and sums would not fit the local memory: a 512 KB one (PoCL on a Zen 3's
  // L2) holds 12 of AVX2's 6 x 16 blocks, where 16 (663 KB) had the UNet's 1280-wide 16x16 layers take the two
  // passes (bench/README.md, 2026-12-07).
  pl.a_blocks = static_cast<std::int64_t>(ceil_div(s.o, t.mr));
  const std::int64_t group_bytes = kPlanes * t.mr * (kFusedChannels + t.nr()) * f;
  const auto local = static_cast<std::int64_t>(be.device().local_mem_bytes);
  pl.mgroup = 16;
  while (pl.mgroup > 1 && static_cast<std::int64_t>(ceil_div(pl.a_blocks, pl.mgroup)) * pl.panels < 8) pl.mgroup /= 2;
  while (pl.mgroup > 1 && pl.mgroup * group_bytes > local) --pl.mgroup;
  pl.mgroup =
      static_cast<std::int64_t>(ceil_div(pl.a_blocks, static_cast<std::int64_t>(ceil_div(pl.a_blocks, pl.mgroup))));
  pl.u_bytes = kPlanes * pl.mgroup * t.mr * kFusedChannels * f;
  pl.sums_bytes = kPlanes * pl.mgroup * t.mr * t.nr() * f;
  pl.fused = be.winograd_fuses_weights() && pl.one_chunk && pl.panels <= 2 && s.c % 16 == 0 &&
             pl.u_bytes + pl.sums_bytes <= local && kPlanes * s.o * pl.tc * f <= limit;
  if (pl.fused) pl.ob = s.o;
  return pl;
}

}  // namespace

bool fuses_winograd_weights(const OpenClBackend& be, const Precision& p, const ConvShape& s) {
  return runs_winograd(be, p, s) && plan(be, s).fused;
}

void run_winograd(OpenClBackend& be, const Precision& p, const ConvShape& s, cl_mem w, cl_mem x, cl_mem bias,
                  cl_mem out, const char* op) {
  const auto f = static_cast<std::int64_t>(sizeof(float));
  const Plan pl = plan(be, s);
  const std::int64_t ob = pl.ob, th = pl.th, tw = pl.tw, tiles = pl.tiles, tc = pl.tc, kc = pl.kc, v_bs = pl.v_bs;
  const bool one_chunk = pl.one_chunk, fused = pl.fused;
  const std::int64_t m_bs = ob * tc;

  std::optional<detail::ScratchBuffer> u;
  if (!fused) u.emplace(be, static_cast<std::size_t>(kPlanes * ob * s.c * f), std::string(op) + " Winograd weights");
  detail::ScratchBuffer v(be, static_cast<std::size_t>(kPlanes * v_bs * f), std::string(op) + " Winograd input tiles");
  detail::ScratchBuffer m(be, static_cast<std::size_t>(kPlanes * m_bs * f), std::string(op) + " Winograd products");

  const bool stream = be.streams_output(static_cast<std::size_t>(s.n * s.o * s.oh * s.ow) * dtype_size(p.dtype));
  const std::string opts = options(be, p);
  cl_kernel input = be.kernel("conv2d", "winograd_input", opts);
  cl_kernel output = be.kernel("conv2d", "winograd_output", opts);
  const auto transform_inputs = [&](std::int64_t t0, std::int64_t len) {
    OpenClBackend::set_args(input, x, to_uint(s.c, op, "c"), to_uint(s.h, op, "h"), to_uint(s.w, op, "w"),
                            to_uint(s.padding, op, "padding"), to_uint(th, op, "tile rows"),
                            to_uint(tw, op, "tile columns"), to_uint(t0, op, "tile"), to_uint(len, op, "tiles"),
                            v.mem(), cl_ulong(v_bs), to_uint(kc, op, "kc"));
    const size_t ig[2] = {static_cast<size_t>(s.c), ceil_div(len, 16)};  // 16 tiles per work-item
    be.launch(input, op, 2, ig, nullptr);
  };
  const auto transform_outputs = [&](std::int64_t o0, std::int64_t rows, std::int64_t t0, std::int64_t len) {
    OpenClBackend::set_args(output, m.mem(), cl_ulong(rows * tc), to_uint(tc, op, "tiles"), bias, out,
                            to_uint(o0, op, "o"), to_uint(s.o, op, "o"), to_uint(s.oh, op, "oh"),
                            to_uint(s.ow, op, "ow"), to_uint(th, op, "tile rows"), to_uint(tw, op, "tile columns"),
                            to_uint(t0, op, "tile"), to_uint(len, op, "tiles"), cl_uint(stream ? 1 : 0));
    const size_t og[2] = {static_cast<size_t>(rows), ceil_div(len, 16)};
    be.launch(output, op, 2, og, nullptr);
  };
  if (one_chunk) transform_inputs(0, tiles);
  if (fused) {
    cl_kernel gemm = be.kernel("matmul", "winograd_fused_cpu", options(be, kWinogradProduct));
    const cl_uint wdt = p.dtype == DType::f16 ? 1 : p.dtype == DType::bf16 ? 2 : 0;
    OpenClBackend::set_args(gemm, w, wdt, v.mem(), cl_ulong(v_bs), cl_uint(pl.panels), to_uint(kc, op, "kc"), m.mem(),
                            cl_ulong(m_bs), cl_ulong(tc), LocalMem{static_cast<size_t>(pl.u_bytes)},
                            LocalMem{static_cast<size_t>(pl.sums_bytes)}, cl_uint(pl.mgroup), to_uint(s.o, op, "o"),
                            to_uint(s.c, op, "c"));
    const size_t global[2] = {static_cast<size_t>(pl.panels), ceil_div(pl.a_blocks, pl.mgroup)};
    const size_t local[2] = {1, 1};
    be.launch(gemm, op, 2, global, local);
    transform_outputs(0, s.o, 0, tiles);
    return;
  }
  cl_kernel weights = be.kernel("conv2d", "winograd_weights", opts);
  // Otherwise, with more than one block of output channels, each chunk's tiles are transformed again for each
  // block (weights of more than 64 MB transformed, on images of more than one chunk of tiles).
  for (std::int64_t o0 = 0; o0 < s.o; o0 += ob) {
    const std::int64_t rows = std::min(ob, s.o - o0);
    OpenClBackend::set_args(weights, w, u->mem(), to_uint(s.c, op, "c"), to_uint(o0, op, "o"),
                            to_uint(rows, op, "output channels"));
    const size_t wg[2] = {ceil_div(s.c, 16), static_cast<size_t>(rows)};
    be.launch(weights, op, 2, wg, nullptr);
    Problem pr;
    pr.a = {u->mem(), 0, rows * s.c, s.c, 1};
    pr.b_panels = v.mem();
    pr.b_panels_bs = v_bs;
    pr.c = m.mem();
    pr.c_bs = rows * tc;
    pr.ldc = tc;
    pr.batch = kPlanes;
    pr.m = rows;
    pr.k = s.c;
    for (std::int64_t t0 = 0; t0 < tiles; t0 += tc) {
      const std::int64_t len = std::min(tc, tiles - t0);
      if (!one_chunk) transform_inputs(t0, len);

      Problem chunk = pr;
      chunk.n = len;
      compute_direct_a(be, kWinogradProduct, pr.a, chunk, op);

      transform_outputs(o0, rows, t0, len);
    }
  }
}

}  // namespace nanscope::opencl::gemm
