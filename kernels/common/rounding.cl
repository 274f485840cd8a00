// ---------------------------------------------------------------------------
// Rounding an f32 value to the nearest storage value (returned as f32).
// Written for scalars and vectors at once: F is the float type, U the uint type
// of the same width. select() picks its second argument where the condition's
// top bit is set (vectors) or where it is non-zero (scalars), so comparisons of
// either kind work as conditions.

// f16: round-to-nearest-even at 11 significant bits; values at or past 65520
// become +-Inf; below 2^-14 the grid is 2^-24 (subnormals); NaN stays NaN.
#define NS_DEFINE_ROUND_F16(NAME, F, U, AS_F, AS_U)                            \
  static inline F NAME(F x) {                                                  \
    const U u = AS_U(x);                                                       \
    const U a = u & (U)(0x7fffffffu);                                          \
    const U sign = u & (U)(0x80000000u);                                       \
    U r = (a + (U)(0xfffu) + ((a >> 13) & (U)(1u))) & (U)(0xffffe000u);        \
    r = select(r, (U)(0x7f800000u), r >= (U)(0x47800000u));                    \
    const F sub = rint(AS_F(a) * (F)(0x1p24f)) * (F)(0x1p-24f);                \
    r = select(r, AS_U(sub), a < (U)(0x38800000u));                            \
    r = select(r, a | (U)(0x00400000u), a > (U)(0x7f800000u));                 \
    return AS_F(r | sign);                                                     \
  }

// bf16: round-to-nearest-even at 8 significant bits; NaN stays (quiet) NaN.
#define NS_DEFINE_ROUND_BF16(NAME, F, U, AS_F, AS_U)                           \
  static inline F NAME(F x) {                                                  \
    const U u = AS_U(x);                                                       \
    U r = (u + (U)(0x7fffu) + ((u >> 16) & (U)(1u))) & (U)(0xffff0000u);       \
    r = select(r, u | (U)(0x00400000u), (u & (U)(0x7fffffffu)) > (U)(0x7f800000u)); \
    return AS_F(r);                                                            \
  }

NS_DEFINE_ROUND_F16(ns_round_f16, float, uint, as_float, as_uint)
NS_DEFINE_ROUND_F16(ns_round_f16_4, float4, uint4, as_float4, as_uint4)
NS_DEFINE_ROUND_F16(ns_round_f16_8, float8, uint8, as_float8, as_uint8)
NS_DEFINE_ROUND_F16(ns_round_f16_16, float16, uint16, as_float16, as_uint16)
NS_DEFINE_ROUND_BF16(ns_round_bf16, float, uint, as_float, as_uint)
NS_DEFINE_ROUND_BF16(ns_round_bf16_4, float4, uint4, as_float4, as_uint4)
NS_DEFINE_ROUND_BF16(ns_round_bf16_8, float8, uint8, as_float8, as_uint8)
NS_DEFINE_ROUND_BF16(ns_round_bf16_16, float16, uint16, as_float16, as_uint16)

// f16, 16 values: rounded by the device's conversion instruction (vstore_half16_rte: round to nearest even,
// subnormals and Inf as above) and widened back (vload_half16, exact). On CPUs these are one instruction each
// way, against about a dozen integer operations for ns_round_f16_16. The same values; a NaN keeps only the 10
// payload bits an f16 word can hold (ns_round_f16_16 keeps the f32 ones), which every f16 store drops anyway.
// ns_f16_wordsN: the f16 words themselves (N = 4, 8, 16), which st4 / st8 / st16 store through
// ns_ushortN_a2, a vector type aligned like its elements: one vector move at any f16 element offset, where
// PoCL's vstore_halfN_rte into global memory may come out as aligned moves (vmovaps faulted at a 2-byte
// aligned offset) and vstoreN of ushortN as N word stores.
#if defined(STORE_F16)
static inline float16 ns_round_f16_16_cvt(float16 x) {
  ushort h[16] __attribute__((aligned(32)));
  vstore_half16_rte(x, 0, (__private half*)h);
  return vload_half16(0, (__private const half*)h);
}
#define NS_DEFINE_F16_WORDS(N)                          \
  static inline ushort##N ns_f16_words##N(float##N x) { \
    ushort h[N] __attribute__((aligned(2 * N)));        \
    vstore_half##N##_rte(x, 0, (__private half*)h);     \
    return vload##N(0, h);                              \
  }
