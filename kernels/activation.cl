// activation.cl: unary activations and GEGLU. Computed in f32 from the stored
// input and rounded once at the store (the reference computes in double; the
// difference is the f32 library functions' few-ulp error).
//
// Each work-item handles 16 consecutive elements (vector math), the tail one by one.

// silu16 / silu1: common.cl (GROUP_NORM's fused SILU uses them too).

// E = e^X for X <= 0 as vector operations (PoCL's exp() is a scalar library
// routine per lane), as statements (declares E; statement expressions are a
// GNU extension not every OpenCL compiler takes): Cody-Waite reduction
// X = k ln 2 + f, |f| <= ln 2 / 2, with k rounded by adding 1.5 * 2^23 + 127
// (the sum's low bits are k + 127, the exponent field once shifted), and
// Cephes' expf polynomial for e^f (about 1 ulp). X below -87 is taken as -87
// (e^-87 = 1.6e-38: erf's 1 - e^X is then 1, as with e^X = 0); NaN stays NaN.
#define NS_EXP_NONPOS(T, ITYPE, AS_U, AS_F, X, E)                            \
  const T E##_x = select((X), (T)(-87.0f), (ITYPE)((X) < (T)(-87.0f)));      \
  const T E##_t = fma(E##_x, (T)(1.44269504088896341f), (T)(12583039.0f));   \
  const T E##_k = E##_t - (T)(12583039.0f);                                  \
  T E##_f = fma(E##_k, (T)(-0.693359375f), E##_x);                           \
  E##_f = fma(E##_k, (T)(2.12194440e-4f), E##_f);                            \
  T E##_p = fma(E##_f, (T)(1.9875691500e-4f), (T)(1.3981999507e-3f));        \
  E##_p = fma(E##_p, E##_f, (T)(8.3334519073e-3f));                          \
  E##_p = fma(E##_p, E##_f, (T)(4.1665795894e-2f));                          \
  E##_p = fma(E##_p, E##_f, (T)(1.6666665459e-1f));                          \
  E##_p = fma(E##_p, E##_f, (T)(5.0000001201e-1f));                          \
  E##_p = fma(E##_p, E##_f * E##_f, E##_f + (T)(1.0f));                      \
  const T E = E##_p * AS_F(AS_U(E##_t) << 23);

// erf within about 1 ulp over all floats: N. Juffa's faithfully rounded erff
// (published on Stack Overflow, question 35148198; also MLX's and ncnn's),
// both of its polynomial branches evaluated and one selected per lane so 16
// lanes run as vectors. Written out because PoCL's erf() is a scalar library
// routine per lane: the 4096-token GEGLU took 14.7 ms with it, 5.6 ms without
// any erf, on a 2-core Zen 4; with its exp() as NS_EXP_NONPOS instead of
// PoCL's, 7.3 against 8.1 ms (5 runs each, alternating). float16 / float
// versions, the same operations in the same order: a lane and a tail element
// agree.
#define NS_ERF(T, ITYPE, AS_U, AS_F)                                          \
  const T t = fabs(a), s = a * a;                                             \
  /* |a| > 0.927734375: 1 - exp(p(|a|)), max error 0.99527 ulp */             \
  T r = fma((T)(-1.72853470e-5f), t, (T)(3.83197126e-4f));                    \
  const T u = fma((T)(-3.88396438e-3f), t, (T)(2.42546219e-2f));              \
  r = fma(r, s, u);                                                           \
  r = fma(r, t, (T)(-1.06777877e-1f));                                        \
  r = fma(r, t, (T)(-6.34846687e-1f));                                        \
  r = fma(r, t, (T)(-1.28717512e-1f));                                        \
  r = fma(r, t, -t);                                                          \
  NS_EXP_NONPOS(T, ITYPE, AS_U, AS_F, r, e)                                   \
  const T outer = copysign((T)(1.0f) - e, a);                                 \
  /* below: a + a p(a^2), max error 0.98929 ulp */                            \
  T q = (T)(-5.96761703e-4f);                                                 \
  q = fma(q, s, (T)(4.99119423e-3f));                                         \
  q = fma(q, s, (T)(-2.67681349e-2f));                                        \
  q = fma(q, s, (T)(1.12819925e-1f));                                         \
  q = fma(q, s, (T)(-3.76125336e-1f));                                        \
  q = fma(q, s, (T)(1.28379166e-1f));                                         \
  q = fma(q, a, a);                                                           \
  return select(q, outer, (ITYPE)(t > (T)(0.927734375f)));
static inline float16 erf16(float16 a) { NS_ERF(float16, int16, as_uint16, as_float16) }
static inline float erf1(float a) { NS_ERF(float, int, as_uint, as_float) }
#undef NS_ERF
#undef NS_EXP_NONPOS

static inline float16 gelu_erf16(float16 x) { return 0.5f * x * (1.0f + erf16(x * M_SQRT1_2_F)); }
static inline float gelu_erf1(float x) { return 0.5f * x * (1.0f + erf1(x * M_SQRT1_2_F)); }
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
