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
// a prepared form of it: MatmulArgs::b_weight). epilogue: MatmulArgs'; with geglu the output is [..., out / 2].
Tensor linear_with(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor* bias, bool own_weight,
                   MatmulEpilogue epilogue = MatmulEpilogue::none) {
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
  out_shape.push_back(epilogue == MatmulEpilogue::geglu ? n / 2 : n);
  if (epilogue == MatmulEpilogue::geglu) call.require(n % 2 == 0, "GEGLU needs an even number of outputs");
  Tensor out = call.allocate(out_shape);
  call.run(&Backend::matmul,
           MatmulArgs{x, weight, bias, out, 1, m, n, k, true, true, 1.0f, ctx.precision, own_weight, epilogue});
  call.trace({&x, &weight, bias}, out);
  return out;
}

// Whether LINEAR in ctx and the op after it in `next` may run as one call on these inputs: nothing needs the
// projection on its own, both compute alike, and the backend applies the epilogue to this problem.
bool fuses_next(const OpContext& ctx, const OpContext& next, MatmulEpilogue epilogue, const Tensor& x,
                const Tensor& weight, const Tensor* bias) {
  const std::initializer_list<const Tensor*> inputs{&x, &weight, bias};
  if (traces_each_module(ctx) || traces_each_module(next) || ctx.faults != nullptr || next.faults != nullptr ||
      next.precision.dtype != ctx.precision.dtype || detail::needs_conform(ctx, inputs) ||
      detail::needs_conform(next, inputs) || !x.defined() || !weight.defined() || x.rank() < 1 || weight.rank() != 2 ||
      x.dim(x.rank() - 1) != weight.dim(1) || (bias && !bias->defined())) {
    return false;  // linear() reports what is wrong with the inputs
  }
  const std::int64_t m = detail::dims_product(x.shape(), 0, x.rank() - 1);
  return ctx.be().linear_fuses_epilogue(epilogue, ctx.precision, m, weight.dim(0), weight.dim(1), bias != nullptr);
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

Tensor linear_geglu(const OpContext& ctx, const OpContext& act, const Tensor& x, const Tensor& weight,
                    const Tensor* bias) {
  if (!fuses_next(ctx, act, MatmulEpilogue::geglu, x, weight, bias)) {
    return geglu(act, linear(ctx, x, weight, bias));
  }
  return linear_with(ctx, x, weight, bias, true, MatmulEpilogue::geglu);
}

}  // namespace nanscope::ops
