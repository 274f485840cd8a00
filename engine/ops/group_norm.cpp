// GROUP_NORM: x [n, c, ...] with statistics per group of c / groups channels.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

Tensor group_norm(const OpContext& ctx, const Tensor& x, int groups, const Tensor* gamma, const Tensor* beta,
                  float eps) {
  if (detail::needs_conform(ctx, {&x, gamma, beta})) {
    const Tensor g = detail::conform_optional(ctx, gamma, false), b = detail::conform_optional(ctx, beta, false);
    return group_norm(ctx, detail::conform(ctx, x), groups, detail::optional_arg(g), detail::optional_arg(b), eps);
  }
  const detail::OpCall call(ctx, "GROUP_NORM", {{"x", &x}, {"gamma", gamma}, {"beta", beta}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 2, 1 << 20);
  const std::int64_t n = x.dim(0), c = x.dim(1);
  call.require(groups > 0 && c % groups == 0, "groups=" + std::to_string(groups) + " must be positive and divide the " +
                                                  std::to_string(c) + " channels");
  call.require(eps >= 0.0f, "eps must not be negative");
  call.check_vector("gamma", gamma, c);
  call.check_vector("beta", beta, c);
  const std::int64_t s = detail::dims_product(x.shape(), 2, x.rank());
  Tensor out = call.allocate(x.shape());
  call.run(&Backend::group_norm, GroupNormArgs{x, gamma, beta, out, n, c, s, groups, eps, ctx.precision});
  call.trace({&x, gamma, beta}, out);
  return out;
}

}  // namespace nanscope::ops
