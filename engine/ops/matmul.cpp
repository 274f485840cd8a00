// MATMUL and LINEAR: shape checks, output allocation, dispatch.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

using detail::OpCall;

Tensor matmul(const OpContext& ctx, const Tensor& a, const Tensor& b, bool trans_b, float alpha, const Tensor* bias) {
  if (detail::needs_conform(ctx, {&a, &b, bias})) {
    const Tensor c = detail::conform_optional(ctx, bias, false);
    return matmul(ctx, detail::conform(ctx, a), detail::conform(ctx, b), trans_b, alpha, detail::optional_arg(c));
  }
  const OpCall call(ctx, "MATMUL", {{"a", &a}, {"b", &b}, {"bias", bias}});
  call.check_tensor("a", a);
  call.check_tensor("b", b);
  call.check_rank("a", a, 2, 1 << 20);
  call.check_rank("b", b, 2, 1 << 20);
  const std::int64_t m = a.dim(-2), k = a.dim(-1);
  const std::int64_t kb = trans_b ? b.dim(-1) : b.dim(-2);
  const std::int64_t n = trans_b ? b.dim(-2) : b.dim(-1);
  call.require(kb == k, "inner dimensions differ: a has k=" + std::to_string(k) + ", b has k=" + std::to_string(kb) +
                            (trans_b ? " (b is [..., n, k])" : " (b is [..., k, n])"));
  call.check_vector("bias", bias, n);

  const std::int64_t batch = detail::dims_product(a.shape(), 0, a.rank() - 2);
  const std::int64_t b_batch = detail::dims_product(b.shape(), 0, b.rank() - 2);
  const bool b_broadcast = b_batch == 1;
  if (!b_broadcast) {
    const Shape a_lead(a.shape().begin(), a.shape().end() - 2), b_lead(b.shape().begin(), b.shape().end() - 2);
    call.require(a_lead == b_lead, "batch dimensions differ: a " + shape_str(a_lead) + ", b " + shape_str(b_lead) +
                                       " (b's batch must equal a's, or b must be shared weights)");
  }
  Shape out_shape(a.shape().begin(), a.shape().end() - 1);
  out_shape.push_back(n);
  Tensor out = call.allocate(out_shape);
  call.run(&Backend::matmul,
           MatmulArgs{a, b, bias, out, batch, m, n, k, trans_b, b_broadcast, alpha, ctx.precision, false});
  call.trace({&a, &b, bias}, out);
  return out;
}

namespace {

// own_weight: `weight` is the caller's own tensor, not a converted copy made for this call (the backend may keep
// a prepared form of it: MatmulArgs::b_weight).
Tensor linear_with(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor* bias, bool own_weight) {
  const OpCall call(ctx, "LINEAR", {{"x", &x}, {"weight", &weight}, {"bias", bias}});
  call.check_tensor("x", x);
  call.check_tensor("weight", weight);
  call.check_rank("x", x, 1, 1 << 20);
  call.check_rank("weight", weight, 2, 2);
  const std::int64_t n = weight.dim(0), k = weight.dim(1);
  call.require(x.dim(-1) == k,
               "x has " + std::to_string(x.dim(-1)) + " features but weight [out, in] expects " + std::to_string(k));
  call.check_vector("bias", bias, n);
  // Every leading dimension of x folds into m: one shared [n, k] weight.
  const std::int64_t m = detail::dims_product(x.shape(), 0, x.rank() - 1);
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(n);
  Tensor out = call.allocate(out_shape);
  call.run(&Backend::matmul, MatmulArgs{x, weight, bias, out, 1, m, n, k, true, true, 1.0f, ctx.precision, own_weight});
  call.trace({&x, &weight, bias}, out);
  return out;
}

}  // namespace

Tensor linear(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  if (detail::needs_conform(ctx, {&x, &weight, bias})) {
    const Tensor b = detail::conform_optional(ctx, bias, false);
    const Tensor w = detail::conform(ctx, weight, false);
    return linear_with(ctx, detail::conform(ctx, x), w, detail::optional_arg(b), w.storage() == weight.storage());
  }
  return linear_with(ctx, x, weight, bias, true);
}

}  // namespace nanscope::ops
