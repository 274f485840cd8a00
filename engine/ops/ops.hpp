#pragma once
// The op layer: eager ops that check shapes and dtypes, allocate the output on
// the context's backend, dispatch, and report to the tracer. Every input must
// live on ctx.backend and have dtype ctx.precision.dtype (unless stated);
// violations throw OpError with op_message(). One implementation file per op
// family in engine/ops/, one kernel file per family in kernels/, one reference
// file per family in engine/backend/reference/.

#include <span>
#include <vector>

#include "ops/op_context.hpp"

namespace nanscope::ops {

// a [..., m, k] x b [..., k, n] (or b [..., n, k] with trans_b). b may have no
// batch dims (shared weights). Optional bias [n]. out = alpha * a.b + bias.
Tensor matmul(const OpContext& ctx, const Tensor& a, const Tensor& b, bool trans_b = false, float alpha = 1.0f,
              const Tensor* bias = nullptr);
// x [..., in] with weight [out, in] (torch layout) and bias [out].
Tensor linear(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor* bias);
// geglu(act, linear(ctx, x, weight, bias)) as one LINEAR call whose GEMM applies the GEGLU to its results
// (MatmulEpilogue), bit-equal to the two ops, where the backend can (Backend::linear_fuses_epilogue), both
// compute alike (one dtype, no input to convert) and nothing needs the projection's output on its own (the
// layer trace, fault emulation); otherwise the two ops, each traced.
Tensor linear_geglu(const OpContext& ctx, const OpContext& act, const Tensor& x, const Tensor& weight,
                    const Tensor* bias);

// x [n, c, h, w], weight [o, c, kh, kw], bias [o]; square stride and padding.
Tensor conv2d(const OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor* bias, int stride, int padding);

// x [n, c, ...]: statistics over (c / groups) channels x all spatial positions.
Tensor group_norm(const OpContext& ctx, const Tensor& x, int groups, const Tensor* gamma, const Tensor* beta,
                  float eps);
// silu(group_norm(x)) with the norm in `ctx` and the SILU in `act` (its own
// module path and precision). One pass over the data, bit-equal to the two ops,
// where both compute alike and nothing traces the norm's output; otherwise the
// two ops, each traced. The result is written over x's buffer when the caller
// moved in the only handle to it (detail::reusable).
Tensor group_norm_silu(const OpContext& ctx, const OpContext& act, Tensor x, int groups, const Tensor* gamma,
                       const Tensor* beta, float eps);
// x [..., d]: statistics over the last dimension.
Tensor layer_norm(const OpContext& ctx, const Tensor& x, const Tensor* gamma, const Tensor* beta, float eps);

enum class GeluApprox { none, tanh };
Tensor silu(const OpContext& ctx, const Tensor& x);
Tensor gelu(const OpContext& ctx, const Tensor& x, GeluApprox approx = GeluApprox::none);
Tensor quick_gelu(const OpContext& ctx, const Tensor& x);  // x * sigmoid(1.702 x), CLIP
// x [..., 2d] -> x[..., :d] * gelu(x[..., d:]) (diffusers GEGLU after its projection).
Tensor geglu(const OpContext& ctx, const Tensor& x);
Tensor scale(const OpContext& ctx, const Tensor& x, float factor);

// Softmax over the last dimension.
Tensor softmax(const OpContext& ctx, const Tensor& x);

// x [n, c, h, w] -> [n, c, 2h, 2w], nearest neighbour.
Tensor upsample_nearest2x(const OpContext& ctx, const Tensor& x);

// Elementwise with numpy broadcasting of b onto a's shape (b's rank <= a's rank).
Tensor add(const OpContext& ctx, const Tensor& a, const Tensor& b);
// add(a, b), written over a's buffer when the caller moved in the only handle
// to it and the call is not traced (detail::reusable): one activation less
// alive at a residual connection.
Tensor add_reusing(const OpContext& ctx, Tensor a, const Tensor& b);
Tensor sub(const OpContext& ctx, const Tensor& a, const Tensor& b);
Tensor mul(const OpContext& ctx, const Tensor& a, const Tensor& b);

// Shape ops (copies). dim may be negative.
Tensor concat(const OpContext& ctx, std::span<const Tensor> parts, int dim);
Tensor slice(const OpContext& ctx, const Tensor& x, int dim, std::int64_t begin, std::int64_t end);
Tensor permute(const OpContext& ctx, const Tensor& x, std::span<const int> perm);  // rank <= 4
// To another dtype (x may have any dtype; the output has `to`).
Tensor cast(const OpContext& ctx, const Tensor& x, DType to);

// Sinusoidal timestep embedding [timesteps.size(), dim] (diffusers get_timestep_embedding).
Tensor timestep_embedding(const OpContext& ctx, std::span<const float> timesteps, int dim, bool flip_sin_to_cos,
                          float downscale_freq_shift, float max_period = 10000.0f);

// Multi-head attention on [batch, seq, heads * d] tensors; implementation and
// slicing from ctx.attention, softmax precision from ctx.precision.
Tensor attention(const OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int heads, float scale,
                 bool causal = false);

}  // namespace nanscope::ops
