// SILU, GELU, QUICK_GELU, SCALE (elementwise unary ops) and GEGLU.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

namespace {

Tensor unary(const OpContext& ctx, std::string_view op, const Tensor& x, UnaryOp kind, float param) {
  if (detail::needs_conform(ctx, {&x})) return unary(ctx, op, detail::conform(ctx, x), kind, param);
  const detail::OpCall call(ctx, op, {{"x", &x}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 1, 1 << 20);
  Tensor out = call.allocate(x.shape());
  call.run(&Backend::unary, UnaryArgs{x, out, kind, param, ctx.precision});
  call.trace({&x}, out);
  return out;
}

}  // namespace

Tensor silu(const OpContext& ctx, const Tensor& x) { return unary(ctx, "SILU", x, UnaryOp::silu, 0.0f); }

Tensor gelu(const OpContext& ctx, const Tensor& x, GeluApprox approx) {
  return unary(ctx, "GELU", x, approx == GeluApprox::tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu_erf, 0.0f);
}

Tensor quick_gelu(const OpContext& ctx, const Tensor& x) {
  return unary(ctx, "QUICK_GELU", x, UnaryOp::quick_gelu, 0.0f);
}

Tensor scale(const OpContext& ctx, const Tensor& x, float factor) {
  return unary(ctx, "SCALE", x, UnaryOp::scale, factor);
}

Tensor geglu(const OpContext& ctx, const Tensor& x) {
  if (detail::needs_conform(ctx, {&x})) return geglu(ctx, detail::conform(ctx, x));
  const detail::OpCall call(ctx, "GEGLU", {{"x", &x}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 1, 1 << 20);
  const std::int64_t two_d = x.dim(-1);
  call.require(two_d % 2 == 0,
               "the last dimension (" + std::to_string(two_d) + ") must be even: it holds the values and the gate");
  Shape out_shape = x.shape();
  out_shape.back() = two_d / 2;
  Tensor out = call.allocate(out_shape);
  call.run(&Backend::geglu, GegluArgs{x, out, x.numel() / two_d, two_d / 2, ctx.precision});
  call.trace({&x}, out);
  return out;
}

}  // namespace nanscope::ops
