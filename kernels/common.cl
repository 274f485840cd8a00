// common.cl: prepended to every program. Storage access and rounding for the
// three storage dtypes, selected by one of -DSTORE_F32 / -DSTORE_F16 /
// -DSTORE_BF16, plus -DACC_NATIVE, -DSOFTMAX_NATIVE and -DHAS_FP16.
//
// Values are always computed in f32 registers. Storage:
//   f32  float
//   f16  half, converted by vload_half*/vstore_half*_rte (core OpenCL: works
//        without cl_khr_fp16) or the exact integer emulation below
//   bf16 ushort words: the upper half of an f32, rounded to nearest even.
//
// Native accumulation (op_args.hpp) rounds every partial sum to the storage
// dtype. Its arithmetic is emulated here in f32 with exact rounding (integer
// bit operations, or the core conversions vstore_half*_rte, which round to
// nearest even and keep subnormals in OpenCL's full profile) even when the
// device has cl_khr_fp16: a device's half adder may flush subnormals or differ
// in other details, and the point of native mode is a result that is the same
// on every device (and bit-equal to the reference backend).
//
// Helpers in every .cl file are `static inline`: PoCL compiles programs with
// -Dinline=, so a plain `inline` helper is an external function that its
// front end emits and optimises in every program, used or not (about 0.2 s
// of each program's build on a 2-core host; bench/README.md, cold start).
// Helpers that reach a barrier are also always_inline: PoCL needs every
// barrier in the kernel's own body, and a static helper it left uninlined
// broke the emulated tensor-core attention.

#ifdef HAS_FP16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif
#ifdef HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

// clang (PoCL and others) warns at every float16 helper that passing 512-bit
// vectors without AVX-512 changes the ABI: irrelevant for inlined helpers.
#ifdef __clang__
#pragma clang diagnostic ignored "-Wpsabi"
#endif

// Inline PTX (NVIDIA only: the half units, the tensor cores): NVIDIA's OpenCL
// compiler takes `asm` (checked on an H200), which the backend passes as
// -DNS_ASM=asm; clang, which checks these kernels for the NVIDIA target
// offline (tools/gpu/check_mma_ptx.sh), spells it __asm__.
#ifndef NS_ASM
#define NS_ASM __asm__
#endif

// The CPU family's kernels that run one work-item per group (launch_util.cpp
// runs_whole_blocks, and the attention kernels launched with groups of 1)
// declare it: their work-group function is then built for that size once. The
// backend turns PoCL's per-launch specialization off (device.cpp,
// pocl_environment), so the version in the program binary is the one every
// launch runs, with no compile at a first launch.
#if defined(CPU_KERNELS)
#define CPU_ONE_ITEM __attribute__((reqd_work_group_size(1, 1, 1)))
#else
#define CPU_ONE_ITEM
#endif

// The emulation below relies on every f32 operation being rounded on its own.
#pragma OPENCL FP_CONTRACT OFF

#if defined(STORE_F16)
typedef half store_t;
#elif defined(STORE_BF16)
typedef ushort store_t;
#else
#ifndef STORE_F32
#define STORE_F32
#endif
typedef float store_t;
#endif

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

// ---------------------------------------------------------------------------
// The native-mode primitives: nat_add(a, b) = round_dtype(a + b), nat_fma(a, b,
// c) = round_dtype(a * b + c) with one rounding (a, b, c stored values, so a * b
// is exact in f32), nat_exp(x) = the dtype's exp. Exact emulation by default.
//
// -DHW_HALF_PTX (f16 storage on NVIDIA devices of compute capability 5.3+, after
// the backend's known-answer probe, kernels/half_probe.cl): the device's own
// half units through inline PTX, which NVIDIA's OpenCL compiler accepts:
// add.rn.f16 and fma.rn.f16 (IEEE, subnormals kept: the same bits as the
// emulation, which the probe checks), and exp as CUDA's hexp computes it (x *
// log2 e and ex2.approx in f32, rounded to half, four inputs corrected):
// within one half ulp of the emulation, not always equal. NS_ASM is `asm` for
// NVIDIA's compiler (the backend passes it); clang spells it __asm__.
// -DHW_HALF_CL: the same through OpenCL C's half type where the device has
// cl_khr_fp16 (below).
#if defined(STORE_F16) && defined(HW_HALF_PTX)
// One half-unit operation on two operands: OP is the PTX instruction.
#define NS_HW_BINARY(NAME, OP)                                  \
  static inline float NAME(float a, float b) {                  \
    float r;                                                    \
    NS_ASM("{ .reg .b16 ha, hb, hd;\n\t"                         \
           "cvt.rn.f16.f32 ha, %1;\n\tcvt.rn.f16.f32 hb, %2;\n\t" \
           OP " hd, ha, hb;\n\tcvt.f32.f16 %0, hd; }"           \
           : "=f"(r)                                            \
           : "f"(a), "f"(b));                                   \
    return r;                                                   \
  }