NS_DEFINE_F16_WORDS(16)  // also the streamed stores' words (st16_stream)
#if !defined(F16_CVT)    // CPU style; GPU style stores with vstore_halfN_rte
NS_DEFINE_F16_WORDS(4)
NS_DEFINE_F16_WORDS(8)
typedef ushort4 ns_ushort4_a2 __attribute__((aligned(2)));
typedef ushort8 ns_ushort8_a2 __attribute__((aligned(2)));
typedef ushort16 ns_ushort16_a2 __attribute__((aligned(2)));
#endif
#endif

// round_store*: to the storage dtype (identity for f32).
#if defined(STORE_F16)
#define round_store(x) ns_round_f16(x)
#define round_store4(x) ns_round_f16_4(x)
#define round_store8(x) ns_round_f16_8(x)
#define round_store16(x) ns_round_f16_16_cvt(x)
#elif defined(STORE_BF16)
#define round_store(x) ns_round_bf16(x)
#define round_store4(x) ns_round_bf16_4(x)
#define round_store8(x) ns_round_bf16_8(x)
#define round_store16(x) ns_round_bf16_16(x)
#else
#define round_store(x) (x)
#define round_store4(x) (x)
#define round_store8(x) (x)
#define round_store16(x) (x)
#endif

// ---------------------------------------------------------------------------
// Exactly rounded sums for native accumulation: round_dtype(s + e) where s is
// an f32 value and e a small remainder (|e| <= half an f32 ulp of s), i.e. the
// pair (s, e) holds a value more precisely than f32 can. Rounding s alone is
// right except when s lies exactly halfway between two storage values and
// e != 0: then the exact value is on e's side of the tie, so s is first
// nudged one f32 ulp towards it. (A nudge of one f32 ulp never crosses another
// storage-grid midpoint: those are f32 values themselves.)
//
// tie: s is a midpoint of the storage grid; toward: e points towards zero.
#define NS_DEFINE_ROUND_EXACT(NAME, ROUND, F, U, AS_F, AS_U, TIE)              \
  static inline F NAME(F s, F e) {                                             \
    const U u = AS_U(s);                                                       \
    const U a = u & (U)(0x7fffffffu);                                          \
    const U tie = TIE;                                                         \
    const U nz = AS_U((AS_U(e) & (U)(0x7fffffffu)) != (U)(0u));                \
    const U toward = (AS_U(e) ^ u) & (U)(0x80000000u);                         \
    const U fix = select((U)(1u), (U)(0xffffffffu), toward);                   \
    const U apply = tie & nz & AS_U(a < (U)(0x7f800000u));                     \
    return ROUND(AS_F(u + select((U)(0u), fix, apply)));                       \
  }

// f16 ties: normal range (|s| >= 2^-14), the 13 dropped bits are exactly 0x1000;
// subnormal range, s * 2^24 has fraction one half. (Conditions are 0 / non-zero.)
#define NS_TIE_F16(F, U, AS_U)                                                 \
  select(AS_U((a & (U)(0x1fffu)) == (U)(0x1000u)),                             \
         AS_U(fabs(s) * (F)(0x1p24f) - floor(fabs(s) * (F)(0x1p24f)) == (F)(0.5f)), \
         AS_U(a < (U)(0x38800000u)))
#define NS_TIE_BF16(F, U, AS_U) AS_U((a & (U)(0xffffu)) == (U)(0x8000u))

NS_DEFINE_ROUND_EXACT(ns_round_exact_f16, ns_round_f16, float, uint, as_float, as_uint,
                      NS_TIE_F16(float, uint, as_uint))
NS_DEFINE_ROUND_EXACT(ns_round_exact_f16_16, ns_round_f16_16, float16, uint16, as_float16, as_uint16,
                      NS_TIE_F16(float16, uint16, as_uint16))
NS_DEFINE_ROUND_EXACT(ns_round_exact_f16_4, ns_round_f16_4, float4, uint4, as_float4, as_uint4,
                      NS_TIE_F16(float4, uint4, as_uint4))
NS_DEFINE_ROUND_EXACT(ns_round_exact_f16_8, ns_round_f16_8, float8, uint8, as_float8, as_uint8,
                      NS_TIE_F16(float8, uint8, as_uint8))
