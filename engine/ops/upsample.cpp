// UPSAMPLE_NEAREST2X: [n, c, h, w] -> [n, c, 2h, 2w].

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

Tensor upsample_nearest2x(const OpContext& ctx, const Tensor& x) {
  if (detail::needs_conform(ctx, {&x})) return upsample_nearest2x(ctx, detail::conform(ctx, x));
  const detail::OpCall call(ctx, "UPSAMPLE_NEAREST2X", {{"x", &x}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 4, 4);
  const std::int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  Tensor out = call.allocate({n, c, 2 * h, 2 * w});
  call.run(&Backend::upsample_nearest2x, UpsampleArgs{x, out, n, c, h, w});
  call.trace({&x}, out);
  return out;
}

}  // namespace nanscope::ops
