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

