// activation.cl: unary activations and GEGLU. Computed in f32 from the stored
// input and rounded once at the store (the reference computes in double; the
// difference is the f32 library functions' few-ulp error).
//
// Each work-item handles 16 consecutive elements (vector math), the tail one by one.

// silu16 / silu1 and erf16 / erf1, gelu_erf16 / gelu_erf1: common.cl (GROUP_NORM's fused SILU and the CPU
// GEMM's fused GEGLU use them too).

// torch's approximate='tanh': 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#define NS_GELU_K 0.7978845608028654f
static inline float16 gelu_tanh16(float16 x) {
  return 0.5f * x * (1.0f + tanh(NS_GELU_K * (x + 0.044715f * x * x * x)));
}
static inline float gelu_tanh1(float x) { return 0.5f * x * (1.0f + tanh(NS_GELU_K * (x + 0.044715f * x * x * x))); }
// CLIP's quick_gelu: x * sigmoid(1.702 x).
static inline float16 quick_gelu16(float16 x) { return x / (1.0f + exp(-1.702f * x)); }
static inline float quick_gelu1(float x) { return x / (1.0f + exp(-1.702f * x)); }

#define NS_UNARY_KERNEL(NAME, F16, F1)                                                        \
  __kernel void NAME(__global const store_t* x, __global store_t* out, ulong n, float param) { \
    const ulong i0 = (ulong)get_global_id(0) * 16u;                                           \
    if (i0 + 16u <= n) {                                                                      \
      const float16 v = ld16(x, i0);                                                          \
      st16(out, i0, F16);                                                                     \
    } else {                                                                                  \
      for (ulong i = i0; i < n; ++i) {                                                        \
        const float v = ld(x, i);                                                             \
        st(out, i, F1);                                                                       \
      }                                                                                       \
    }                                                                                         \
  }

NS_UNARY_KERNEL(unary_silu, silu16(v), silu1(v))
NS_UNARY_KERNEL(unary_gelu_erf, gelu_erf16(v), gelu_erf1(v))
NS_UNARY_KERNEL(unary_gelu_tanh, gelu_tanh16(v), gelu_tanh1(v))
NS_UNARY_KERNEL(unary_quick_gelu, quick_gelu16(v), quick_gelu1(v))
// x * param rounded once from the exact product (f32 x f16 needs up to 35 bits).
NS_UNARY_KERNEL(unary_scale, round_affine16((float16)(param), v, (float16)(-0.0f)), round_affine(param, v, -0.0f))

// out[r, j] = x[r, j] * gelu_erf(x[r, d + j]). Grid: (groups of `per_item` chunks of 16 along d, rows):
// the GPU family takes one chunk per work-item; the CPU family a whole row (`per_item` = all its
// chunks), two sequential input streams per work-item, each read ahead (ns_prefetch) while erf's
// polynomials run: 2 x 4096 x 2560 in f32 5.4-5.9 against 6.5-6.7 ms with a chunk per work-item and no
// prefetching (2-core Zen 4, alternating runs), of which erf alone costs about 2.9 ms (measured in the
// cache). Non-temporal stores of the output (as upsample_nearest2x's) made no difference here.
__kernel void geglu(__global const store_t* x, __global store_t* out, uint d, uint per_item) {
  const uint chunks = (d + 15u) / 16u;
  const uint c0 = (uint)get_global_id(0) * per_item;
  const uint c1 = min(chunks, c0 + per_item);
  const ulong r = get_global_id(1);
  const ulong in = r * 2u * d, o = r * d;
  for (uint c = c0; c < c1; ++c) {
    const uint j0 = c * 16u;
    if (j0 + 16u <= d) {
      ns_prefetch(x + in + j0);
      ns_prefetch(x + in + d + j0);
      st16(out, o + j0, ld16(x, in + j0) * gelu_erf16(ld16(x, in + d + j0)));
    } else {
      for (uint j = j0; j < d; ++j) st(out, o + j, ld(x, in + j) * gelu_erf1(ld(x, in + d + j)));
    }
  }
}