NS_DEFINE_ROUND_EXACT(ns_round_exact_bf16, ns_round_bf16, float, uint, as_float, as_uint,
                      NS_TIE_BF16(float, uint, as_uint))
NS_DEFINE_ROUND_EXACT(ns_round_exact_bf16_4, ns_round_bf16_4, float4, uint4, as_float4, as_uint4,
                      NS_TIE_BF16(float4, uint4, as_uint4))
NS_DEFINE_ROUND_EXACT(ns_round_exact_bf16_8, ns_round_bf16_8, float8, uint8, as_float8, as_uint8,
                      NS_TIE_BF16(float8, uint8, as_uint8))
NS_DEFINE_ROUND_EXACT(ns_round_exact_bf16_16, ns_round_bf16_16, float16, uint16, as_float16, as_uint16,
                      NS_TIE_BF16(float16, uint16, as_uint16))

#if defined(STORE_F16)
#define round_exact(s, e) ns_round_exact_f16(s, e)
#define round_exact4(s, e) ns_round_exact_f16_4(s, e)
#define round_exact8(s, e) ns_round_exact_f16_8(s, e)
#define round_exact16(s, e) ns_round_exact_f16_16(s, e)
#elif defined(STORE_BF16)
#define round_exact(s, e) ns_round_exact_bf16(s, e)
#define round_exact4(s, e) ns_round_exact_bf16_4(s, e)
#define round_exact8(s, e) ns_round_exact_bf16_8(s, e)
#define round_exact16(s, e) ns_round_exact_bf16_16(s, e)
#else
#define round_exact(s, e) (s)
#define round_exact4(s, e) (s)
#define round_exact8(s, e) (s)
#define round_exact16(s, e) (s)
#endif

// round_dtype(a + b) of the exact sum (two-sum gives the remainder). A
// non-finite sum needs no remainder: round_exact ignores e there.
static inline float round_sum(float a, float b) {
  const float s = a + b;
  const float bb = s - a;
  const float e = (a - (s - bb)) + (b - bb);
  return round_exact(s, e);
}
#define NS_DEFINE_ROUND_SUM(NAME, F, EXACT)        \
  static inline F NAME(F a, F b) {                  \
    const F s = a + b;                              \
    const F bb = s - a;                             \
    const F e = (a - (s - bb)) + (b - bb);          \
    return EXACT(s, e);                             \
  }
NS_DEFINE_ROUND_SUM(round_sum4, float4, round_exact4)
NS_DEFINE_ROUND_SUM(round_sum8, float8, round_exact8)
NS_DEFINE_ROUND_SUM(round_sum16, float16, round_exact16)

// round_dtype(alpha * acc + bias) with one rounding: alpha * acc is split
// exactly into p + ep with fma, the sum with bias into s + es; the remainder
// (ep + es) is renormalised against s so that round_exact can break ties.
static inline float round_affine(float alpha, float acc, float bias) {
  const float p = alpha * acc;
  const float ep = fma(alpha, acc, -p);
  const float s = p + bias;
  const float bb = s - p;
  const float es = (p - (s - bb)) + (bias - bb);
  const float e = ep + es;
  const float s2 = s + e;
  const float e2 = e - (s2 - s);
  return isfinite(s2) ? round_exact(s2, e2) : round_store(s);
}

static inline float16 round_affine16(float16 alpha, float16 acc, float16 bias) {
  const float16 p = alpha * acc;
  const float16 ep = fma(alpha, acc, -p);
  const float16 s = p + bias;
  const float16 bb = s - p;
  const float16 es = (p - (s - bb)) + (bias - bb);
  const float16 e = ep + es;
  const float16 s2 = s + e;
  const float16 e2 = e - (s2 - s);
  return select(round_store16(s), round_exact16(s2, e2), isfinite(s2));
}

// round_acc: after every partial sum in native mode; identity otherwise.
#ifdef ACC_NATIVE
#define round_acc(x) round_store(x)
#define round_acc16(x) round_store16(x)
#else
#define round_acc(x) (x)
#define round_acc16(x) (x)
#endif

// round_sm: values of the softmax / attention-probability path in
// SOFTMAX_NATIVE mode (kept in the storage dtype); identity otherwise.
#ifdef SOFTMAX_NATIVE
#define round_sm(x) round_store(x)
#else
#define round_sm(x) (x)
#endif