NS_HW_BINARY(hw_add, "add.rn.f16")
NS_HW_BINARY(hw_mul, "mul.rn.f16")
static inline float hw_fma(float a, float b, float c) {
  float r;
  NS_ASM("{ .reg .b16 ha, hb, hc, hd;\n\t"
         "cvt.rn.f16.f32 ha, %1;\n\tcvt.rn.f16.f32 hb, %2;\n\tcvt.rn.f16.f32 hc, %3;\n\t"
         "fma.rn.f16 hd, ha, hb, hc;\n\tcvt.f32.f16 %0, hd; }"
         : "=f"(r)
         : "f"(a), "f"(b), "f"(c));
  return r;
}
// One correction of the hexp sequence: where the input's bits equal SPC, add ULP (a half).
#define NS_HEXP_FIX(SPC, ULP) \
  "{ .reg .b16 spc, ulp, p;\n\tmov.b16 spc, " SPC ";\n\tmov.b16 ulp, " ULP ";\n\t" \
  "set.eq.f16.f16 p, h, spc;\n\tfma.rn.f16 r, p, ulp, r; }\n\t"
static inline float hw_exp(float x) {
  float y;
  NS_ASM("{ .reg .f32 f;\n\t.reg .b16 h, r;\n\t"
         "cvt.rn.f16.f32 h, %1;\n\tcvt.f32.f16 f, h;\n\t"
         "mul.f32 f, f, 0f3FB8AA3B;\n\tex2.approx.f32 f, f;\n\tcvt.rn.f16.f32 r, f;\n\t"
         NS_HEXP_FIX("0x1F79", "0x9400") NS_HEXP_FIX("0x25CF", "0x9400")
         NS_HEXP_FIX("0xC13B", "0x0400") NS_HEXP_FIX("0xC1EF", "0x0200")
         "cvt.f32.f16 %0, r; }"
         : "=f"(y)
         : "f"(x));
  return y;
}
#elif defined(STORE_F16) && defined(HW_HALF_CL) && defined(HAS_FP16)
// -DHW_HALF_CL: devices with cl_khr_fp16 (after the same probe): OpenCL C half
// arithmetic. Conversions to half round to nearest even, fma is correctly
// rounded, FP_CONTRACT is off (above); exp is the driver's half exp.
static inline float hw_add(float a, float b) { return (float)((half)a + (half)b); }
static inline float hw_fma(float a, float b, float c) { return (float)fma((half)a, (half)b, (half)c); }
static inline float hw_mul(float a, float b) { return (float)((half)a * (half)b); }
static inline float hw_exp(float x) { return (float)exp((half)x); }
#endif
#if defined(STORE_F16) && (defined(HW_HALF_PTX) || (defined(HW_HALF_CL) && defined(HAS_FP16)))
#define NS_HW4(F, a, b, c) (float4)(F((a).s0, (b).s0, (c).s0), F((a).s1, (b).s1, (c).s1), \
                                    F((a).s2, (b).s2, (c).s2), F((a).s3, (b).s3, (c).s3))
#define NS_HW8(F, a, b, c) (float8)(NS_HW4(F, (a).lo, (b).lo, (c).lo), NS_HW4(F, (a).hi, (b).hi, (c).hi))
#define NS_HW16(F, a, b, c) (float16)(NS_HW8(F, (a).lo, (b).lo, (c).lo), NS_HW8(F, (a).hi, (b).hi, (c).hi))
static inline float4 hw_fma4(float4 a, float4 b, float4 c) { return NS_HW4(hw_fma, a, b, c); }
static inline float8 hw_fma8(float8 a, float8 b, float8 c) { return NS_HW8(hw_fma, a, b, c); }
static inline float16 hw_fma16(float16 a, float16 b, float16 c) { return NS_HW16(hw_fma, a, b, c); }
#define nat_add(a, b) hw_add((a), (b))
#define nat_fma(a, b, c) hw_fma((a), (b), (c))
#define nat_fma4(a, b, c) hw_fma4((a), (b), (c))
#define nat_fma16(a, b, c) hw_fma16((a), (b), (c))
#define nat_exp(x) hw_exp(x)
#define NAT_HW 1
#else
#define nat_add(a, b) round_sum((a), (b))
#define nat_fma(a, b, c) round_sum((c), (a) * (b))
#define nat_fma4(a, b, c) round_sum4((c), (a) * (b))
#define nat_fma16(a, b, c) round_sum16((c), (a) * (b))
#define nat_exp(x) exp_round(x)
#define NAT_HW 0
#endif

