// ---------------------------------------------------------------------------
// Native accumulation: acc = round(acc + a*b) for k ascending (the product of
// two stored values is exact in f32), then round(alpha * acc + bias) once.
// Grid: (ceil(N/NR), ceil(M/MR), batch), all k in one launch; panel sets as gemm_cpu.
// One row of the block at a time keeps the register footprint small: the
// rounding emulation, not memory, bounds this kernel. Only in the native
// accumulation builds (-DACC_NATIVE): compiling it into every other matmul
// program cost their cold builds on PoCL, which compiles every kernel of a program.

#if defined(ACC_NATIVE)
__kernel CPU_ONE_ITEM void gemm_native(__global const float* ap, ulong a_poff, ulong a_bs, uint a_blocks,
                                       __global const float* bp, ulong b_poff, ulong b_bs, uint b_blocks, uint kc,
                                       __global const store_t* bias, ulong bias_off, int bias_mode,
                                       __global store_t* c, ulong c_off, ulong c_bs, ulong ldc, uint M, uint N, uint K,
                                       float alpha) {
  const uint nb = (uint)get_global_id(0);
  const uint mb = (uint)get_global_id(1);
  const ulong bt = get_global_id(2);
  const __global float* a = ap + a_poff + bt * a_bs;
  const __global float* bq = bp + b_poff + bt * b_bs;
  const uint m0 = mb * GEMM_MR, n0 = nb * GEMM_NR;
  const ulong cbase = c_off + bt * c_bs;
  bias += bias_off;
  const bool plain = bias_mode == BIAS_NONE && alpha == 1.0f;
  for (uint r = 0; r < GEMM_MR && m0 + r < M; ++r) {
    for (uint v = 0; v < GEMM_NV; ++v) {
      if (n0 + 16u * v >= N) break;
      float16 acc = 0.0f;
      for (uint k0 = 0; k0 < K; k0 += kc) {  // k ascending through the k-blocks
        const uint kcb = min(kc, K - k0);
        const __global float* ar = a + ((ulong)k0 * a_blocks + (ulong)mb * kcb) * GEMM_MR + r;
        const __global float* br = bq + ((ulong)k0 * b_blocks + (ulong)nb * kcb) * GEMM_NR + 16u * v;
        for (uint k = 0; k < kcb; ++k) {
          acc = nat_fma16((float16)(ar[k * GEMM_MR]), vload16(0, br + k * GEMM_NR), acc);
        }
      }
      if (!plain) acc = round_affine16((float16)(alpha), acc, gemm_bias16(bias, bias_mode, m0 + r, n0 + 16u * v, N));
      gemm_store16(c, cbase + (ulong)(m0 + r) * ldc, n0 + 16u * v, N, acc);
    }
  }
}
#endif  // ACC_NATIVE

