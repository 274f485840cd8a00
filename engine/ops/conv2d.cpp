// CONV2D: shape checks, output size, dispatch.

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

Tensor conv2d(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor* bias, int stride,
              int padding) {
  if (detail::needs_conform(ctx, {&x, &weight, bias})) {
    const Tensor b = detail::conform_optional(ctx, bias, false);
    return conv2d(ctx, detail::conform(ctx, x), detail::conform(ctx, weight, false), detail::optional_arg(b), stride,
                  padding);
  }
  const detail::OpCall call(ctx, "CONV2D", {{"x", &x}, {"weight", &weight}, {"bias", bias}});
  call.check_tensor("x", x);
  call.check_tensor("weight", weight);
  call.check_rank("x", x, 4, 4);
  call.check_rank("weight", weight, 4, 4);
  call.require(stride >= 1, "stride must be at least 1, got " + std::to_string(stride));
  call.require(padding >= 0, "padding must not be negative, got " + std::to_string(padding));
  const std::int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const std::int64_t o = weight.dim(0), kh = weight.dim(2), kw = weight.dim(3);
  call.require(weight.dim(1) == c, "weight expects " + std::to_string(weight.dim(1)) + " input channels, x has " +
                                       std::to_string(c) + " (grouped convolution is not supported)");
  call.check_vector("bias", bias, o);
  const std::int64_t ph = h + 2 * padding, pw = w + 2 * padding;
  call.require(ph >= kh && pw >= kw, "the " + std::to_string(kh) + "x" + std::to_string(kw) +
                                         " kernel is larger than the padded input " + std::to_string(ph) + "x" +
                                         std::to_string(pw));
  const std::int64_t oh = (ph - kh) / stride + 1, ow = (pw - kw) / stride + 1;
  Tensor out = call.allocate({n, o, oh, ow});
  call.run(&Backend::conv2d,
           Conv2dArgs{x, weight, bias, out, n, c, h, w, o, kh, kw, oh, ow, stride, padding, ctx.precision});
  call.trace({&x, &weight, bias}, out);
  return out;
}

}  // namespace nanscope::ops
