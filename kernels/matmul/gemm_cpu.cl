// ---------------------------------------------------------------------------
// Epilogue shared by the panel kernels: row m of the block, columns n0.. of
// one 16-wide vector, value already final (f32 mode) or exactly rounded.

static inline void gemm_store16(__global store_t* c, ulong off, uint n0, uint N, float16 v) {
  if (n0 + 16u <= N) {
    st16(c, off + n0, v);
  } else if (n0 < N) {
    float t[16];
    vstore16(v, 0, t);
    for (uint j = 0; j < N - n0; ++j) st(c, off + n0 + j, t[j]);
  }
}

static inline float16 gemm_bias16(__global const store_t* bias, int mode, uint m, uint n0, uint N) {
  if (mode == BIAS_COL) return n0 + 16u <= N ? ld16(bias, n0) : ld16_masked(bias, n0, 1, n0 < N ? N - n0 : 0u);
  if (mode == BIAS_ROW) return (float16)(ld(bias, m));
  return (float16)(-0.0f);  // -0 is the exact identity of addition (keeps -0 results)
}

// ---------------------------------------------------------------------------
// f32 accumulation, every k-block in one launch.
// Grid: (ceil(N/NR), ceil(ceil(M/MR) / mgroup), batch), local size 1. Each
// work-item computes mgroup consecutive MR x NR blocks of one column panel,
// k-block by k-block: the B sub-panel of a k-block (kc x NR) serves its
// mgroup row blocks from the caches, and between k-blocks each block's
// running sums wait in local memory (pl: mgroup x MR x NR floats, in L1),
// where one launch per k-block had them go through memory (all of C written
// and read back once per k-block: 30% of a 2048 GEMM's time at kc 128, 10%
// at kc 512, on a 2-core Zen 5). Consecutive work-groups walk the column
// panels with the same rows of A (the GotoBLAS loop order).
// A panel set: a_blocks panels, batch b at a_poff + b*a_bs floats; B panel set:
// b_blocks panels, batch b at b_poff + b*b_bs floats. C element (m, n) of
// batch b is c[c_off + b*c_bs + m*ldc + n]; bias starts at bias_off. The sums
// are those of one pass per k-block, bit for bit.

// GEMM_VECS(X, r): X(r, v) for each 16-wide vector v of a block row.
// GEMM_LOAD_B(BQ, KK): the B vectors b0.. of k step KK of the sub-panel BQ (global or local).
#define GEMM_LOAD_B1(BQ, KK, v) const float16 b##v = vload16(0, (BQ) + (KK) * GEMM_NR + 16 * v);
#if GEMM_NV == 1
#define GEMM_VECS(X, r) X(r, 0)
#define GEMM_LOAD_B(BQ, KK) GEMM_LOAD_B1(BQ, KK, 0)
#elif GEMM_NV == 2
#define GEMM_VECS(X, r) X(r, 0) X(r, 1)
#define GEMM_LOAD_B(BQ, KK) GEMM_LOAD_B1(BQ, KK, 0) GEMM_LOAD_B1(BQ, KK, 1)
#else
#define GEMM_VECS(X, r) X(r, 0) X(r, 1) X(r, 2)
#define GEMM_LOAD_B(BQ, KK) GEMM_LOAD_B1(BQ, KK, 0) GEMM_LOAD_B1(BQ, KK, 1) GEMM_LOAD_B1(BQ, KK, 2)
#endif
#define GEMM_DECL1(r, v) float16 acc##r##_##v = 0.0f;
#define GEMM_LOAD1(r, v) acc##r##_##v = *(__local const float16*)(pp + r * GEMM_NR + 16 * v);
#define GEMM_SAVE1(r, v) *(__local float16*)(pp + r * GEMM_NR + 16 * v) = acc##r##_##v;
#define GEMM_FMA1(r, v) acc##r##_##v = fma(av, b##v, acc##r##_##v);
#define GEMM_DECL(r) GEMM_VECS(GEMM_DECL1, r)
#define GEMM_LOAD(r) GEMM_VECS(GEMM_LOAD1, r)
#define GEMM_SAVE(r) GEMM_VECS(GEMM_SAVE1, r)
// One k step of row r, its A value x broadcast against the B vectors b0..
#define GEMM_FMA_V(r, x)                  \
  {                                       \
    const float16 av = (float16)(x);      \
    GEMM_VECS(GEMM_FMA1, r)               \
  }
#define GEMM_FMA(r) GEMM_FMA_V(r, a[k * GEMM_MR + r])

