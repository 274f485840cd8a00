// Winograd F(4x4, 3x3) convolutions for the CPU kernel family (gemm.hpp
// runs_winograd, kernels/conv2d.cl): per chunk of output tiles, the input
// transform into the GEMM's B panels, one batched f32 GEMM over the 36
// transformed planes, and the output transform with the bias.
#include <algorithm>

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

}  // namespace

bool runs_winograd(const OpenClBackend& be, const Precision& p, const ConvShape& s) {
  if (!be.winograd_allowed() || be.kernel_style() != KernelStyle::cpu || p.native_accumulation()) return false;
  if (s.kh != 3 || s.kw != 3 || s.stride != 1) return false;
  // Where it is faster (bench_ops --shapes sd15 and the VAE's shapes, Zen 4): 1.6-2.7x at 16x16 and larger with
  // 320-2560 channels. At 8x8 (batch 2: 8 tiles, a quarter of one column panel) the direct path is.
  return s.c >= 64 && s.o >= 64 && s.oh * s.ow >= 256;
}

void run_winograd(OpenClBackend& be, const Precision& p, const ConvShape& s, cl_mem w, cl_mem x, cl_mem bias,
                  cl_mem out, const char* op) {
  const Tuning& t = tuning(be.device());
  const auto limit = static_cast<std::int64_t>(scratch_budget(be.device()));
  const auto f = static_cast<std::int64_t>(sizeof(float));
  // Output channels per block (whole row blocks of the GEMM), then tiles per chunk (whole column panels).
  std::int64_t ob = std::max<std::int64_t>(1, std::min(kWeightBytes, limit) / (kPlanes * s.c * f) / t.mr) * t.mr;
  ob = std::min(ob, s.o);
  const std::int64_t th = static_cast<std::int64_t>(ceil_div(s.oh, kTile));
  const std::int64_t tw = static_cast<std::int64_t>(ceil_div(s.ow, kTile));
  const std::int64_t tiles = s.n * th * tw;
  const std::int64_t tile_bytes = std::min(std::clamp(kPlanes * ob * s.c * f, kTileBytesMin, kTileBytesMax), limit);
  std::int64_t tc = std::max<std::int64_t>(1, tile_bytes / (kPlanes * (s.c + ob) * f) / t.nr()) * t.nr();
  tc = std::min<std::int64_t>(tc, static_cast<std::int64_t>(ceil_div(tiles, t.nr())) * t.nr());
  const std::int64_t kc = k_block(t, s.c);
  const std::int64_t v_bs = b_panel_floats(t, tc, s.c);
  // All tiles in one chunk (the 16x16 layers of the SD UNet at 512x512, the 32x32 ones with 1280-1920 inputs:
  // wide weights in more than one block, few tiles): the inputs are transformed once instead of once per block
  // of output channels (bench_ops, 2-core Xeon: the 2560-input 16x16 layer 87-93 -> 75 ms, the 1920-input 32x32
  // one 85-91 -> 75-77 ms). Smaller weight blocks, which the GEMM would read back from the caches, are slower
  // there (8 MB: 91 ms; 2 MB: 103 ms), and so are streamed stores of them (86 ms).
  const bool one_chunk = tiles <= tc;
  const std::int64_t m_bs = ob * tc;

  detail::ScratchBuffer u(be, static_cast<std::size_t>(kPlanes * ob * s.c * f), std::string(op) + " Winograd weights");
  detail::ScratchBuffer v(be, static_cast<std::size_t>(kPlanes * v_bs * f), std::string(op) + " Winograd input tiles");
  detail::ScratchBuffer m(be, static_cast<std::size_t>(kPlanes * m_bs * f), std::string(op) + " Winograd products");

  const bool stream = be.streams_output(static_cast<std::size_t>(s.n * s.o * s.oh * s.ow) * dtype_size(p.dtype));
  const std::string opts = options(be, p);
  cl_kernel weights = be.kernel("conv2d", "winograd_weights", opts);
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
  if (one_chunk) transform_inputs(0, tiles);
  // Otherwise, with more than one block of output channels, each chunk's tiles are transformed again for each
  // block (weights of more than 64 MB transformed, on images of more than one chunk of tiles).
  for (std::int64_t o0 = 0; o0 < s.o; o0 += ob) {
    const std::int64_t rows = std::min(ob, s.o - o0);
    OpenClBackend::set_args(weights, w, u.mem(), to_uint(s.c, op, "c"), to_uint(o0, op, "o"),
                            to_uint(rows, op, "output channels"));
    const size_t wg[2] = {ceil_div(s.c, 16), static_cast<size_t>(rows)};
    be.launch(weights, op, 2, wg, nullptr);
    Problem pr;
    pr.a = {u.mem(), 0, rows * s.c, s.c, 1};
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

      OpenClBackend::set_args(output, m.mem(), cl_ulong(pr.c_bs), to_uint(tc, op, "tiles"), bias, out,
                              to_uint(o0, op, "o"), to_uint(s.o, op, "o"), to_uint(s.oh, op, "oh"),
                              to_uint(s.ow, op, "ow"), to_uint(th, op, "tile rows"), to_uint(tw, op, "tile columns"),
                              to_uint(t0, op, "tile"), to_uint(len, op, "tiles"), cl_uint(stream ? 1 : 0));
      const size_t og[2] = {static_cast<size_t>(rows), ceil_div(len, 16)};
      be.launch(output, op, 2, og, nullptr);
    }
  }
}

}  // namespace nanscope::opencl::gemm
