// ATTENTION: multi-head attention on [batch, seq, heads * d] tensors.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

Tensor attention(const OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int heads, float scale,
                 bool causal) {
  if (detail::needs_conform(ctx, {&q, &k, &v})) {
    return attention(ctx, detail::conform(ctx, q), detail::conform(ctx, k), detail::conform(ctx, v), heads, scale,
                     causal);
  }
  const detail::OpCall call(ctx, "ATTENTION", {{"q", &q}, {"k", &k}, {"v", &v}});
  call.check_tensor("q", q);
  call.check_tensor("k", k);
  call.check_tensor("v", v);
  call.check_rank("q", q, 3, 3);
  call.check_rank("k", k, 3, 3);
  call.check_rank("v", v, 3, 3);
  call.require(heads > 0, "heads must be positive, got " + std::to_string(heads));
  const std::int64_t batch = q.dim(0), sq = q.dim(1), sk = k.dim(1);
  call.require(k.dim(0) == batch && v.dim(0) == batch, "q, k and v must have the same batch size");
  call.require(v.dim(1) == sk, "k and v must have the same sequence length");
  call.require(q.dim(2) == k.dim(2), "q and k must have the same feature size (heads * d)");
  call.require(q.dim(2) % heads == 0 && v.dim(2) % heads == 0,
               "the feature sizes of q and v must be multiples of heads=" + std::to_string(heads));
  call.require(ctx.attention.slice_size >= 1 || ctx.attention.impl != AttentionImpl::sliced,
               "attention.slice_size must be at least 1 for the sliced implementation");
  const std::int64_t d = q.dim(2) / heads, dv = v.dim(2) / heads;
  Tensor out = call.allocate({batch, sq, v.dim(2)});
  call.run(&Backend::attention,
           AttentionArgs{q, k, v, out, batch, sq, sk, heads, d, dv, scale, causal, ctx.precision, ctx.attention});
  if (ctx.faults != nullptr) ctx.faults->apply(ctx, "ATTENTION", out);
  call.trace({&q, &k, &v}, out);
  return out;
}

}  // namespace nanscope::ops