#define GEMM_STORE_V(r, v)                                                                                \
  if (m0 + r < M) {                                                                                       \
    const ulong off = cbase + (ulong)(m0 + r) * ldc;                                                      \
    gemm_store16(c, off, n0 + 16u * v, N, fma((float16)(alpha), acc##r##_##v,                             \
                                              gemm_bias16(bias, bias_mode, m0 + r, n0 + 16u * v, N)));    \
  }
#define GEMM_STORE(r) GEMM_VECS(GEMM_STORE_V, r)
// C's lines of a block row, prefetched at the start of the block's last k-block: its stores then hit the
// caches. Without it the stores of a finished block missed (write-allocate reads from memory: C is cold) and
// filled the store buffer; on a 2-core AVX2 Zen 3, 15% of an 8192 x 320 x 320 GEMM's samples sat at the first
// stores after a block's, and its K = 320 linears ran 13-19% faster with the prefetch. pf_col: the row's first
// stored column; one line per 16 columns. Prefetches never fault. Only where the host asks (CPU_PREFETCH: a CPU
// device) and the compiler has the builtin.
#if defined(CPU_PREFETCH) && defined(__has_builtin)
#if __has_builtin(__builtin_prefetch)
#define GEMM_PREFETCH_W(p) __builtin_prefetch((p), 1, 3);
#endif
#endif
#ifndef GEMM_PREFETCH_W
#define GEMM_PREFETCH_W(p)
#endif
#define GEMM_PREFETCH_V(r, v) GEMM_PREFETCH_W(c + pf_row##r + 16u * v)
#define GEMM_PREFETCH_ROW(r)                                                \
  if (m0 + r < M) {                                                         \
    const ulong pf_row##r = cbase + (ulong)(m0 + r) * ldc + pf_col;         \
    GEMM_VECS(GEMM_PREFETCH_V, r)                                           \
  }