// ---------------------------------------------------------------------------
// Loads and stores. Offsets are in elements. Vector forms read/write n
// consecutive elements starting at element i (no alignment beyond the
// element's own is required).

static inline float bf16_to_f32(ushort b) { return as_float((uint)b << 16); }
static inline ushort f32_to_bf16(float f) { return (ushort)(as_uint(ns_round_bf16(f)) >> 16); }

// Scalar f16 conversions in integer arithmetic: PoCL's scalar vload_half /
// vstore_half are slow library routines, while the vector forms map to the
// CPU's conversion instructions. Both are exact (RNE, Inf, NaN, subnormals).
static inline float f16_to_f32(ushort h) {
  const uint em = (uint)h & 0x7fffu;
  const uint sign = ((uint)h & 0x8000u) << 16;
  uint bits = (em << 13) + 0x38000000u;                              // normal: rebias 15 -> 127
  bits = em >= 0x7c00u ? (em << 13) | 0x7f800000u : bits;             // Inf / NaN
  bits = em < 0x0400u ? as_uint((float)em * 0x1p-24f) : bits;         // zero / subnormal
  return as_float(bits | sign);
}
// f32 -> f16 word, exact (16 lanes: ns_f16_words16).
static inline ushort f32_to_f16(float f) {
  const uint u = as_uint(ns_round_f16(f));  // now exactly representable (or Inf / NaN)
  const uint a = u & 0x7fffffffu;
  const uint sign = (u >> 16) & 0x8000u;
  uint h = (a - 0x38000000u) >> 13;                                  // normal
  h = a >= 0x7f800000u ? 0x7c00u | ((a >> 13) & 0x3ffu) : h;         // Inf / NaN (quiet bit kept)
  h = a < 0x38800000u ? (uint)(as_float(a) * 0x1p24f) : h;            // zero / subnormal (exact)
  return (ushort)(h | sign);
}

#if defined(STORE_F16) && defined(F16_CVT)
// GPU style (-DF16_CVT): scalar vload_half / vstore_half_rte are conversion
// instructions on GPUs (exact: RNE, Inf, NaN, subnormals, as below).
#define ld(p, i) vload_half((i), (p))
#define ld4(p, i) vload_half4(0, (p) + (i))
#define ld8(p, i) vload_half8(0, (p) + (i))
#define ld16(p, i) vload_half16(0, (p) + (i))
#define st(p, i, v) vstore_half_rte((v), (i), (p))
#define st4(p, i, v) vstore_half4_rte((v), 0, (p) + (i))
#define st8(p, i, v) vstore_half8_rte((v), 0, (p) + (i))
#define st16(p, i, v) vstore_half16_rte((v), 0, (p) + (i))
#elif defined(STORE_F16)
// st4 / st8 / st16: the words converted in private memory, stored by one vector move (ns_f16_words16 above).
#define ld(p, i) f16_to_f32(((__global const ushort*)(p))[(i)])
#define ld4(p, i) vload_half4(0, (p) + (i))
#define ld8(p, i) vload_half8(0, (p) + (i))
#define ld16(p, i) vload_half16(0, (p) + (i))
#define st(p, i, v) (((__global ushort*)(p))[(i)] = f32_to_f16(v))
#define ns_st_words(N, p, i, v) (*(__global ns_ushort##N##_a2*)((__global ushort*)(p) + (i)) = ns_f16_words##N(v))
#define st4(p, i, v) ns_st_words(4, p, i, v)
#define st8(p, i, v) ns_st_words(8, p, i, v)
#define st16(p, i, v) ns_st_words(16, p, i, v)
#elif defined(STORE_BF16)
#define ld(p, i) bf16_to_f32((p)[(i)])
#define ld4(p, i) as_float4(convert_uint4(vload4(0, (p) + (i))) << 16)
#define ld8(p, i) as_float8(convert_uint8(vload8(0, (p) + (i))) << 16)
#define ld16(p, i) as_float16(convert_uint16(vload16(0, (p) + (i))) << 16)
#define st(p, i, v) ((p)[(i)] = f32_to_bf16(v))
#define st4(p, i, v) vstore4(convert_ushort4(as_uint4(ns_round_bf16_4(v)) >> 16), 0, (p) + (i))
#define st8(p, i, v) vstore8(convert_ushort8(as_uint8(ns_round_bf16_8(v)) >> 16), 0, (p) + (i))
#define st16(p, i, v) vstore16(convert_ushort16(as_uint16(ns_round_bf16_16(v)) >> 16), 0, (p) + (i))
#else
#define ld(p, i) ((p)[(i)])
#define ld4(p, i) vload4(0, (p) + (i))
#define ld8(p, i) vload8(0, (p) + (i))
#define ld16(p, i) vload16(0, (p) + (i))
#define st(p, i, v) ((p)[(i)] = (v))
#define st4(p, i, v) vstore4((v), 0, (p) + (i))
#define st8(p, i, v) vstore8((v), 0, (p) + (i))
#define st16(p, i, v) vstore16((v), 0, (p) + (i))
#endif

