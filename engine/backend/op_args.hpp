#pragma once
// Arguments the op layer (engine/ops) hands to a backend after it checked
// shapes and dtypes and allocated the output. All tensors share one dtype
// (precision.dtype) unless stated; all are contiguous.
//
// Accumulation semantics (both backends implement exactly these):
// - accumulate=f32: sums in f32 registers (reference: f64), one rounding to the
//   storage dtype at the store.
// - accumulate=native (f16/bf16 storage): acc starts at 0, for k ascending
//   acc = round_dtype(acc + a*b) (product exact, one rounding per partial sum);
//   then out = round_dtype(alpha * acc + bias). An f16 sum past 65504 is +-Inf.
// - Norm statistics (group/layer norm) follow the same rule for their sums of x
//   and x*x, in memory order; normalisation arithmetic is f32.

#include <array>
#include <cstdint>
#include <vector>

#include "core/precision.hpp"
#include "core/tensor.hpp"

namespace nanscope {

// What follows the product y = round(alpha * a.b + bias) in one MATMUL call (ops::linear_geglu): nothing
// (out = y), or out [batch, m, n/2] = y[..., :n/2] * gelu_erf(y[..., n/2:]), the GEGLU op. Bit for bit the
// product followed by that op; only where Backend::linear_fuses_epilogue says so.
enum class MatmulEpilogue : std::uint8_t { none, geglu };

struct MatmulArgs {
  const Tensor& a;     // [batch, m, k]
  const Tensor& b;     // [b_batch, k, n], or [b_batch, n, k] when trans_b; b_batch is batch or 1
  const Tensor* bias;  // [n] or null
  Tensor& out;         // [batch, m, n]
  std::int64_t batch, m, n, k;
  bool trans_b;
  bool b_broadcast;  // b has batch 1 and is shared by every batch
  float alpha;
  Precision precision;
  // b is a weight the caller keeps unchanged for as long as it lives (LINEAR's
  // own weight): a backend may keep b in a prepared form with it.
  bool b_weight;
  MatmulEpilogue epilogue = MatmulEpilogue::none;
};

struct Conv2dArgs {
  const Tensor& x;     // [n, c, h, w]
  const Tensor& w;     // [o, c, kh, kw]
  const Tensor* bias;  // [o] or null
  Tensor& out;         // [n, o, oh, ow]
  std::int64_t n, c, h, w_in, o, kh, kw, oh, ow;
  int stride, padding;
  Precision precision;
  // Native accumulation order: k = (ci * kh + ky) * kw + kx ascending, bias last.

