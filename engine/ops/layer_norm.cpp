// LAYER_NORM: statistics over the last dimension.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

Tensor layer_norm(const OpContext& ctx, const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps) {
  if (detail::needs_conform(ctx, {&x, gamma, beta})) {
    const Tensor g = detail::conform_optional(ctx, gamma, false), b = detail::conform_optional(ctx, beta, false);
    return layer_norm(ctx, detail::conform(ctx, x), detail::optional_arg(g), detail::optional_arg(b), eps);
  }
  const detail::OpCall call(ctx, "LAYER_NORM", {{"x", &x}, {"gamma", gamma}, {"beta", beta}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 1, 1 << 20);
  call.require(eps >= 0.0f, "eps must not be negative");
  const std::int64_t d = x.dim(-1);
  call.check_vector("gamma", gamma, d);
  call.check_vector("beta", beta, d);
  Tensor out = call.allocate(x.shape());
  call.run(&Backend::layer_norm, LayerNormArgs{x, gamma, beta, out, x.numel() / d, d, eps, ctx.precision});
  call.trace({&x, gamma, beta}, out);
  return out;
}

}  // namespace nanscope::ops
