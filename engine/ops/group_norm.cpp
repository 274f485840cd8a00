// GROUP_NORM: x [n, c, ...] with statistics per group of c / groups channels;
// GROUP_NORM+SILU: the same with SILU in the same pass.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

namespace {

// `over_x`: the output is written over x's buffer (detail::reusable(ctx, x), checked by the caller). Each
// work-group reads its group whole for the statistics before it writes any of it.
Tensor run_group_norm(const OpContext& ctx, const Tensor& x, int groups, const Tensor* gamma, const Tensor* beta,
                      float eps, bool silu, bool over_x = false) {
  if (detail::needs_conform(ctx, {&x, gamma, beta})) {
    const Tensor g = detail::conform_optional(ctx, gamma, false), b = detail::conform_optional(ctx, beta, false);
    return run_group_norm(ctx, detail::conform(ctx, x), groups, detail::optional_arg(g), detail::optional_arg(b), eps,
                          silu);
  }
  const detail::OpCall call(ctx, silu ? "GROUP_NORM+SILU" : "GROUP_NORM",
                            {{"x", &x}, {"gamma", gamma}, {"beta", beta}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 2, 1 << 20);
  const std::int64_t n = x.dim(0), c = x.dim(1);
  call.require(groups > 0 && c % groups == 0, "groups=" + std::to_string(groups) + " must be positive and divide the " +
                                                  std::to_string(c) + " channels");
  call.require(eps >= 0.0f, "eps must not be negative");
  call.check_vector("gamma", gamma, c);
  call.check_vector("beta", beta, c);
  const std::int64_t s = detail::dims_product(x.shape(), 2, x.rank());
  Tensor out = over_x ? x : call.allocate(x.shape());
  call.run(&Backend::group_norm, GroupNormArgs{x, gamma, beta, out, n, c, s, groups, eps, ctx.precision, silu});
  call.trace({&x, gamma, beta}, out);
  return out;
}

}  // namespace

Tensor group_norm(const OpContext& ctx, const Tensor& x, int groups, const Tensor* gamma, const Tensor* beta,
                  float eps) {
  return run_group_norm(ctx, x, groups, gamma, beta, eps, false);
}

Tensor group_norm_silu(const OpContext& ctx, const OpContext& act, Tensor x, int groups, const Tensor* gamma,
                       const Tensor* beta, float eps) {
  // The layer trace reports every module's output, the norm's too: traced calls take the two ops. So do a SILU
  // in another dtype (mixed precision casts between them) and fault emulation, which may alter either output.
  const bool fused = !traces_each_module(ctx) && !traces_each_module(act) && ctx.faults == nullptr &&
                     act.faults == nullptr && act.precision.dtype == ctx.precision.dtype;
  if (!fused) return silu(act, group_norm(ctx, x, groups, gamma, beta, eps));
  const bool over_x = detail::reusable(ctx, x) && (!gamma || gamma->storage() != x.storage()) &&
                      (!beta || beta->storage() != x.storage());
  return run_group_norm(ctx, x, groups, gamma, beta, eps, true, over_x);
}

}  // namespace nanscope::ops
