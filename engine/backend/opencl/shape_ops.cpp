// Data movement host side (kernels/shape_ops.cl): concat and slice as row
// copies, permute as a strided gather, nearest 2x upsample, and dtype casts.
// All but cast are bit copies of storage words.
#include <array>

#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

using detail::ceil_div;
using detail::to_uint;

namespace {

// dst[dst_off + r * dst_stride + j] = src[src_off + r * src_stride + j] for r < rows, j < run (in elements).
void copy_rows(OpenClBackend& be, const char* op, DType t, cl_mem src, std::int64_t src_off, std::int64_t src_stride,
               cl_mem dst, std::int64_t dst_off, std::int64_t dst_stride, std::int64_t rows, std::int64_t run) {
  if (rows == 0 || run == 0) return;
  cl_kernel k = be.kernel("shape_ops", "copy_rows", be.precision_options(detail::storage_only(t)));
  OpenClBackend::set_args(k, src, cl_ulong(src_off), cl_ulong(src_stride), dst, cl_ulong(dst_off), cl_ulong(dst_stride),
                          cl_ulong(run));
  const size_t global[2] = {ceil_div(run, 16), static_cast<size_t>(rows)};
  be.launch(k, op, 2, global, nullptr);
}

}  // namespace

void OpenClBackend::upsample_nearest2x(const UpsampleArgs& args) {
  if (args.n * args.c * args.h * args.w == 0) return;
  cl_kernel k = kernel("shape_ops", "upsample_nearest2x", precision_options(detail::storage_only(args.out.dtype())));
  set_args(k, buffer(args.x), buffer(args.out), to_uint(args.h, "UPSAMPLE", "h"), to_uint(args.w, "UPSAMPLE", "w"),
           cl_uint(streams_output(args.out.bytes()) ? 1 : 0));
  const size_t global[3] = {ceil_div(args.w, 8), static_cast<size_t>(args.h), static_cast<size_t>(args.n * args.c)};
  launch(k, "UPSAMPLE", 3, global, nullptr);
}

void OpenClBackend::concat(const ConcatArgs& args) {
  std::int64_t total = 0;
  for (auto d : args.dims) total += d;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < args.inputs.size(); ++i) {
    const std::int64_t run = args.dims[i] * args.inner;
    copy_rows(*this, "CONCAT", args.out.dtype(), buffer(*args.inputs[i]), 0, run, buffer(args.out), offset * args.inner,
              total * args.inner, args.outer, run);
    offset += args.dims[i];
  }
}

void OpenClBackend::slice(const SliceArgs& args) {
  const std::int64_t len = args.end - args.begin;
  copy_rows(*this, "SLICE", args.out.dtype(), buffer(args.x), args.begin * args.inner, args.dim * args.inner,
            buffer(args.out), 0, len * args.inner, args.outer, len * args.inner);
}

void OpenClBackend::permute(const PermuteArgs& args) {
  const auto& in = args.in_shape;
  if (in[0] * in[1] * in[2] * in[3] == 0) return;
  const std::array<std::int64_t, 4> in_stride{in[1] * in[2] * in[3], in[2] * in[3], in[3], 1};
  std::array<std::int64_t, 4> out_shape{}, step{};
  for (int i = 0; i < 4; ++i) {
    out_shape[i] = in[args.perm[i]];
    step[i] = in_stride[args.perm[i]];  // input stride walked by output axis i
  }
  cl_kernel k = kernel("shape_ops", "permute4", precision_options(detail::storage_only(args.out.dtype())));
  set_args(k, buffer(args.x), buffer(args.out), to_uint(out_shape[1], "PERMUTE", "dim 1"),
           to_uint(out_shape[2], "PERMUTE", "dim 2"), to_uint(out_shape[3], "PERMUTE", "dim 3"), cl_ulong(step[0]),
           cl_ulong(step[1]), cl_ulong(step[2]), cl_ulong(step[3]));
  to_uint(out_shape[0] * out_shape[1], "PERMUTE", "dims 0*1");
  const size_t global[3] = {ceil_div(out_shape[3], 16), static_cast<size_t>(out_shape[2]),
                            static_cast<size_t>(out_shape[0] * out_shape[1])};
  launch(k, "PERMUTE", 3, global, nullptr);
}

void OpenClBackend::cast(const CastArgs& args) {
  const std::int64_t n = args.x.numel();
  if (n == 0) return;
  if (args.x.dtype() == args.out.dtype()) {
    copy_rows(*this, "CAST", args.out.dtype(), buffer(args.x), 0, 0, buffer(args.out), 0, 0, 1, n);
    return;
  }
  const char* name = "cast_from_f32";
  if (args.x.dtype() == DType::f16) name = "cast_from_f16";
  if (args.x.dtype() == DType::bf16) name = "cast_from_bf16";
  cl_kernel k = kernel("shape_ops", name, precision_options(detail::storage_only(args.out.dtype())));
  set_args(k, buffer(args.x), buffer(args.out), cl_ulong(n));
  const size_t global[1] = {ceil_div(n, 16)};
  launch(k, "CAST", 1, global, nullptr);
}

}  // namespace nanscope::opencl