  // A 1x1, stride-1, unpadded convolution is a plain GEMM per image (o x c times c x h*w).
  bool is_gemm() const { return kh == 1 && kw == 1 && stride == 1 && padding == 0; }
};

struct GroupNormArgs {
  const Tensor& x;      // [n, c, spatial...] viewed as [n, c, s]
  const Tensor* gamma;  // [c] or null
  const Tensor* beta;   // [c] or null
  Tensor& out;
  std::int64_t n, c, s;
  int groups;
  float eps;
  Precision precision;
  // GROUP_NORM then SILU in one pass: out = silu(y) with y the normalised
  // value rounded to the storage dtype, so bit-equal to the two ops.
  bool silu = false;
};

struct LayerNormArgs {
  const Tensor& x;      // [rows, d]
  const Tensor* gamma;  // [d] or null
  const Tensor* beta;   // [d] or null
  Tensor& out;
  std::int64_t rows, d;
  float eps;
  Precision precision;
};

enum class UnaryOp : std::uint8_t { silu, gelu_erf, gelu_tanh, quick_gelu, scale };
struct UnaryArgs {
  const Tensor& x;
  Tensor& out;
  UnaryOp op;
  float param;  // the factor for scale
  Precision precision;
};

struct GegluArgs {
  const Tensor& x;  // [rows, 2 * d]: first half values, second half gate
  Tensor& out;      // [rows, d] = x[:, :d] * gelu_erf(x[:, d:])
  std::int64_t rows, d;
  Precision precision;
};

struct SoftmaxArgs {
  const Tensor& x;  // [rows, d], softmax over d
  Tensor& out;
  std::int64_t rows, d;
  Precision precision;  // softmax == native: exp, sum and quotient rounded to dtype
};

struct UpsampleArgs {
  const Tensor& x;  // [n, c, h, w]
  Tensor& out;      // [n, c, 2h, 2w], nearest
  std::int64_t n, c, h, w;
};

enum class BinaryOp : std::uint8_t { add, sub, mul };
struct BinaryArgs {
  const Tensor& a;  // shape4 (after collapsing to rank 4)
  const Tensor& b;  // broadcast to shape4 through b_strides (0 on broadcast dims)
  Tensor& out;      // shape4
  BinaryOp op;
  std::array<std::int64_t, 4> shape4;
  std::array<std::int64_t, 4> b_strides;
  Precision precision;
};

// Concatenation and slicing along one dimension, seen as [outer, dim, inner].
struct ConcatArgs {
  std::vector<const Tensor*> inputs;  // each [outer, dims[i], inner]
  Tensor& out;                        // [outer, sum(dims), inner]
  std::int64_t outer, inner;
  std::vector<std::int64_t> dims;
};

struct SliceArgs {
  const Tensor& x;  // [outer, dim, inner]
  Tensor& out;      // [outer, end - begin, inner]
  std::int64_t outer, dim, inner, begin, end;
};

struct PermuteArgs {
  const Tensor& x;  // rank 4 (padded with leading 1s)
  Tensor& out;
  std::array<std::int64_t, 4> in_shape;
  std::array<int, 4> perm;  // out dim i = in dim perm[i]
};

struct CastArgs {
  const Tensor& x;
  Tensor& out;  // same shape, other dtype; RNE, f16 overflow to Inf
};

struct TimestepEmbeddingArgs {
  std::vector<float> timesteps;  // one per batch row
  Tensor& out;                   // [batch, dim]
  std::int64_t dim;
  bool flip_sin_to_cos;
  float downscale_freq_shift;
  float max_period;
  // half = dim / 2; freq_i = exp(-ln(max_period) * i / (half - shift)); arg = t * freq_i;
  // out = [sin(arg), cos(arg)] (or [cos, sin] when flipped); odd dim pads a zero column.
};

struct AttentionArgs {
  const Tensor& q;  // [batch, sq, heads * d]
  const Tensor& k;  // [batch, sk, heads * d]
  const Tensor& v;  // [batch, sk, heads * dv]
  Tensor& out;      // [batch, sq, heads * dv]
  std::int64_t batch, sq, sk, heads, d, dv;
  float scale;
  bool causal;  // query i sees keys 0..i (CLIP's text encoder)
  Precision precision;
  AttentionConfig config;
  // Scores s = round(scale * q.k) with q.k accumulated per `precision.accumulate`.
  // softmax=f32: scores kept in f32, softmax in f32, probabilities rounded to dtype
  // before P.v (as diffusers' upcast_softmax). softmax=native: scores stored in dtype
  // (Inf possible), exp/sum/division in dtype.
  // bmm and sliced materialise the scores per (batch*head); sliced does slice_size
  // heads at a time and must equal bmm bit for bit. fused keeps a running max, sum
  // and output (in f32, or in dtype when softmax=native) and never stores scores.
};

// LATENT_STEP: the samplers' element arithmetic (kernels/latent.cl, whose
// NS_LATENT_* numbers these are). All tensors f32; offsets in elements.
enum class LatentOp : int {
  scale = 0,       // out = x / c0
  mul = 1,         // out = x * c0
  cfg = 2,         // out = x + c0 * (m - x)
  euler = 3,       // c: sigma, dt, c_out, var
  add_scaled = 4,  // out = x + m * c0
  ddim = 5,        // c: sqrt(a_t), sqrt(1-a_t), dir_coef, sqrt(a_prev), clip range
  dpm_x0 = 6,      // c: alpha_s, sigma_s
  dpm1 = 7,        // c: a, b
  dpm2 = 8,        // c: a, b, c, d1_coef (flag: heun)
  dpm3 = 9,        // c: a, b, c, d, c10, c11, c1, c2
  lincomb = 10,    // out = c0*x + c1*m [+ c2*h1 [+ c3*h2]], flag: the number of terms (2-4)
  x0 = 11,         // out = the data prediction of (x, m): c0 sigma, c2 c_out, c3 var (as euler)
  deriv = 12,      // out = (x - m) / c0
};
struct LatentStepArgs {
  LatentOp op;
  std::int64_t n;   // elements
  const Tensor& x;  // read at x_offset
  std::int64_t x_offset = 0;
  const Tensor* m = nullptr;  // model output / cond / noise / newest data prediction, at m_offset
  std::int64_t m_offset = 0;
  const Tensor* h1 = nullptr;  // older data predictions (dpm2, dpm3), offset 0
  const Tensor* h2 = nullptr;
  Tensor& out;  // written at out_offset; may be x itself
  std::int64_t out_offset = 0;
  Tensor* x0 = nullptr;  // receives the data prediction (euler, ddim), offset 0
  std::array<float, 8> c{};
  int prediction = 0;  // 0 epsilon, 1 v, 2 sample
  int flag = 0;        // ddim: clip_sample; dpm2: heun; lincomb: terms
};
// Throws OpError when a tensor is not f32, too small, or an input the op needs is missing.
void check_latent_step(const LatentStepArgs& a);

}  // namespace nanscope
