// SILU / GELU / QUICK_GELU / SCALE and GEGLU host side (kernels/activation.cl):
// one work-item per 16 elements; GEGLU's CPU family a row per work-item.
#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

using detail::ceil_div;

namespace {

// One program per storage dtype, with exact division as GROUP_NORM's program:
// SILU and GROUP_NORM's fused SILU give the same values.
std::string activation_options(OpenClBackend& be, const Precision& p) {
  return be.precision_options(detail::storage_only(p.dtype)) + detail::exact_math_options(be.device());
}

[[maybe_unused]] const bool kRegistered = (register_program_options("activation", activation_options), true);

}  // namespace

void OpenClBackend::unary(const UnaryArgs& args) {
  const std::int64_t n = args.x.numel();
  if (n == 0) return;
  const char* name = "unary_silu";
  const char* op = "SILU";
  switch (args.op) {
    case UnaryOp::silu: break;
    case UnaryOp::gelu_erf: name = "unary_gelu_erf", op = "GELU"; break;
    case UnaryOp::gelu_tanh: name = "unary_gelu_tanh", op = "GELU"; break;
    case UnaryOp::quick_gelu: name = "unary_quick_gelu", op = "QUICK_GELU"; break;
    case UnaryOp::scale: name = "unary_scale", op = "SCALE"; break;
  }
  cl_kernel k = kernel("activation", name, activation_options(*this, args.precision));
  set_args(k, buffer(args.x), buffer(args.out), cl_ulong(n), args.param);
  const size_t global[1] = {ceil_div(n, 16)};
  launch(k, op, 1, global, nullptr);
}

void OpenClBackend::geglu(const GegluArgs& args) {
  if (args.rows * args.d == 0) return;
  cl_kernel k = kernel("activation", "geglu", activation_options(*this, args.precision));
  // kernels/activation.cl: the CPU family streams a whole row per work-item, the GPU family a chunk.
  const std::size_t chunks = ceil_div(args.d, 16);
  const std::size_t per_item = kernel_style() == KernelStyle::cpu ? chunks : 1;
  set_args(k, buffer(args.x), buffer(args.out), detail::to_uint(args.d, "GEGLU", "d"),
           detail::to_uint(static_cast<std::int64_t>(per_item), "GEGLU", "per_item"));
  const size_t global[2] = {ceil_div(chunks, per_item), static_cast<size_t>(args.rows)};
  launch(k, "GEGLU", 2, global, nullptr);
}

}  // namespace nanscope::opencl