// gemm_cpu_direct_a_geglu's store: GEGLU over B's panels packed split (gemm_pack_b), each NR-column panel nb
// holding the value columns j0 = nb*NR/2.. of the product's first half and the gate columns N/2 + j0.. side by
// side; C (N/2 wide, row stride ldc) = y * gelu_erf(g) of the block's values rounded to the storage dtype: the
// same operations on the same values as the GEMM's store followed by the GEGLU kernel, the same bits.
#define GEMM_ROUNDED(r, v, n) \
  round_store16(fma((float16)(alpha), acc##r##_##v, gemm_bias16(bias, bias_mode, m0 + r, (n), N)))
#if GEMM_NV == 2
#define GEMM_STORE_GEGLU(r)                                                                                 \
  if (m0 + r < M) {                                                                                         \
    const float16 y = GEMM_ROUNDED(r, 0, j0);                                                               \
    const float16 g = GEMM_ROUNDED(r, 1, N / 2u + j0);                                                      \
    gemm_store16(c, cbase + (ulong)(m0 + r) * ldc, j0, N / 2u, y * gelu_erf16(g));                          \
  }
#elif GEMM_NV == 1
// Values in lanes 0-7, gates in 8-15 (gelu_erf16 is lane by lane: the same bits in any lane).
#define GEMM_STORE_GEGLU(r)                                                                                 \
  if (m0 + r < M) {                                                                                         \
    const float16 y = round_store16(fma((float16)(alpha), acc##r##_0, bias_mode == BIAS_COL ?                \
                                        (float16)(ld8(bias, j0), ld8(bias, N / 2u + j0)) : (float16)(-0.0f))); \
    st8(c, cbase + (ulong)(m0 + r) * ldc + j0, y.lo * gelu_erf16(y).hi);                                    \
  }
#endif  // 48 columns (GEMM_NV 3): no GEGLU kernel (gemm::fuses_epilogue)
#define GEMM_GEGLU_BLOCK                   \
  const uint j0 = nb * (GEMM_NR / 2u);     \
  GEMM_ROWS(GEMM_STORE_GEGLU)

// The work-item's place (gemm_cpu and the direct-A kernels): column panel nb, batch bt, row blocks
// [mb0, mb_end).
#define GEMM_CPU_ITEM                                                  \
  const uint nb = (uint)get_global_id(0);                              \
  const ulong bt = get_global_id(2);                                   \
  const uint n0 = nb * GEMM_NR;                                        \
  const uint mblocks = (M + GEMM_MR - 1) / GEMM_MR;                    \
  const __global float* bpanels = bp + b_poff + bt * b_bs;             \
  const ulong cbase = c_off + bt * c_bs;                               \
  bias += bias_off;                                                    \
  const uint mb0 = (uint)get_global_id(1) * mgroup;                    \
  const uint mb_end = min(mblocks, mb0 + mgroup);
// Its walk: for each k-block, KBLOCK_A (where the block's A starts), then for each row block ROW_A (its
// rows), the running sums from local memory after the first k-block, BLOCK_SUMS (kcb k steps against the B
// sub-panel bq), and the sums saved again or, after the last k-block, stored (STORE_BLOCK: from column PF_COL of
// C's rows on, prefetched before the last k-block's sums).
#define GEMM_CPU_KBLOCKS(KBLOCK_A, ROW_A, BLOCK_SUMS, STORE_BLOCK, PF_COL)                   \
  for (uint k0 = 0; k0 < K; k0 += kc) {                                                     \
    const uint kcb = min(kc, K - k0);                                                       \
    const __global float* bq = bpanels + ((ulong)k0 * b_blocks + (ulong)nb * kcb) * GEMM_NR; \
    KBLOCK_A                                                                                \
    for (uint mb = mb0; mb < mb_end; ++mb) {                                                \
      __local float* pp = pl + (mb - mb0) * (GEMM_MR * GEMM_NR);                            \
      const uint m0 = mb * GEMM_MR;                                                         \
      ROW_A                                                                                 \
      GEMM_ROWS(GEMM_DECL)                                                                  \
      if (k0 > 0) {                                                                         \
        GEMM_ROWS(GEMM_LOAD)                                                                \
      }                                                                                     \
      if (k0 + kcb >= K) {                                                                  \
        const uint pf_col = (PF_COL);                                                       \
        GEMM_ROWS(GEMM_PREFETCH_ROW)                                                        \
      }                                                                                     \
      BLOCK_SUMS                                                                            \
      if (k0 + kcb < K) {                                                                   \
        GEMM_ROWS(GEMM_SAVE)                                                                \
      } else {                                                                              \
        STORE_BLOCK                                                                         \
      }                                                                                     \
    }                                                                                       \
  }

#if !defined(CPU_KERNELS) || defined(GEMM_PACKED_A)  // packed A: the materialised attention's scores
// The sums of one block over KC k steps of the packed A panel `a` and the sub-panel BQ.
#define GEMM_PACKED_SUMS(BQ, KC)    \
  for (uint k = 0; k < (KC); ++k) { \
    GEMM_LOAD_B(BQ, k)              \
    GEMM_ROWS(GEMM_FMA)             \
  }
__kernel CPU_ONE_ITEM void gemm_cpu(__global const float* ap, ulong a_poff, ulong a_bs, uint a_blocks,
                                    __global const float* bp, ulong b_poff, ulong b_bs, uint b_blocks,
                                    __local float* pl, uint K, uint kc, uint mgroup, __global const store_t* bias,
                                    ulong bias_off, int bias_mode, __global store_t* c, ulong c_off, ulong c_bs,
                                    ulong ldc, uint M, uint N, float alpha) {
  GEMM_CPU_ITEM
  const __global float* apanels = ap + a_poff + bt * a_bs;
  GEMM_CPU_KBLOCKS(const __global float* abase = apanels + (ulong)k0 * a_blocks * GEMM_MR;,
                   const __global float* a = abase + (ulong)mb * kcb * GEMM_MR;, GEMM_PACKED_SUMS(bq, kcb),
                   GEMM_ROWS(GEMM_STORE), n0)
}
#endif  // !CPU_KERNELS || GEMM_PACKED_A

// gemm_cpu with A read where it lies (unit column stride: conv weights
// [O][C*KH*KW], activations [tokens][features]) instead of from packed
// panels: each row of a block is its own sequential stream, which the
// prefetchers follow as well as one panel, and the per-call packing pass over
// every weight disappears. Rows past M read row M-1 (never stored). Same sums
// in the same order as gemm_cpu, and the f16 / bf16 -> f32 conversion is exact:
// the results are identical bit for bit.
// A element (m, k) of batch b is a[a_off + b*a_bs + m*lda + k].
// GEMM_A_T, GEMM_LD_A: A's element type and scalar load (the storage dtype's,
// or f32 in gemm_cpu_direct_f32a); GEMM_A_STEPS: the k steps that read it.
#define GEMM_A_T store_t
#define GEMM_LD_A(p, i) ld(p, i)
#define GEMM_ROWPTR(r) const __global GEMM_A_T* ar##r = a + (ulong)min(m0 + r, M - 1u) * lda;
#define GEMM_FMA_D(r) GEMM_FMA_V(r, GEMM_LD_A(ar##r, k))
// One k step of a block: row KB of the B sub-panel BQ against each row's A value, which FMA_A reads at `ka`
// (KA). Four steps per trip (the same sums in the same order): the loop's counter and branch per step cost 4-6%
// of the GEMM on a 2-FMA-port AVX-512 Xeon.
#define GEMM_K_STEP(BQ, KB, KA, FMA_A) \
  {                                    \
    const uint ka = (KA);              \
    GEMM_LOAD_B(BQ, KB)                \
    GEMM_ROWS(FMA_A)                   \
  }
#define GEMM_K_STEPS4(BQ, KB, KA, FMA_A)                \
  GEMM_K_STEP(BQ, KB, KA, FMA_A)                        \
  GEMM_K_STEP(BQ, (KB) + 1u, (KA) + 1u, FMA_A)          \
  GEMM_K_STEP(BQ, (KB) + 2u, (KA) + 2u, FMA_A)          \
  GEMM_K_STEP(BQ, (KB) + 3u, (KA) + 3u, FMA_A)
// f32 A: read where it lies, four k steps per trip.
#define GEMM_FMA_Q(r) GEMM_FMA_V(r, GEMM_LD_A(ar##r, ka))
#define GEMM_DIRECT_K4(BQ, KC)          \
  for (; k + 4u <= (KC); k += 4u) {     \
    GEMM_K_STEPS4(BQ, k, k, GEMM_FMA_Q) \
  }
#if !defined(STORE_F32)
// Half storage: 16 k of each row converted by one vector load (the CPU's
// conversion instructions; scalar ld() is integer arithmetic) into a private
// block the fmas read as gemm_cpu reads its panel.
#define GEMM_CVT16(r) vstore16(ld16(ar##r, k), 0, at + r * 16);
#define GEMM_FMA_T(r) GEMM_FMA_V(r, at[r * 16 + ka])
#define GEMM_DIRECT_K16(BQ, KC)                              \
  for (; k + 16u <= (KC); k += 16u) {                        \
    float at[16 * GEMM_MR];                                  \
    GEMM_ROWS(GEMM_CVT16)                                    \
    for (uint kk = 0; kk < 16u; kk += 4u) {                  \
      GEMM_K_STEPS4(BQ, k + kk, kk, GEMM_FMA_T)              \
    }                                                        \
  }
#define GEMM_A_STEPS GEMM_DIRECT_K16
#else
#define GEMM_A_STEPS GEMM_DIRECT_K4
#endif
// The sums of one MR x NR block over KC columns of the rows ar0.. of A and the
// sub-panel BQ (KC x NR floats, global or local): gemm_cpu_direct_a and conv_cpu.
#define GEMM_DIRECT_A_SUMS(BQ, KC)  \
  {                                 \
    uint k = 0;                     \
    GEMM_A_STEPS(BQ, KC)            \
    for (; k < (KC); ++k) {         \
      GEMM_LOAD_B(BQ, k)            \
      GEMM_ROWS(GEMM_FMA_D)         \
    }                               \
  }

#if !defined(GPU_KERNELS) && !defined(GEMM_PACKED_A)  // CPU family only (reads_a_directly), not in its packed-A variant
// STORE_BLOCK: what a finished block becomes (GEMM_ROWS(GEMM_STORE), or GEGLU's GEMM_GEGLU_BLOCK; macro
// arguments twice over, so no comma outside parentheses in either). Each
// epilogue is a kernel of its own: a run-time switch there slowed the plain GEMM's loop by 1-5%.
#define GEMM_DIRECT_A_KERNEL(NAME, STORE_BLOCK, PF_COL)                                                                     \
__kernel CPU_ONE_ITEM void NAME(__global const GEMM_A_T* ap, ulong a_off, ulong a_bs, ulong lda,                      \
                                             __global const float* bp, ulong b_poff, ulong b_bs, uint b_blocks,       \
                                             __local float* pl, uint K, uint kc, uint mgroup,                         \
                                             __global const store_t* bias, ulong bias_off, int bias_mode,             \
                                             __global store_t* c, ulong c_off, ulong c_bs, ulong ldc, uint M, uint N, \
                                             float alpha) {                                                           \
  GEMM_CPU_ITEM                                                                                                       \
  const __global GEMM_A_T* abt = ap + a_off + bt * a_bs;                                                              \
  GEMM_CPU_KBLOCKS(const __global GEMM_A_T* a = abt + k0;, GEMM_ROWS(GEMM_ROWPTR), GEMM_DIRECT_A_SUMS(bq, kcb),       \
                   STORE_BLOCK, PF_COL)                                                                               \
}
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_a, GEMM_ROWS(GEMM_STORE), n0)
#if GEMM_NV <= 2
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_a_geglu, GEMM_GEGLU_BLOCK, nb *(GEMM_NR / 2u))
#endif

#endif  // !GPU_KERNELS && !GEMM_PACKED_A