// Gathers (im2col_row16_any, row16_padded): ns_word(p, i) is element i's storage word, NS_ZERO_WORD +0.0's, and
// ns_words16_to_f32(t) widens 16 words in private memory at once, where ld() one at a time would run f16's
// integer conversion per value (the vector conversion is one instruction on CPUs). The same values.
#if defined(STORE_F16) || defined(STORE_BF16)
typedef ushort ns_word_t;
#define ns_word(p, i) (((__global const ushort*)(p))[(i)])
#else
typedef float ns_word_t;
#define ns_word(p, i) ((p)[(i)])
#endif
#define NS_ZERO_WORD ((ns_word_t)0)
#if defined(STORE_F16)
#define ns_words16_to_f32(t) vload_half16(0, (__private const half*)(t))
#elif defined(STORE_BF16)
#define ns_words16_to_f32(t) as_float16(convert_uint16(vload16(0, (t))) << 16)
#else
#define ns_words16_to_f32(t) vload16(0, (t))
#endif

// st16_stream(p, i, v, stream): st16, or, where the host sets `stream` (an
// output past the caches on a CPU device, OpenClBackend::streams_output) and the
// compiler has non-temporal stores for x86-64, a store around the caches when
// the 16 elements are aligned for the vector (a misaligned one faults).
// Ordinary stores first read every output line into the cache (write-allocate):
// three transfers per element instead of two for an op that reads each element
// once and writes it once. The same bits as st16: the storage words are computed first, then
// stored. Streamed stores are weakly ordered: the locked instructions with which
// the driver's worker threads finish a command drain them before the next
// command reads the output (a fence per work-item would cost more than they save).
#if defined(__x86_64__) && defined(__has_builtin)
#if __has_builtin(__builtin_nontemporal_store)
#define NS_NT_STORE 1
#endif
#endif
#if defined(NS_NT_STORE)
#if defined(STORE_F32)
typedef uint16 ns_words16;
#define ns_store_words16(v) as_uint16(v)
#elif defined(STORE_F16)
typedef ushort16 ns_words16;
#define ns_store_words16(v) ns_f16_words16(v)
#else
typedef ushort16 ns_words16;
#define ns_store_words16(v) convert_ushort16(as_uint16(ns_round_bf16_16(v)) >> 16)
#endif
#define st16_stream(p, i, v, stream)                                                 \
  do {                                                                               \
    __global store_t* const ns_q = (p) + (i);                                        \
    if ((stream) && (ulong)ns_q % sizeof(ns_words16) == 0)                           \
      __builtin_nontemporal_store(ns_store_words16(v), (__global ns_words16*)ns_q);  \
    else                                                                             \
      st16(p, i, v);                                                                 \
  } while (0)
#else
#define st16_stream(p, i, v, stream) st16(p, i, v)
#endif

// ns_prefetch_at(p): asks for the cache line at p; ns_prefetch(p): the one 512 bytes past p, for CPU kernels
// that stream through memory while they compute (x86-64 compilers with the builtin; nothing elsewhere). The hardware
// prefetchers follow a stream too, but not across a 4 KB page.
#if defined(__x86_64__) && defined(__has_builtin)
#if __has_builtin(__builtin_prefetch)
#define ns_prefetch_at(p) __builtin_prefetch((const __global char*)(p), 0, 0)
#endif
#endif
#ifndef ns_prefetch_at
#define ns_prefetch_at(p) ((void)0)
#endif
#define ns_prefetch(p) ns_prefetch_at((const __global char*)(p) + 512)

// Bit copies (shape ops): the storage word of one element.
#if defined(STORE_F32)
typedef uint word_t;
#else
typedef ushort word_t;
#endif

