// ---------------------------------------------------------------------------
// Softmax helpers.

// NaN-propagating maximum (fmax would drop a NaN), as the reference's nan_max.
static inline float nan_max(float a, float b) { return isnan(a) ? a : ((isnan(b) || b > a) ? b : a); }

// round_dtype(exp(x)) for native softmax. With doubles (-DHAS_FP64), exp is
// taken in double and rounded once through round_exact, so the result matches
// the reference's correctly rounded value; otherwise the device's f32 exp
// (a few ulp) is rounded, which can differ from it by one unit near ties.
static inline float exp_round(float x) {
#ifdef HAS_FP64
  const double e = exp((double)x);
  const float hi = (float)e;
  return isfinite(hi) ? round_exact(hi, (float)(e - (double)hi)) : round_store(hi);
#else
  return round_store(exp(x));
#endif
}

// SILU: x * sigmoid(x). SILU and GROUP_NORM's fused SILU (both programs built
// with exact_math_options, so the quotient is the same in both). One element
// goes through the vector form too: a driver's vector and scalar exp may
// differ in the last bit (PoCL's do), and which elements fall in a tail
// differs between the two kernels.
static inline float16 silu16(float16 x) { return x / (1.0f + exp(-x)); }
static inline float silu1(float x) { return silu16((float16)(x)).s0; }

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

// Work-group reductions through a __local scratch of get_local_size(0) floats.
// Every work-item of the group must call them.
static inline __attribute__((always_inline)) float wg_sum(float v, __local float* scratch) {
  const uint lid = (uint)get_local_id(0), n = (uint)get_local_size(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    float s = 0.0f;
    for (uint i = 0; i < n; ++i) s += scratch[i];
    scratch[0] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
static inline __attribute__((always_inline)) float wg_max(float v, __local float* scratch) {
  const uint lid = (uint)get_local_id(0), n = (uint)get_local_size(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    float m = -INFINITY;
    for (uint i = 0; i < n; ++i) m = nan_max(m, scratch[i]);
    scratch[0] = m;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float r = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// The sum of the 16 lanes of v, pairwise: the f32 reductions' last step (softmax, fused attention, norms).
static inline float lane_sum16(float16 v) {
  const float8 a8 = v.lo + v.hi;
  const float4 a4 = a8.lo + a8.hi;
  return (a4.x + a4.y) + (a4.z + a4.w);
}

#ifndef ACC_NATIVE
// (mean, rstd) of x[base, base + count) by one work-item (the CPU kernel style: a work-group of one) with x
// read once from memory: per chunk of NORM_CHUNK values (16 KB, which stays in L1), its mean and its centred
// squares in two passes, merged into the running statistics by Chan et al.'s pairwise update
// (n = na + nb; mean += d * nb / n; m2 += m2b + d^2 * na * nb / n, d = mean_b - mean). The two-pass form over
// the whole group read it twice (a VAE group at 512x512 is 4 MB, more than a core's L2), three reads with the
// normalisation. Everything is summed about a shift, the first chunk's mean: x - shift is exact where x is
// within a factor 2 of it, and the running mean then carries rounding errors of the spread's size, not of the
// mean's (an f32 mean of 300 rounded at each merge drifted by ulps of 300; test_norm NormStatistics). The
// second pass also sums the deviations it squares (the corrected two-pass form): what a chunk's mean lost to
// rounding, the shift's own error included, is put back.
#define NORM_CHUNK 4096u
static inline float2 norm_stats_chunked(__global const store_t* x, ulong base, ulong count, float eps) {
  float shift = 0.0f;
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;  // of x - shift
  for (ulong c0 = 0; c0 < count; c0 += NORM_CHUNK) {
    const uint len = (uint)min((ulong)NORM_CHUNK, count - c0);
    const ulong at = base + c0;
    const uint whole = len & ~15u;
    const float nb = (float)len;
    float16 acc = 0.0f;
    float tail = 0.0f;
    for (uint i = 0; i < whole; i += 16u) acc += ld16(x, at + i) - shift;
    for (uint i = whole; i < len; ++i) tail += ld(x, at + i) - shift;
    float mb = (lane_sum16(acc) + tail) / nb;
    if (c0 == 0) shift = mb, mb = 0.0f;
    float16 acc1 = 0.0f, acc2 = 0.0f;
    float tail1 = 0.0f, tail2 = 0.0f;
    for (uint i = 0; i < whole; i += 16u) {
      const float16 d = (ld16(x, at + i) - shift) - mb;
      acc1 += d;
      acc2 = fma(d, d, acc2);
    }
    for (uint i = whole; i < len; ++i) {
      const float d = (ld(x, at + i) - shift) - mb;
      tail1 += d;
      tail2 = fma(d, d, tail2);
    }
    const float s1 = lane_sum16(acc1) + tail1;
    const float m2b = (lane_sum16(acc2) + tail2) - s1 * (s1 / nb);
    mb += s1 / nb;
    const float total = n + nb;
    const float d = mb - mean;
    mean += d * (nb / total);
    m2 += m2b + d * d * (n * nb / total);
    n = total;
  }
  if (m2 < 0.0f) m2 = 0.0f;  // rounding, for a constant group; a NaN stays NaN
  return (float2)(shift + mean, 1.0f / sqrt(m2 / n + eps));
}
#endif

