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