// ---------------------------------------------------------------------------
// Warp-level operations of the tensor-core kernels (gemm_mma, conv_implicit_mma,
// attention_flash_mma): 1-D work-groups whose warps are 32 consecutive
// work-items. Halves travel as raw ushort words, pairs of them as uint (lower
// element in the low half-word).
// -DMMA_PTX (NVIDIA, sm_80+): inline PTX.
// -DMMA_EMULATE (test setting NANSCOPE_TENSOR_CORES=emulate, any device): the
// same results through local memory: X, MMA_X_WORDS(threads) uints declared by
// the kernel, holds every work-item's operands between two barriers, so these
// calls must be reached by the whole work-group (they are: uniform control
// flow). The emulated mma adds the 16 exact products of each output in k order
// in f32 (the tensor core's order differs: an f32-rounding-level difference).
// MMA_UNROLL marks the loops around these calls: unrolled on the GPU; one copy
// of the body under the emulation, whose two barriers per call would otherwise
// be replicated into every unrolled copy (PoCL then compiles a program for
// minutes instead of a second).
#if defined(MMA_PTX)
#define MMA_UNROLL _Pragma("unroll")
#define MMA_X_WORDS(threads) 1
// D (4 f32) += A (16x16, 4 pairs) . B (16x8, 2 pairs); fragment layouts (g = lane >> 2, t = lane & 3):
//   a0 = A[g][2t,2t+1]  a1 = A[g+8][2t,2t+1]  a2 = A[g][2t+8,2t+9]  a3 = A[g+8][2t+8,2t+9]
//   b0 = B[2t,2t+1][g]  b1 = B[2t+8,2t+9][g]
//   d0,d1 = D[g][2t,2t+1]  d2,d3 = D[g+8][2t,2t+1]
#define MMA_16816(D, A, B, X)                                                                               \
  NS_ASM volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "        \
                   "{%8,%9}, {%0,%1,%2,%3};"                                                                \
                   : "+f"((D)[0]), "+f"((D)[1]), "+f"((D)[2]), "+f"((D)[3])                                 \
                   : "r"((A)[0]), "r"((A)[1]), "r"((A)[2]), "r"((A)[3]), "r"((B)[0]), "r"((B)[1]))
