// SOFTMAX over the last dimension.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

Tensor softmax(const OpContext& ctx, const Tensor& x) {
  if (detail::needs_conform(ctx, {&x})) return softmax(ctx, detail::conform(ctx, x));
  const detail::OpCall call(ctx, "SOFTMAX", {{"x", &x}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 1, 1 << 20);
  const std::int64_t d = x.dim(-1);
  Tensor out = call.allocate(x.shape());
  call.run(&Backend::softmax, SoftmaxArgs{x, out, x.numel() / d, d, ctx.precision});
  call.trace({&x}, out);
  return out;
}

}  // namespace nanscope::ops
