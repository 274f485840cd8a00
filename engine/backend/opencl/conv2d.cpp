// CONV2D host side: convolution as GEMM with the weights as A [O][C*KH*KW]
// and the im2col matrix as B [C*KH*KW][OH*OW] per image (kernels/conv2d.cl,
// kernels/matmul.cl). A 1x1 stride-1 unpadded convolution is a plain GEMM on
// the input. 3x3 stride-1 convolutions in the CPU family with f32 accumulation
// run as Winograd F(4x4, 3x3) where it is faster (gemm::runs_winograd,
// winograd.cpp). Otherwise: on GPU-style backends (f32 accumulation) an implicit
// GEMM that reads the columns from the input on the fly; on the CPU family
// with f32 accumulation, where it is the faster path (gemm::runs_cpu_conv:
// stride 1, rows of whole vectors, weights small enough), one kernel whose
// work-items gather their own B sub-panels from the image (conv_cpu, no
// column matrix). Otherwise the columns are packed into panels in chunks of
// output positions so the scratch stays bounded (a 512x512 VAE layer would
// need >1 GiB at once), then multiplied by gemm_cpu_direct_a (f32
// accumulation) or gemm_native.
#include <algorithm>
#include <optional>

#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

using detail::ceil_div;
using detail::to_uint;

namespace {
// conv_im2col_panels' work-items: 16 rows of 8 panels each (8 x 16 x 16 columns at most).
constexpr std::int64_t kIm2colRows = 16, kIm2colPanels = 8;

gemm::ConvShape conv_shape(const Conv2dArgs& a) {
  return {a.n, a.c, a.h, a.w_in, a.o, a.kh, a.kw, a.stride, a.padding, a.oh, a.ow};
}
}  // namespace

bool OpenClBackend::conv2d_winograd(const Conv2dArgs& a) const {
  return !a.is_gemm() && gemm::runs_winograd(*this, a.precision, conv_shape(a));
}

void OpenClBackend::conv2d(const Conv2dArgs& a) {
  const char* op = "CONV2D";
  const std::int64_t k = a.c * a.kh * a.kw;
  const std::int64_t p = a.oh * a.ow;
  if (a.n * a.o * p == 0) return;

  gemm::Problem pr;
  pr.a = {buffer(a.w), 0, 0, k, 1};  // weights shared by every image
  pr.c = buffer(a.out);
  pr.c_bs = a.o * p;
  pr.ldc = p;
  if (a.bias) {
    pr.bias = buffer(*a.bias);
    pr.bias_mode = gemm::kBiasRow;
  }
  pr.m = a.o;
  pr.k = k;

  if (a.is_gemm()) {
    pr.b = {buffer(a.x), 0, a.c * a.h * a.w_in, a.h * a.w_in, 1};
    pr.batch = a.n;
    pr.n = p;
    gemm::run(*this, a.precision, pr, op);
    return;
  }

  const gemm::ConvShape s = conv_shape(a);
  cl_mem bias = a.bias ? buffer(*a.bias) : nullptr;
  if (!gemm::uses_panels(*this, a.precision)) {
    gemm::run_implicit_conv(*this, a.precision, s, buffer(a.w), buffer(a.x), bias, buffer(a.out), op);
    return;
  }
  if (gemm::runs_winograd(*this, a.precision, s)) {
    gemm::run_winograd(*this, a.precision, s, buffer(a.w), buffer(a.x), bias, buffer(a.out), op);
    return;
  }
  if (gemm::runs_cpu_conv(*this, a.precision, s)) {
    gemm::run_cpu_conv(*this, a.precision, s, buffer(a.w), buffer(a.x), bias, buffer(a.out), op);
    return;
  }

  const gemm::Tuning& t = gemm::tuning(device());
  const std::string opts = gemm::options(*this, a.precision);
  // Columns per chunk (whole panels) and images per launch within the scratch budget.
  const auto budget = static_cast<std::int64_t>(gemm::scratch_budget(device()) / sizeof(float));
  std::int64_t pc = p;
  std::int64_t images = a.n;
  const std::int64_t per_image = gemm::b_panel_floats(t, p, k);
  if (per_image * images > budget) {
    images = std::max<std::int64_t>(1, budget / per_image);
    if (per_image > budget) {
      images = 1;
      pc = std::max<std::int64_t>(1, budget / (k * t.nr())) * t.nr();
    }
  }
  const std::int64_t chunk_elems = gemm::b_panel_floats(t, pc, k);
  detail::ScratchBuffer cols(*this, static_cast<std::size_t>(chunk_elems * images) * sizeof(float),
                             "CONV2D im2col columns");
  // Weights are read where they lie (gemm::reads_a_directly); with native accumulation they are packed to f32
  // panels once per call.
  const bool direct = gemm::reads_a_directly(*this, a.precision, pr.a);
  std::optional<detail::ScratchBuffer> a_panels;
  if (!direct) {
    a_panels.emplace(*this, static_cast<std::size_t>(gemm::a_panel_floats(t, a.o, k)) * sizeof(float),
                     "CONV2D weight panels");
    gemm::pack_a(*this, a.precision, pr.a, 1, a.o, k, a_panels->mem(), 0, op);
  }

  cl_kernel im2col = kernel("conv2d", "conv_im2col_panels", opts);
  for (std::int64_t b0 = 0; b0 < a.n; b0 += images) {
    const std::int64_t nb = std::min(images, a.n - b0);
    for (std::int64_t p0 = 0; p0 < p; p0 += pc) {
      const std::int64_t len = std::min(pc, p - p0);
      set_args(im2col, buffer(a.x), cl_ulong(b0 * a.c * a.h * a.w_in), cl_ulong(a.c * a.h * a.w_in), cols.mem(),
               cl_ulong(chunk_elems), to_uint(a.c, op, "c"), to_uint(a.h, op, "h"), to_uint(a.w_in, op, "w"),
               to_uint(a.kh, op, "kh"), to_uint(a.kw, op, "kw"), cl_uint(a.stride), cl_uint(a.padding),
               to_uint(a.ow, op, "ow"), to_uint(p0, op, "position"), to_uint(len, op, "positions"),
               to_uint(gemm::k_block(t, k), op, "kc"), cl_uint(kIm2colRows), cl_uint(kIm2colPanels));
      const size_t global[3] = {ceil_div(k, kIm2colRows), ceil_div(ceil_div(len, t.nr()), kIm2colPanels),
                                static_cast<size_t>(nb)};
      launch(im2col, op, 3, global, nullptr);

      gemm::Problem chunk = pr;
      chunk.batch = nb;
      chunk.n = len;
      chunk.c_off = b0 * pr.c_bs + p0;
      chunk.b_panels = cols.mem();
      chunk.b_panels_bs = chunk_elems;
      if (direct) {
        gemm::compute_direct_a(*this, a.precision, pr.a, chunk, op);
      } else {
        gemm::compute_panels(*this, a.precision, a_panels->mem(), 0, 0, chunk, op);
      }
    }
  }
}

}  // namespace nanscope::opencl