// The value of the work-item whose lane is this one's xor mask (mask < 32).
static inline __attribute__((always_inline)) float warp_xor(float v, uint mask, __local uint* x) {
  uint r;
  NS_ASM volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(v)), "r"(mask));
  return as_float(r);
}
// Two f32 values rounded to half (nearest even) as one pair.
static inline uint pack_half2(float lo, float hi) {
  uint r;
  NS_ASM("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // %1 goes to the upper half
  return r;
}
// A pair back in f32 (exact): (low, high).
static inline float2 unpack_half2(uint w) {
  float lo, hi;
  NS_ASM("{ .reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h; }"
         : "=f"(lo), "=f"(hi)
         : "r"(w));
  return (float2)(lo, hi);
}
#elif defined(MMA_EMULATE)
#define MMA_UNROLL _Pragma("unroll 1")
#define MMA_X_WORDS(threads) (6 * (threads))
static inline __attribute__((always_inline)) void mma_emulated_16816(float* d, const uint* a, const uint* b,
                                                                     __local uint* x) {
  const uint lid = (uint)get_local_id(0), lane = lid & 31u;
  __local uint* const mine = x + 6u * lid;
  for (uint r = 0; r < 4u; ++r) mine[r] = a[r];
  mine[4] = b[0];
  mine[5] = b[1];
  barrier(CLK_LOCAL_MEM_FENCE);
  __local const uint* const warp = x + 6u * (lid - lane);
  const uint g = lane >> 2, t = lane & 3u;
  for (uint e = 0; e < 4u; ++e) {
    const uint row = g + 8u * (e >> 1), col = 2u * t + (e & 1u);
    float acc = d[e];
    for (uint kp = 0; kp < 8u; ++kp) {  // k = 2 kp, 2 kp + 1: one word of A and one of B
      const uint aw = warp[6u * ((row & 7u) * 4u + (kp & 3u)) + (row >> 3) + 2u * (kp >> 2)];
      const uint bw = warp[6u * (col * 4u + (kp & 3u)) + 4u + (kp >> 2)];
      // The product of two halves is exact in f32.
      acc = fma(f16_to_f32((ushort)(aw & 0xffffu)), f16_to_f32((ushort)(bw & 0xffffu)), acc);
      acc = fma(f16_to_f32((ushort)(aw >> 16)), f16_to_f32((ushort)(bw >> 16)), acc);
    }
    d[e] = acc;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
#define MMA_16816(D, A, B, X) mma_emulated_16816((D), (A), (B), (X))
static inline __attribute__((always_inline)) float warp_xor(float v, uint mask, __local uint* x) {
  const uint lid = (uint)get_local_id(0);
  x[lid] = as_uint(v);
  barrier(CLK_LOCAL_MEM_FENCE);
  const float r = as_float(x[lid ^ mask]);
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
static inline uint pack_half2(float lo, float hi) { return (uint)f32_to_f16(lo) | ((uint)f32_to_f16(hi) << 16); }
static inline float2 unpack_half2(uint w) {
  return (float2)(f16_to_f32((ushort)(w & 0xffffu)), f16_to_f32((ushort)(w >> 16)));
}
#endif

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

// ---------------------------------------------------------------------------
// Norm statistics of x[base, base + count), computed by the whole work-group;
// returns (mean, rstd). f32 accumulation: two passes (mean, then centred
// squares) with f32 partial sums; by a work-group of one (the CPU style) chunk
// by chunk (norm_stats_chunked), x read once. Native: one work-item sums x and x*x in
// memory order, every partial sum rounded to the dtype (op_args.hpp), then
// mean = sum / n, var = max(sumsq / n - mean^2, 0) in f32 as the reference.
// scratch: max(2, local size) floats.
static inline __attribute__((always_inline)) float2 norm_stats(__global const store_t* x, ulong base, ulong count,
                                                               float eps, __local float* scratch) {
  const uint lid = (uint)get_local_id(0), nl = (uint)get_local_size(0);
#ifdef ACC_NATIVE
  if (lid == 0) {
    float sum = 0.0f, sumsq = 0.0f;
    ulong i = 0;
    for (; i + 16u <= count; i += 16u) {
      float v[16];
      vstore16(ld16(x, base + i), 0, v);
      for (uint j = 0; j < 16u; ++j) {
        sum = nat_add(sum, v[j]);
        sumsq = nat_fma(v[j], v[j], sumsq);
      }
    }
    for (; i < count; ++i) {
      const float v = ld(x, base + i);
      sum = nat_add(sum, v);
      sumsq = nat_fma(v, v, sumsq);
    }
    const float n = (float)count;
    const float mean = sum / n;
    float var = sumsq / n - mean * mean;
    if (var < 0.0f) var = 0.0f;  // cancellation; a NaN variance stays NaN
    scratch[0] = mean;
    scratch[1] = 1.0f / sqrt(var + eps);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float2 r = (float2)(scratch[0], scratch[1]);
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#else
  if (nl == 1) return norm_stats_chunked(x, base, count, eps);
  // Summed about the first value (the shifted-data form): the mean's rounding errors are then of the spread's
  // size, not of the mean's (norm_stats_chunked).
  const float shift = ld(x, base);
  float16 acc = 0.0f;
  float tail = 0.0f;
  for (ulong i = (ulong)lid * 16u; i < count; i += (ulong)nl * 16u) {
    if (i + 16u <= count) {
      acc += ld16(x, base + i) - shift;
    } else {
      for (ulong j = i; j < count; ++j) tail += ld(x, base + j) - shift;
    }
  }
  const float mean = wg_sum(lane_sum16(acc) + tail, scratch) / (float)count;  // of x - shift
  acc = 0.0f;
  tail = 0.0f;
  for (ulong i = (ulong)lid * 16u; i < count; i += (ulong)nl * 16u) {
    if (i + 16u <= count) {
      const float16 d = (ld16(x, base + i) - shift) - mean;
      acc = fma(d, d, acc);
    } else {
      for (ulong j = i; j < count; ++j) {
        const float d = (ld(x, base + j) - shift) - mean;
        tail = fma(d, d, tail);
      }
    }
  }
  const float var = wg_sum(lane_sum16(acc) + tail, scratch) / (float)count;
  return (float2)(shift + mean, 1.0f / sqrt(var + eps));
#endif
}

// ---------------------------------------------------------------------------
// GEMM panels (matmul.cl, conv2d.cl): float offset of row k of panel p in a
// k-blocked panel set of `panels` panels of width W (layout in matmul.cl).
static inline ulong panel_row(uint p, uint panels, uint k, uint K, uint kc, uint width) {
  const uint k0 = (k / kc) * kc;
  const uint kcb = min(kc, K - k0);
  return ((ulong)k0 * panels + (ulong)p * kcb + (k - k0)) * width;
}

// 16 consecutive columns of im2col row (ci, ky, kx), output positions
// oy*OW + ox onward (xp: channel ci of the image, H x W), zero in the padding
// and after `count` columns (matmul.cl conv_cpu, conv2d.cl conv_im2col_panels).
// im2col_row16_any takes every case one element at a time; im2col_row16 first
// tries the fast paths for 16 positions in one output row: at stride 1 inside
// the image, a padding row, or one column over the left or right edge (3x3
// with padding 1: one vector load and a lane shift); at stride 2
// im2col_row16_s2. The general case and stride 2 stay out of line so the
// gather loops that inline the stride-1 paths stay small.
static __attribute__((noinline)) float16 im2col_row16_any(__global const store_t* xp, uint H, uint W, uint stride,
                                                          uint pad, uint OW, uint oy, uint ox, uint ky, uint kx,
                                                          uint count) {
  ns_word_t t[16] __attribute__((aligned(16 * sizeof(ns_word_t))));
  for (uint j = 0; j < 16u; ++j) {
    ns_word_t val = NS_ZERO_WORD;
    if (j < count) {
      const int y = (int)(oy * stride + ky) - (int)pad;
      const int xx = (int)(ox * stride + kx) - (int)pad;
      if (y >= 0 && y < (int)H && xx >= 0 && xx < (int)W) val = ns_word(xp, (ulong)y * W + (uint)xx);
    }
    t[j] = val;
    if (++ox == OW) ox = 0, ++oy;
  }
  return ns_words16_to_f32(t);
}

// 16 consecutive values of a row of W from column x0, zero outside [0, W) (im2col_row16, the Winograd input
// transform): one vector load where they lie inside the row or one past either edge (padding 1), one value at
// a time otherwise.
static __attribute__((always_inline)) inline float16 row16_padded(__global const store_t* row, int x0, uint W) {
  if (x0 >= 0 && x0 + 16 <= (int)W) return ld16(row, (uint)x0);
  if (W >= 16u && x0 == -1) {
    const float16 a = ld16(row, 0u);
    return (float16)(0.0f, a.s0, a.s1, a.s2, a.s3, a.s4, a.s5, a.s6, a.s7, a.s8, a.s9, a.sa, a.sb, a.sc, a.sd, a.se);
  }
  if (W >= 16u && x0 + 15 == (int)W) {
    const float16 a = ld16(row, (uint)(x0 - 1));
    return (float16)(a.s1, a.s2, a.s3, a.s4, a.s5, a.s6, a.s7, a.s8, a.s9, a.sa, a.sb, a.sc, a.sd, a.se, a.sf, 0.0f);
  }
  ns_word_t t[16] __attribute__((aligned(16 * sizeof(ns_word_t))));
  for (int j = 0; j < 16; ++j) {
    const int xx = x0 + j;
    t[j] = xx >= 0 && xx < (int)W ? ns_word(row, (uint)xx) : NS_ZERO_WORD;
  }
  return ns_words16_to_f32(t);
}

// Stride 2 (the downsampling convolutions), 16 positions in one output row, input row iy inside the image: every
// other value of the 32 consecutive ones from column ix, as two row16_padded reads and their even lanes.
static __attribute__((noinline)) float16 im2col_row16_s2(__global const store_t* row, int ix, uint W) {
  return shuffle2(row16_padded(row, ix, W), row16_padded(row, ix + 16, W),
                  (uint16)(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30));
}

static __attribute__((always_inline)) inline float16 im2col_row16(__global const store_t* xp, uint H, uint W,
                                                                   uint stride, uint pad, uint OW, uint oy, uint ox,
                                                                   uint ky, uint kx, uint count) {
  if (stride == 1u && count >= 16u && ox + 16u <= OW && W >= 16u) {
    const int iy = (int)(oy + ky) - (int)pad;
    const int ix = (int)(ox + kx) - (int)pad;
    if (iy < 0 || iy >= (int)H) return (float16)(0.0f);
    return row16_padded(xp + (ulong)iy * W, ix, W);
  }
  if (stride == 2u && count >= 16u && ox + 16u <= OW && W >= 16u) {
    const int iy = (int)(2u * oy + ky) - (int)pad;
    if (iy < 0 || iy >= (int)H) return (float16)(0.0f);
    return im2col_row16_s2(xp + (ulong)iy * W, (int)(2u * ox + kx) - (int)pad, W);
  }
  return im2col_row16_any(xp, H, W, stride, pad, OW, oy, ox, ky, kx, count);
}

// The rows kx = 0, 1, 2 of im2col_row16 at once for a stride-1 convolution
// with padding 1 and 3 taps per row (kx = 1 is the input row itself, kx = 0
// and 2 the same 16 values shifted by one with their neighbours): one vector
// load instead of three. Anything but 16 positions in one output row of an
// image at least 16 wide takes im2col_row16 three times.
static __attribute__((always_inline)) inline void im2col_taps3(__global const store_t* xp, uint H, uint W, uint OW,
                                                               uint oy, uint ox, uint ky, uint count, float16* r0,
                                                               float16* r1, float16* r2) {
  if (count >= 16u && ox + 16u <= OW && ox + 16u <= W) {
    const int iy = (int)(oy + ky) - 1;
    if (iy < 0 || iy >= (int)H) {
      *r0 = *r1 = *r2 = (float16)(0.0f);
      return;
    }
    const ulong row = (ulong)iy * W;
    const float16 c = ld16(xp, row + ox);
    const float l = ox > 0u ? ld(xp, row + ox - 1u) : 0.0f;
    const float r = ox + 16u < W ? ld(xp, row + ox + 16u) : 0.0f;
    *r0 = (float16)(l, c.s0, c.s1, c.s2, c.s3, c.s4, c.s5, c.s6, c.s7, c.s8, c.s9, c.sa, c.sb, c.sc, c.sd, c.se);
    *r1 = c;
    *r2 = (float16)(c.s1, c.s2, c.s3, c.s4, c.s5, c.s6, c.s7, c.s8, c.s9, c.sa, c.sb, c.sc, c.sd, c.se, c.sf, r);
    return;
  }
  *r0 = im2col_row16(xp, H, W, 1u, 1u, OW, oy, ox, ky, 0u, count);
  *r1 = im2col_row16(xp, H, W, 1u, 1u, OW, oy, ox, ky, 1u, count);
  *r2 = im2col_row16(xp, H, W, 1u, 1u, OW, oy, ox, ky, 2u, count);
}

// Winograd F(4x4, 3x3)'s weight transform (conv2d.cl winograd_weights, matmul.cl winograd_fused_cpu: one
// definition, so both give the same U bit for bit).
// One row of G times three values (WINO_G_ROW), and G g GT for a 3x3 kernel g[3r + col] as u[6i + j]
// (WINO_WEIGHTS). For float and float16.
#define WINO_G_ROW(T, g0, g1, g2, r)                                               \
  do {                                                                             \
    (r)[0] = (g0) * 0.25f;                                                         \
    (r)[1] = ((g0) + (g1) + (g2)) * (-1.0f / 6.0f);                                \
    (r)[2] = ((g0) - (g1) + (g2)) * (-1.0f / 6.0f);                                \
    (r)[3] = (g0) * (1.0f / 24.0f) + (g1) * (1.0f / 12.0f) + (g2) * (1.0f / 6.0f); \
    (r)[4] = (g0) * (1.0f / 24.0f) - (g1) * (1.0f / 12.0f) + (g2) * (1.0f / 6.0f); \
    (r)[5] = (g2);                                                                 \
  } while (0)
#define WINO_WEIGHTS(T, g, u)                                                 \
  do {                                                                        \
    T h_[18]; /* G g: 6 rows of 3 */                                          \
    for (int col = 0; col < 3; ++col) {                                       \
      T r_[6];                                                                \
      WINO_G_ROW(T, g[col], g[3 + col], g[6 + col], r_);                      \
      for (int i = 0; i < 6; ++i) h_[3 * i + col] = r_[i];                    \
    }                                                                         \
    for (int i = 0; i < 6; ++i) WINO_G_ROW(T, h_[3 * i], h_[3 * i + 1], h_[3 * i + 2], (u) + 6 * i); \
  } while (0)
// G g GT for 16 kernels at once: gs holds 16 consecutive 3x3 kernels (kernel j's tap t at 9j + t), uv[e] the
// transformed value e of each in its lane.
static inline void wino_weights16(const float* gs, float16* uv) {
  float16 gv[9];
  for (int t = 0; t < 9; ++t) {
    gv[t] = (float16)(gs[t], gs[9 + t], gs[18 + t], gs[27 + t], gs[36 + t], gs[45 + t], gs[54 + t], gs[63 + t],
                      gs[72 + t], gs[81 + t], gs[90 + t], gs[99 + t], gs[108 + t], gs[117 + t], gs[126 + t],
                      gs[135 + t]);
  }
  WINO_WEIGHTS(float16, gv, uv);
}
