// matmul.cl: C = alpha * A.B + bias for every storage dtype, in three families.
//
// CPU style (gemm_pack_a, gemm_pack_b, gemm_cpu, gemm_native): A and B are
// first packed into f32 panels of MR rows of A / NR columns of B, zero-padded
// at the edges, so the compute kernel reads both contiguously and never
// converts dtypes in its inner loop. Each work-item owns MR x NR blocks of C
// in float16 registers and walks k with fma(), broadcasting one A value
// against a row of B: no local memory, no barriers (on PoCL, GPU-style tiles
// with barriers run ~5x slower). Packing B once per weight is the hook for
// pre-packed weights (engine/backend/opencl/gemm.hpp).
// With f32 accumulation gemm_cpu_direct_a reads A where it lies instead of
// from panels (any storage dtype), so weights are not packed on every call.
//
// Panel layout, blocked along k (as GotoBLAS packs): k runs in blocks of kc
// rows (a multiple of 16; the last block may be shorter; kc = K when one block
// does); block kb holds every panel's rows [kb*kc, kb*kc + kcb) back to back,
// panel p at (kb*kc*panels + p*kcb)*W floats (W = MR or NR). One compute pass
// per k-block then reads contiguous memory that fits the caches.
//
// Native accumulation (gemm_native): same panels; every partial sum is
// rounded exactly to the storage dtype, k ascending, alpha and bias last with
// one rounding (op_args.hpp).
//
// GPU style (gemm_tiled): local-memory tiles of TS_M x TS_K and TS_K x TS_N,
// each work-item WPT_M x WPT_N outputs, reading the stored dtype directly.
//
// NVIDIA tensor cores (gemm_mma, conv_implicit_mma; only with -DGEMM_MMA, which
// gemm.cpp passes on sm_80+ for f16 storage with f32 accumulation): the same
// arguments as gemm_tiled / conv_implicit_gemm, mma.sync through inline PTX.
//
// Block sizes come from the host's tuning table as -D constants; the defaults
// here are the table's CPU (AVX2) entry.

#ifndef GEMM_MR
#define GEMM_MR 6
#endif
#ifndef GEMM_NV
#define GEMM_NV 1
#endif
#define GEMM_NR (16 * GEMM_NV)

#if GEMM_MR == 4
#define GEMM_ROWS(X) X(0) X(1) X(2) X(3)
#elif GEMM_MR == 6
#define GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#elif GEMM_MR == 8
#define GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#else
#error "GEMM_MR must be 4, 6 or 8"
#endif
#if GEMM_NV < 1 || GEMM_NV > 3
#error "GEMM_NV must be 1, 2 or 3"
#endif

// Bias modes: none, one value per column of C (matmul), one per row (conv).
#define BIAS_NONE 0
#define BIAS_COL 1
#define BIAS_ROW 2

// Up to 16 elements src[base + i * step] for i < count, zeros after.
static inline float16 ld16_masked(__global const store_t* src, ulong base, ulong step, uint count) {
  float v[16];
  for (uint i = 0; i < 16u; ++i) v[i] = i < count ? ld(src, base + i * step) : 0.0f;
  return vload16(0, v);
}

// ---------------------------------------------------------------------------
// Packing.


// A panels (k-blocked by kc): row r of panel mb = element (m = mb*MR + r, k) at
// src[src_off + b*sbs + m*rs + k*cs]; rows past M are zero. Grid: (ceil(K/16), ceil(M/MR), batch).
// In the CPU family gemm_cpu_direct_a reads A where it lies (gemm.hpp,
// reads_a_directly): A is packed for native accumulation (gemm_native) and for
// the materialised attention's scores (gemm_cpu) only. Its f32-accumulation
// programs, which a default run's cold start builds, leave this kernel and
// gemm_cpu out (1.2 s of compiler time on a 2-core host): they are a variant of
// their own there (-DGEMM_PACKED_A, gemm::packed_a_options), with nothing else.
#if !defined(CPU_KERNELS) || defined(ACC_NATIVE) || defined(GEMM_PACKED_A)
__kernel CPU_ONE_ITEM void gemm_pack_a(__global const store_t* src, ulong src_off, ulong sbs, ulong rs, ulong cs,
                                       __global float* dst, ulong dbs, uint M, uint K, uint kc) {
  const uint k0 = (uint)get_global_id(0) * 16u;
  const uint mb = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  if (k0 >= K) return;
  const uint kn = min(16u, K - k0);
  src += src_off + b * sbs;
  __global float* d = dst + b * dbs + panel_row(mb, (M + GEMM_MR - 1) / GEMM_MR, k0, K, kc, GEMM_MR);
  for (uint r = 0; r < GEMM_MR; ++r) {
    const uint m = mb * GEMM_MR + r;
    float v[16];
    if (m < M && kn == 16u && cs == 1u) {
      vstore16(ld16(src, m * rs + k0), 0, v);
    } else {
      vstore16(ld16_masked(src, m * rs + k0 * cs, cs, m < M ? kn : 0u), 0, v);
    }
    for (uint kk = 0; kk < kn; ++kk) d[kk * GEMM_MR + r] = v[kk];
  }
}
#endif  // !CPU_KERNELS || ACC_NATIVE || GEMM_PACKED_A

// B panels (k-blocked by kc): column j of panel nb = element (k, n = nb*NR + j) at
// src[src_off + b*sbs + k*ks + n*ns]; columns past N are zero. Grid: (ceil(K/16), ceil(N/NR), batch).
#if !defined(GEMM_PACKED_A)
// split (B's columns contiguous along k only, ns != 1): 0, or NR/2 for the GEGLU epilogue's column order (panel
// nb: columns nb*split.. of the first half, then N/2 + nb*split.. of the second; N a multiple of NR).
__kernel CPU_ONE_ITEM void gemm_pack_b(__global const store_t* src, ulong src_off, ulong sbs, ulong ks, ulong ns,
                                       __global float* dst, ulong dbs, uint N, uint K, uint kc, uint split) {
  const uint k0 = (uint)get_global_id(0) * 16u;
  const uint nb = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  if (k0 >= K) return;
  const uint kn = min(16u, K - k0);
  const uint n0 = nb * GEMM_NR;
  src += src_off + b * sbs;
  __global float* d = dst + b * dbs + panel_row(nb, (N + GEMM_NR - 1) / GEMM_NR, k0, K, kc, GEMM_NR);
  if (ns == 1u) {
    // Rows of B are contiguous: copy 16 columns at a time.
    for (uint kk = 0; kk < kn; ++kk) {
      const ulong row = (ulong)(k0 + kk) * ks;
      for (uint v = 0; v < GEMM_NV; ++v) {
        const uint n = n0 + 16u * v;
        const float16 x = n + 16u <= N ? ld16(src, row + n) : ld16_masked(src, row + n, 1, n < N ? N - n : 0u);
        vstore16(x, 0, d + kk * GEMM_NR + 16u * v);
      }
    }
  } else {
    // Columns of B (rows of a [N, K] matrix, trans_b) are contiguous along k.
    for (uint j = 0; j < GEMM_NR; ++j) {
      const uint n = split == 0u ? n0 + j : (j < split ? nb * split + j : N / 2u + nb * split + (j - split));
      float v[16];
      if (n < N && kn == 16u && ks == 1u) {
        vstore16(ld16(src, n * ns + k0), 0, v);
      } else {
        vstore16(ld16_masked(src, n * ns + k0 * ks, ks, n < N ? kn : 0u), 0, v);
      }
      for (uint kk = 0; kk < kn; ++kk) d[kk * GEMM_NR + j] = v[kk];
    }
  }
}
#endif  // !GEMM_PACKED_A

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
// sub-panel bq), and the sums saved again or, after the last k-block, stored (STORE_BLOCK).
#define GEMM_CPU_KBLOCKS(KBLOCK_A, ROW_A, BLOCK_SUMS, STORE_BLOCK)                           \
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
                   GEMM_ROWS(GEMM_STORE))
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
#define GEMM_DIRECT_A_KERNEL(NAME, STORE_BLOCK)                                                                       \
__kernel CPU_ONE_ITEM void NAME(__global const GEMM_A_T* ap, ulong a_off, ulong a_bs, ulong lda,                      \
                                             __global const float* bp, ulong b_poff, ulong b_bs, uint b_blocks,       \
                                             __local float* pl, uint K, uint kc, uint mgroup,                         \
                                             __global const store_t* bias, ulong bias_off, int bias_mode,             \
                                             __global store_t* c, ulong c_off, ulong c_bs, ulong ldc, uint M, uint N, \
                                             float alpha) {                                                           \
  GEMM_CPU_ITEM                                                                                                       \
  const __global GEMM_A_T* abt = ap + a_off + bt * a_bs;                                                              \
  GEMM_CPU_KBLOCKS(const __global GEMM_A_T* a = abt + k0;, GEMM_ROWS(GEMM_ROWPTR), GEMM_DIRECT_A_SUMS(bq, kcb),       \
                   STORE_BLOCK)                                                                                       \
}
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_a, GEMM_ROWS(GEMM_STORE))
#if GEMM_NV <= 2
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_a_geglu, GEMM_GEGLU_BLOCK)
#endif

#endif  // !GPU_KERNELS && !GEMM_PACKED_A

// Convolution on the CPU family with f32 accumulation, without a column
// matrix: gemm_cpu_direct_a (weights W [M][K] read where they lie as A) whose
// B sub-panels each work-item gathers itself from the image, one k-block at a
// time, into local memory (im2col_row16; im2col_taps3 takes the three taps
// of a 3x3 row from one load), then multiplies by its mgroup row
// blocks while they are in the caches; the running sums wait in local memory
// between k-blocks. A work-item owns np consecutive column panels, so each
// row block's slice of W is read from memory once for np panels (one panel
// per work-item streamed all of W's rows through L2 for every panel). The
// column matrix of conv_im2col_panels + gemm_cpu (1.2 GB for a 128-channel
// 512x512 VAE layer, written to memory in chunks and read back) never exists.
// Same sums in the same order as that path: identical results bit for bit.
// out[b][m][n] = sum_k W[m][k] * im2col(x[b])[k][n] + bias[m], n = oy*OW + ox < N.
// Grid: (ceil(ceil(N/NR) / np), ceil(ceil(M/MR) / mgroup), images), local size 1.
// bl: np x kc x NR floats; pl: mgroup x np x MR x NR floats.
#if !defined(GPU_KERNELS) && !defined(GEMM_PACKED_A)  // CPU family only (reads_a_directly), not in its packed-A variant
__kernel CPU_ONE_ITEM void conv_cpu(__global const store_t* ap, __global const store_t* x, ulong x_bs, uint H, uint W,
                                    uint KH, uint KW, uint stride, uint pad, uint OW, __local float* bl,
                                    __local float* pl, uint kc, uint mgroup, uint np, __global const store_t* bias,
                                    int bias_mode, __global store_t* c, ulong c_bs, uint M, uint N, uint K) {
  const ulong bt = get_global_id(2);
  const uint mblocks = (M + GEMM_MR - 1) / GEMM_MR;
  const uint nblocks = (N + GEMM_NR - 1) / GEMM_NR;
  const uint nb0 = (uint)get_global_id(0) * np;
  const uint nps = min(np, nblocks - nb0);
  const ulong cbase = bt * c_bs;
  const ulong lda = K, ldc = N;  // W is [M][K], out[b] is [M][N]
  const float alpha = 1.0f;
  x += bt * x_bs;
  const uint mb0 = (uint)get_global_id(1) * mgroup;
  const uint mb_end = min(mblocks, mb0 + mgroup);
  // The output position of each 16-column vector of the work-item's panels, decomposed once (a division by a
  // run-time OW in the gather loop cost more than the gather).
  uint voy[4 * GEMM_NV], vox[4 * GEMM_NV];
  {
    const uint q = nb0 * GEMM_NR;
    uint oy = q / OW, ox = q % OW;
    for (uint i = 0; i < nps * GEMM_NV; ++i) {
      voy[i] = oy, vox[i] = ox;
      ox += 16u;
      while (ox >= OW) ox -= OW, ++oy;
    }
  }
  uint ci = 0, ky = 0, kx = 0;  // im2col row k0, walked along k
  for (uint k0 = 0; k0 < K; k0 += kc) {
    const uint kcb = min(kc, K - k0);
    for (uint kk = 0; kk < kcb; ++kk) {
      const __global store_t* xp = x + (ulong)ci * H * W;
      // Gathered rows are stored as aligned vectors (local arguments are aligned to the largest type; rows are
      // 64 bytes): vstore16 was split into three stores.
      if (KW == 3u && stride == 1u && pad == 1u && kx == 0u && kk + 2u < kcb) {
        // The three kx taps of an input row at once: one load and two lane shifts (im2col_taps3).
        for (uint i = 0; i < nps * GEMM_NV; ++i) {
          const uint q = nb0 * GEMM_NR + 16u * i;
          __local float* d = bl + ((ulong)(i / GEMM_NV) * kcb + kk) * GEMM_NR + 16u * (i % GEMM_NV);
          float16 r0, r1, r2;
          im2col_taps3(xp, H, W, OW, voy[i], vox[i], ky, q < N ? N - q : 0u, &r0, &r1, &r2);
          *(__local float16*)d = r0;
          *(__local float16*)(d + GEMM_NR) = r1;
          *(__local float16*)(d + 2 * GEMM_NR) = r2;
        }
        kk += 2u;
        if (++ky == KH) ky = 0, ++ci;
        continue;
      }
      for (uint i = 0; i < nps * GEMM_NV; ++i) {
        const uint q = nb0 * GEMM_NR + 16u * i;
        const uint j = i / GEMM_NV, v = i % GEMM_NV;
        *(__local float16*)(bl + ((ulong)j * kcb + kk) * GEMM_NR + 16u * v) =
            im2col_row16(xp, H, W, stride, pad, OW, voy[i], vox[i], ky, kx, q < N ? N - q : 0u);
      }
      if (++kx == KW) {
        kx = 0;
        if (++ky == KH) ky = 0, ++ci;
      }
    }
    const __global store_t* a = ap + k0;
    for (uint mb = mb0; mb < mb_end; ++mb) {
      const uint m0 = mb * GEMM_MR;
      for (uint j = 0; j < nps; ++j) {
        const uint n0 = (nb0 + j) * GEMM_NR;
        const __local float* bq = bl + (ulong)j * kcb * GEMM_NR;
        __local float* pp = pl + ((mb - mb0) * np + j) * (GEMM_MR * GEMM_NR);
        GEMM_ROWS(GEMM_ROWPTR)
        GEMM_ROWS(GEMM_DECL)
        if (k0 > 0) {
          GEMM_ROWS(GEMM_LOAD)
        }
        GEMM_DIRECT_A_SUMS(bq, kcb)
        if (k0 + kcb < K) {
          GEMM_ROWS(GEMM_SAVE)
        } else {
          GEMM_ROWS(GEMM_STORE)
        }
      }
    }
  }
}
#endif  // !GPU_KERNELS && !GEMM_PACKED_A

#if !defined(GPU_KERNELS) && !defined(GEMM_PACKED_A) && defined(STORE_F32)
// Winograd F(4x4, 3x3) with the weight transform inside the GEMM, for images of one or two column panels of
// tiles (gemm::fuses_winograd_weights: the SD UNet's 16x16 layers at batch 2, 32 tiles). There winograd_weights
// wrote U, 4x the weights (236 MB for 1280 x 1280 channels), to memory for gemm_cpu_direct_a to read back: about
// half of such a layer's time. Here each work-item transforms the kernels of its rows, WINO_KS input channels at a
// time, into local memory (ul, in L2) and multiplies them there against V's panels; the running sums of all 36
// planes wait in local memory too (pl). U is the same (common.cl wino_weights16), and the sums are those of
// gemm_cpu_direct_a in the same order (k ascending, f32): the products are identical bit for bit.
// w: the weights [O][C][3][3] in the storage dtype (wdt 0 f32, 1 f16, 2 bf16: this f32 program runs every
// storage's product), read as widened exactly. v: winograd_input's B panels (plane e at e * v_bs floats, k-blocked
// by kc, nblocks panels). m: the products, plane e at e * m_bs floats, row o at o * ldm, for winograd_output.
// C is a multiple of 16 (and so is every k-block). Grid: (panels, ceil(ceil(O / MR) / mgroup)), local size 1;
// ul: 36 x mgroup * MR x WINO_KS floats, pl: 36 x mgroup x MR x NR floats.
#define WINO_KS 32u
#define WINO_AROW(r) const __local float* al##r = ua + r * WINO_KS;
#define WINO_FMA_L(r) GEMM_FMA_V(r, al##r[ka])
#define WINO_STORE_V(r, v) \
  if (m0 + r < O) vstore16(acc##r##_##v, 0, mp + (ulong)(m0 + r) * ldm + n0 + 16u * v);
#define WINO_STORE(r) GEMM_VECS(WINO_STORE_V, r)
__kernel CPU_ONE_ITEM void winograd_fused_cpu(__global const void* w, uint wdt, __global const float* v, ulong v_bs,
                                              uint nblocks, uint kc, __global float* m, ulong m_bs, ulong ldm,
                                              __local float* ul, __local float* pl, uint mgroup, uint O, uint C) {
  const uint nb = (uint)get_global_id(0);
  const uint n0 = nb * GEMM_NR;
  const uint mblocks = (O + GEMM_MR - 1) / GEMM_MR;
  const uint mb0 = (uint)get_global_id(1) * mgroup;
  const uint mb_end = min(mblocks, mb0 + mgroup);
  const uint rows = (mb_end - mb0) * GEMM_MR;
  for (uint k0 = 0; k0 < C; k0 += kc) {
    const uint kcb = min(kc, C - k0);
    for (uint s0 = 0; s0 < kcb; s0 += WINO_KS) {
      const uint ks = min(WINO_KS, kcb - s0);
      // U of the work-item's rows for input channels [k0 + s0, + ks): ul[(e * rows + row) * WINO_KS + c].
      // Rows past O transform row O - 1 (their sums are never stored).
      for (uint r = 0; r < rows; ++r) {
        const ulong o = min(mb0 * GEMM_MR + r, O - 1u);
        for (uint c = 0; c < ks; c += 16u) {
          const ulong off = (o * C + k0 + s0 + c) * 9u;
          float gs[144];
          for (int i = 0; i < 9; ++i) {
            float16 x;
            if (wdt == 1u) {
              x = vload_half16(0, (__global const half*)w + off + 16 * i);
            } else if (wdt == 2u) {
              x = as_float16(convert_uint16(vload16(0, (__global const ushort*)w + off + 16 * i)) << 16);
            } else {
              x = vload16(0, (__global const float*)w + off + 16 * i);
            }
            vstore16(x, 0, gs + 16 * i);
          }
          float16 uv[36];
          wino_weights16(gs, uv);
          for (uint e = 0; e < 36u; ++e) vstore16(uv[e], 0, ul + (e * rows + r) * WINO_KS + c);
        }
      }
      const bool first = k0 == 0 && s0 == 0, last = k0 + kcb == C && s0 + ks == kcb;
      for (uint e = 0; e < 36u; ++e) {
        const __global float* bq = v + e * v_bs + ((ulong)k0 * nblocks + (ulong)nb * kcb + s0) * GEMM_NR;
        __global float* mp = m + e * m_bs;
        for (uint mb = mb0; mb < mb_end; ++mb) {
          const uint m0 = mb * GEMM_MR;
          const __local float* ua = ul + (e * rows + (mb - mb0) * GEMM_MR) * WINO_KS;
          __local float* pp = pl + (e * mgroup + (mb - mb0)) * (GEMM_MR * GEMM_NR);
          GEMM_ROWS(WINO_AROW)
          GEMM_ROWS(GEMM_DECL)
          if (!first) {
            GEMM_ROWS(GEMM_LOAD)
          }
          for (uint k = 0; k < ks; k += 4u) {
            GEMM_K_STEPS4(bq, k, k, WINO_FMA_L)
          }
          if (last) {
            GEMM_ROWS(WINO_STORE)
          } else {
            GEMM_ROWS(GEMM_SAVE)
          }
        }
      }
    }
  }
}
#undef WINO_KS
#undef WINO_AROW
#undef WINO_FMA_L
#undef WINO_STORE_V
#undef WINO_STORE
#endif  // !GPU_KERNELS && !GEMM_PACKED_A && STORE_F32

#if !defined(GPU_KERNELS) && !defined(GEMM_PACKED_A) && !defined(STORE_F32)
// Half-precision A converted to f32 rows once per call (gemm_a_rows_to_f32)
// instead of in the GEMM's inner loop, once per column panel: on a 2-core Zen 5
// the f16 linears took 1.2-1.3x the f32 ones' time that way (bench_ops --shapes
// sd15 --dtype f16). The conversion is exact: the same sums, bit for bit.
// dst[(b*M + m)*K + k] = A element (m, k) of batch b, at src[off + b*bs + m*rs + k].
// Grid: (M, batch), a row per work-item.
__kernel void gemm_a_rows_to_f32(__global const store_t* src, ulong off, ulong bs, ulong rs, __global float* dst,
                                 uint M, uint K) {
  const uint m = (uint)get_global_id(0);
  const ulong b = get_global_id(1);
  const __global store_t* s = src + off + b * bs + (ulong)m * rs;
  __global float* d = dst + (b * M + m) * (ulong)K;
  uint k = 0;
  for (; k + 16u <= K; k += 16u) vstore16(ld16(s, k), 0, d + k);
  for (; k < K; ++k) d[k] = ld(s, k);
}
// Here, after conv_cpu and gemm_cpu_direct_a, which read A in the storage dtype: A becomes f32 rows.
#undef GEMM_A_T
#undef GEMM_LD_A
#undef GEMM_A_STEPS
#define GEMM_A_T float
#define GEMM_LD_A(p, i) ((p)[(i)])
#define GEMM_A_STEPS GEMM_DIRECT_K4
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_f32a, GEMM_ROWS(GEMM_STORE))
#if GEMM_NV <= 2
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_f32a_geglu, GEMM_GEGLU_BLOCK)
#endif
#endif  // !GPU_KERNELS && !GEMM_PACKED_A && !STORE_F32

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

// ---------------------------------------------------------------------------
// GPU style: f32 accumulation from the stored dtype through local tiles.
// A element (m, k): a[a_off + b*a_bs + m*lda + k]; B element (k, n):
// bm[b_off + b*b_bs + k*ldbk + n*ldbn]. Local size (TS_N/WPT_N, TS_M/WPT_M),
// grid (ceil(N/TS_N) * TS_N/WPT_N, ceil(M/TS_M) * TS_M/WPT_M, batch).
// Each work-item owns WPT_M x WPT_N outputs (TILED_ROW, TILED_COL below: a
// warp's local reads are broadcasts or consecutive words or float4s). The next
// k-tile's elements are loaded into registers while the current one is
// multiplied (the global loads' latency hides behind the FMAs). Local rows are
// padded so that the transposed stores spread over the banks.

#ifndef TS_M
#define TS_M 64
#endif
#ifndef TS_N
#define TS_N 64
#endif
#ifndef TS_K
#define TS_K 16
#endif
#ifndef WPT_M
#define WPT_M 4
#endif
#ifndef WPT_N
#define WPT_N 4
#endif
#define RTS_M (TS_M / WPT_M)
#define RTS_N (TS_N / WPT_N)
// Where each work-item's WPT_M x WPT_N outputs lie in the tile. With register
// blocks in multiples of 4 (TILED_VEC): rows in runs of 4, (i / 4) * 4 RTS_M +
// 4 tm + i % 4 (columns likewise), so each k step reads a work-item's A and B
// values from local memory as float4s (WPT_M / 4 + WPT_N / 4 loads instead of
// WPT_M + WPT_N); local rows are then padded by 4 floats (16-byte aligned).
// Otherwise rows tm + i RTS_M and columns tn + j RTS_N, rows padded by one.
#if WPT_M % 4 == 0 && WPT_N % 4 == 0
#define TILED_VEC 1
#define TS_PM (TS_M + 4)
#define TS_PN (TS_N + 4)
#define TILED_ROW(tm, i) ((i) / 4u * (RTS_M * 4u) + (tm) * 4u + (i) % 4u)
#define TILED_COL(tn, j) ((j) / 4u * (RTS_N * 4u) + (tn) * 4u + (j) % 4u)
#else
#define TILED_VEC 0
#define TS_PM (TS_M + 1)
#define TS_PN (TS_N + 1)
#define TILED_ROW(tm, i) ((tm) + (i) * RTS_M)
#define TILED_COL(tn, j) ((tn) + (j) * RTS_N)
#endif
#define TILE_THREADS (RTS_M * RTS_N)
#define LOADS_A (TS_M * TS_K / TILE_THREADS)
#define LOADS_B (TS_N * TS_K / TILE_THREADS)
#if LOADS_A * TILE_THREADS != TS_M * TS_K || LOADS_B * TILE_THREADS != TS_N * TS_K || TILE_THREADS % TS_N != 0
#error "gemm_tiled: the tiles must be a whole number of loads per work-item, each in one column of B"
#endif

// Where B comes from: a stored matrix (gemm_tiled), or the input image of a
// convolution read on the fly (conv_implicit_gemm), so no column matrix is
// ever stored. The convolution's k loop runs over blocks of TS_K input
// channels and, inside each, over the KH*KW taps: a k-tile is TS_K channels
// at one tap (ky, kx), B element (kk, n) = x[cb + kk][oy*stride + ky - pad]
// [ox*stride + kx - pad] (zero outside the image), and A comes tap-major,
// w[o][ky*KW + kx][c] (the host transposes the weights), so the tile's A rows
// are TS_K consecutive values. Each work-item's B column is checked against
// the image once per tap and its loads walk the channels by adding H*W.
// With fewer than TS_K channels (a first layer's 3 or 4) such tiles would be
// mostly padding: the k-tiles then run over the tap-major k = tap*C + c
// straight, each element's tap and channel found by division.
typedef struct {
  uint c, h, w, kh, kw, stride, pad, ow;
} ConvGeom;

// The k-tile after (cb, ky, kx) in that order: the next tap, after the last
// tap the first one of the next block of `block` channels (tap = ky*KW + kx).
typedef struct {
  uint cb, ky, kx;
} ConvTile;
static inline ConvTile conv_next_tile(ConvTile t, uint kh, uint kw, uint block) {
  if (++t.kx == kw) {
    t.kx = 0;
    if (++t.ky == kh) {
      t.ky = 0;
      t.cb += block;
    }
  }
  return t;
}

static inline __attribute__((always_inline)) void gemm_tiled_body(
    __local float (*as)[TS_PM], __local float (*bs)[TS_PN], __global const store_t* a, ulong lda,
    __global const store_t* bm, ulong ldbk, ulong ldbn, const int implicit, ConvGeom g,
    __global const store_t* bias, int bias_mode, __global store_t* c, ulong cbase, ulong ldc, uint M, uint N, uint K,
    float alpha) {
  const uint tn = (uint)get_local_id(0), tm = (uint)get_local_id(1);
  const uint tid = tm * RTS_N + tn;
  const uint n0 = (uint)get_group_id(0) * TS_N, m0 = (uint)get_group_id(1) * TS_M;
  // B's consecutive work-items walk n where B is row-major (ldbn == 1) or an
  // image (consecutive output positions), else k.
  const bool b_rows = implicit || ldbn == 1u;

  float acc[WPT_M][WPT_N];
#pragma unroll
  for (uint i = 0; i < WPT_M; ++i)
#pragma unroll
    for (uint j = 0; j < WPT_N; ++j) acc[i][j] = 0.0f;

  float ra[LOADS_A], rb[LOADS_B];
  // Convolution: every B load of a work-item is in the same column (b_rows:
  // n = n0 + tid % TS_N, as TILE_THREADS is a multiple of TS_N or the loads
  // stride by whole rows), whose image origin is computed once here.
  const uint bn = n0 + tid % TS_N;
  const uint hw = g.h * g.w;
  int iy0 = 0, ix0 = 0;
  if (implicit) {
    const uint oy = bn / g.ow, ox = bn - oy * g.ow;
    iy0 = (int)(oy * g.stride) - (int)g.pad;
    ix0 = (int)(ox * g.stride) - (int)g.pad;
  }
  const uint taps = g.kh * g.kw;
  const bool blocks = implicit && g.c >= TS_K;  // else k-tiles over k straight
  const uint tiles = blocks ? (g.c + TS_K - 1u) / TS_K * taps : (K + TS_K - 1u) / TS_K;
  // Tile (cb, tap) of the convolution; k0 = t * TS_K of the GEMM.
#define GEMM_TILED_LOAD(K0, CB, TAP, KY, KX)                                                                    \
  {                                                                                                             \
    _Pragma("unroll") for (uint l = 0; l < LOADS_A; ++l) {                                                      \
      const uint i = tid + l * TILE_THREADS, kk = i % TS_K, m = m0 + i / TS_K;                                  \
      if (blocks) {                                                                                             \
        const uint ch = (CB) + kk;                                                                              \
        const bool in = m < M && ch < g.c;                                                                      \
        const float v = ld(a, in ? m * lda + (TAP) * g.c + ch : 0u);                                            \
        ra[l] = in ? v : 0.0f;                                                                                  \
      } else {                                                                                                  \
        const uint k = (K0) + kk;                                                                               \
        ra[l] = (m < M && k < K) ? ld(a, m * lda + k) : 0.0f;                                                   \
      }                                                                                                         \
    }                                                                                                           \
    if (blocks) {                                                                                               \
      const int iy = iy0 + (int)(KY), ix = ix0 + (int)(KX);                                                     \
      const bool inside = bn < N && (uint)iy < g.h && (uint)ix < g.w;                                           \
      const uint at = inside ? (uint)iy * g.w + (uint)ix : 0u;                                                  \
      _Pragma("unroll") for (uint l = 0; l < LOADS_B; ++l) {                                                    \
        const uint ch = (CB) + (tid + l * TILE_THREADS) / TS_N;                                                 \
        const bool in = inside && ch < g.c;                                                                     \
        const float v = ld(bm, in ? (ulong)ch * hw + at : 0u);                                                  \
        rb[l] = in ? v : 0.0f;                                                                                  \
      }                                                                                                         \
    } else {                                                                                                    \
      _Pragma("unroll") for (uint l = 0; l < LOADS_B; ++l) {                                                    \
        const uint i = tid + l * TILE_THREADS;                                                                  \
        const uint kk = b_rows ? i / TS_N : i % TS_K, nn = b_rows ? i % TS_N : i / TS_K;                        \
        const uint n = n0 + nn, k = (K0) + kk;                                                                  \
        if (implicit) {                                                                                         \
          const uint tp = k / g.c, ch = k - tp * g.c, ty = tp / g.kw;                                           \
          const int iy = iy0 + (int)ty, ix = ix0 + (int)(tp - ty * g.kw);                                       \
          const bool in = n < N && k < K && (uint)iy < g.h && (uint)ix < g.w;                                   \
          const float v = ld(bm, in ? (ulong)ch * hw + (uint)iy * g.w + (uint)ix : 0u);                         \
          rb[l] = in ? v : 0.0f;                                                                                \
        } else {                                                                                                \
          rb[l] = (n < N && k < K) ? ld(bm, k * ldbk + n * ldbn) : 0.0f;                                        \
        }                                                                                                       \
      }                                                                                                         \
    }                                                                                                           \
  }
  ConvTile tile = {0u, 0u, 0u};
  GEMM_TILED_LOAD(0u, 0u, 0u, 0u, 0u)

  for (uint t = 0; t < tiles; ++t) {
#pragma unroll
    for (uint l = 0; l < LOADS_A; ++l) {
      const uint i = tid + l * TILE_THREADS;
      as[i % TS_K][i / TS_K] = ra[l];
    }
#pragma unroll
    for (uint l = 0; l < LOADS_B; ++l) {
      const uint i = tid + l * TILE_THREADS;
      if (b_rows)
        bs[i / TS_N][i % TS_N] = rb[l];
      else
        bs[i % TS_K][i / TS_K] = rb[l];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (blocks) tile = conv_next_tile(tile, g.kh, g.kw, TS_K);
    if (t + 1u < tiles) GEMM_TILED_LOAD((t + 1u) * TS_K, tile.cb, tile.ky * g.kw + tile.kx, tile.ky, tile.kx)
#pragma unroll
    for (uint kk = 0; kk < TS_K; ++kk) {
      float av[WPT_M], bv[WPT_N];
#if TILED_VEC
#pragma unroll
      for (uint i = 0; i < WPT_M; i += 4u) {
        const float4 v = *(__local const float4*)&as[kk][TILED_ROW(tm, i)];
        av[i] = v.s0, av[i + 1u] = v.s1, av[i + 2u] = v.s2, av[i + 3u] = v.s3;
      }
#pragma unroll
      for (uint j = 0; j < WPT_N; j += 4u) {
        const float4 v = *(__local const float4*)&bs[kk][TILED_COL(tn, j)];
        bv[j] = v.s0, bv[j + 1u] = v.s1, bv[j + 2u] = v.s2, bv[j + 3u] = v.s3;
      }
#else
#pragma unroll
      for (uint i = 0; i < WPT_M; ++i) av[i] = as[kk][TILED_ROW(tm, i)];
#pragma unroll
      for (uint j = 0; j < WPT_N; ++j) bv[j] = bs[kk][TILED_COL(tn, j)];
#endif
#pragma unroll
      for (uint i = 0; i < WPT_M; ++i)
#pragma unroll
        for (uint j = 0; j < WPT_N; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#undef GEMM_TILED_LOAD

#pragma unroll
  for (uint i = 0; i < WPT_M; ++i) {
    const uint m = m0 + TILED_ROW(tm, i);
    if (m >= M) continue;
#pragma unroll
    for (uint j = 0; j < WPT_N; ++j) {
      const uint n = n0 + TILED_COL(tn, j);
      if (n >= N) continue;
      const float bv = bias_mode == BIAS_COL ? ld(bias, n) : bias_mode == BIAS_ROW ? ld(bias, m) : -0.0f;
      st(c, cbase + (ulong)m * ldc + n, fma(alpha, acc[i][j], bv));
    }
  }
}

// The CPU kernel family never launches the tiled kernels (-DCPU_KERNELS,
// gemm.cpp): left out of its programs, they cost it no compile time (PoCL
// compiles every kernel of a program when the cache asks for its binary: half
// of this program's cold build).
#if !defined(CPU_KERNELS)
__kernel __attribute__((reqd_work_group_size(RTS_N, RTS_M, 1))) void gemm_tiled(
    __global const store_t* a, ulong a_off, ulong a_bs, ulong lda, __global const store_t* bm, ulong b_off,
    ulong b_bs, ulong ldbk, ulong ldbn, __global const store_t* bias, ulong bias_off, int bias_mode,
    __global store_t* c, ulong c_off, ulong c_bs, ulong ldc, uint M, uint N, uint K, float alpha) {
  __local float as[TS_K][TS_PM] __attribute__((aligned(16)));
  __local float bs[TS_K][TS_PN] __attribute__((aligned(16)));
  const ulong bt = get_global_id(2);
  const ConvGeom none = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 1u};
  gemm_tiled_body(as, bs, a + a_off + bt * a_bs, lda, bm + b_off + bt * b_bs, ldbk, ldbn, 0, none, bias + bias_off,
                  bias_mode, c, c_off + bt * c_bs, ldc, M, N, K, alpha);
}

// Convolution as implicit GEMM: C[img] (O x OH*OW) = W (O x C*KH*KW) . im2col(x[img]) + bias
// per output row. Grid as gemm_tiled's with the images as the batch.
__kernel __attribute__((reqd_work_group_size(RTS_N, RTS_M, 1))) void conv_implicit_gemm(
    __global const store_t* w, __global const store_t* x, ulong x_bs, __global const store_t* bias, int bias_mode,
    __global store_t* out, ulong out_bs, uint O, uint C, uint H, uint W, uint KH, uint KW, uint stride, uint pad,
    uint OH, uint OW) {
  __local float as[TS_K][TS_PM] __attribute__((aligned(16)));
  __local float bs[TS_K][TS_PN] __attribute__((aligned(16)));
  const ulong img = get_global_id(2);
  const ConvGeom g = {C, H, W, KH, KW, stride, pad, OW};
  const uint K = C * KH * KW, N = OH * OW;
  gemm_tiled_body(as, bs, w, K, x + img * x_bs, 0, 1, 1, g, bias, bias_mode, out, img * out_bs, N, O, N, K, 1.0f);
}
#endif  // !CPU_KERNELS

#if defined(GEMM_MMA)
// ---------------------------------------------------------------------------
// NVIDIA tensor cores (sm_80+, -DGEMM_MMA; built only where gemm.cpp selects
// it): gemm_mma and conv_implicit_mma take gemm_tiled's and
// conv_implicit_gemm's arguments (conv_implicit_mma's weights tap-major, see
// there) and compute the same C with f16 operands and f32 accumulation on
// `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` (inline PTX; NVIDIA's
// OpenCL has no cl_khr_fp16, so the halves travel as raw ushort words and
// pairs of them as uint). Every product of two halves is exact in f32; the
// sums run in f32 in the tensor core's order, not k ascending. The epilogue
// is gemm_tiled's (fma(alpha, acc, bias), one rounding to f16 by st()).
//
// Work-group: 1-D, MMA_WARPS_M x MMA_WARPS_N warps of 32 (warp w at rows
// (w / MMA_WARPS_N) * 64, columns (w % MMA_WARPS_N) * 32 of the block); each
// warp computes 64 x 32 of C as 4 x 4 m16n8 fragments. Block tile MMA_TM x
// MMA_TN (128 x 128 with 2 x 4 warps; 64 x 128 with 1 x 4), k-tile 32. A is
// staged in local memory as [m][k] and B as [n][k], both as k-pairs (uint,
// lower k in the low half-word), MMA_PITCH uints a row: 16 pairs + 8 padding.
// Within each group of 8 pairs the pairs p and p + 4 sit side by side (slot
// 2 (p % 4) + p / 4), so a work-item reads the two pairs a fragment takes
// from one row as one 64-bit load; and the pair slots of a row are permuted
// by its (row / 4) % 4 (mma_slot), so that those loads and the image tile's
// 64-bit stores (conv) hit every bank once. The next k-tile is read into
// registers while the current one is multiplied. Elements outside M, N, K
// (and, for the convolution, the image and its channels) load as +0: the
// padding products are 0 and padding rows/columns are never stored.
// Fragment layouts (m16n8k16, g = lane >> 2, t = lane & 3):
//   a0 = A[g][2t,2t+1]  a1 = A[g+8][2t,2t+1]  a2 = A[g][2t+8,2t+9]  a3 = A[g+8][2t+8,2t+9]
//   b0 = B[2t,2t+1][g]  b1 = B[2t+8,2t+9][g]
//   d0,d1 = D[g][2t,2t+1]  d2,d3 = D[g+8][2t,2t+1]

#if !defined(STORE_F16)
#error "GEMM_MMA: the tensor-core kernels take f16 storage"
#endif
#ifndef MMA_WARPS_M
#define MMA_WARPS_M 2
#endif
#ifndef MMA_WARPS_N
#define MMA_WARPS_N 4
#endif
#define MMA_THREADS (32 * MMA_WARPS_M * MMA_WARPS_N)
#define MMA_TM (64 * MMA_WARPS_M)
#define MMA_TN (32 * MMA_WARPS_N)
#define MMA_TK 32
#define MMA_KP (MMA_TK / 2)  // k-pairs per tile row
#define MMA_PITCH (MMA_KP + 8)
#define MMA_LOADS_A (MMA_TM * MMA_KP / MMA_THREADS)
#define MMA_LOADS_B (MMA_TN * MMA_KP / MMA_THREADS)
#if MMA_LOADS_A * MMA_THREADS != MMA_TM * MMA_KP || MMA_LOADS_B * MMA_THREADS != MMA_TN * MMA_KP
#error "gemm_mma: the tiles must be a whole number of loads per work-item"
#endif

#if !defined(MMA_PTX) && !defined(MMA_EMULATE)
#error "GEMM_MMA: give -DMMA_PTX (NVIDIA) or -DMMA_EMULATE (tests)"
#endif

// The slot of k-pair p (0..15) in local row `row` (comment above).
static inline uint mma_slot(uint row, uint p) {
  return (p & ~7u) | ((((p & 3u) << 1) | ((p >> 2) & 1u)) ^ (((row >> 2) & 3u) << 1));
}

// The pair (k, k+1) of row m of A, +0 past M or K. words: the pair is one
// aligned 32-bit word (A's offset, lda and K even; k is even).
static inline uint mma_pair_a(__global const ushort* a, ulong lda, const bool words, uint m, uint k, uint M, uint K) {
  if (m >= M || k >= K) return 0u;
  if (words) return ((__global const uint*)a)[(m * lda + k) >> 1];
  __global const ushort* row = a + m * lda;
  return (uint)row[k] | (k + 1u < K ? (uint)row[k + 1u] << 16 : 0u);
}

// The pair (k, k+1) of column n of B, +0 past N or K. words: as for A (B's k
// is contiguous: ldbk 1, with the offset, ldbn and K even).
static inline uint mma_pair_b(__global const ushort* bm, ulong ldbk, ulong ldbn, const bool words, uint k, uint n,
                              uint N, uint K) {
  if (n >= N || k >= K) return 0u;
  const ulong col = n * ldbn;
  if (words) return ((__global const uint*)bm)[(col + k) >> 1];
  return (uint)bm[col + k * ldbk] | (k + 1u < K ? (uint)bm[col + (k + 1u) * ldbk] << 16 : 0u);
}

typedef __local uint (*MmaTile)[MMA_PITCH];

// The local tiles' product into acc: the warp's 64 x 32 of C over one k-tile.
static inline __attribute__((always_inline)) void mma_tile_product(float (*acc)[4][4], MmaTile as, MmaTile bs,
                                                                   __local uint* mma_x, uint wm, uint wn, uint g8,
                                                                   uint t4) {
#if defined(MMA_EMULATE)
  // One loop around the emulated mma.sync (two barriers each): PoCL takes minutes to compile
  // barriers nested three loops deep. Each (i, j) still takes its k16 steps in ascending order.
  for (uint q = 0; q < MMA_KP / 8u * 16u; ++q) {
    const uint kp = q / 16u * 8u, i = q / 4u % 4u, j = q % 4u;
    const uint r = wm + i * 16u + g8, r8 = r + 8u, col = wn + j * 8u + g8;
    const uint af[4] = {as[r][mma_slot(r, kp + t4)], as[r8][mma_slot(r8, kp + t4)], as[r][mma_slot(r, kp + 4u + t4)],
                        as[r8][mma_slot(r8, kp + 4u + t4)]};
    const uint bf[2] = {bs[col][mma_slot(col, kp + t4)], bs[col][mma_slot(col, kp + 4u + t4)]};
    MMA_16816(acc[i][j], af, bf, mma_x);
  }
#else
#pragma unroll
  for (uint kp = 0; kp < MMA_KP; kp += 8u) {  // one k16 step = 8 pairs
    uint af[4][4], bf[4][2];
#pragma unroll
    for (uint i = 0; i < 4u; ++i) {
      const uint r = wm + i * 16u + g8;
      // Pairs kp + t4 and kp + 4 + t4 of a row are one 64-bit word (mma_slot).
      const uint2 lo = *(__local const uint2*)&as[r][mma_slot(r, kp + t4)];
      const uint2 hi = *(__local const uint2*)&as[r + 8u][mma_slot(r + 8u, kp + t4)];
      af[i][0] = lo.x;
      af[i][1] = hi.x;
      af[i][2] = lo.y;
      af[i][3] = hi.y;
    }
#pragma unroll
    for (uint j = 0; j < 4u; ++j) {
      const uint col = wn + j * 8u + g8;
      const uint2 b = *(__local const uint2*)&bs[col][mma_slot(col, kp + t4)];
      bf[j][0] = b.x;
      bf[j][1] = b.y;
    }
#pragma unroll
    for (uint i = 0; i < 4u; ++i)
#pragma unroll
      for (uint j = 0; j < 4u; ++j) MMA_16816(acc[i][j], af[i], bf[j], mma_x);
  }
#endif
}

// C = alpha acc + bias for the warp's fragments inside M x N, rounded once.
static inline __attribute__((always_inline)) void mma_store(float (*acc)[4][4], __global const store_t* bias,
                                                            int bias_mode, __global store_t* c, ulong cbase, ulong ldc,
                                                            uint M, uint N, float alpha, uint m0, uint n0, uint wm,
                                                            uint wn, uint g8, uint t4) {
#pragma unroll
  for (uint i = 0; i < 4u; ++i) {
#pragma unroll
    for (uint h = 0; h < 2u; ++h) {
      const uint m = m0 + wm + i * 16u + g8 + h * 8u;
      if (m >= M) continue;
#pragma unroll
      for (uint j = 0; j < 4u; ++j) {
#pragma unroll
        for (uint e = 0; e < 2u; ++e) {
          const uint n = n0 + wn + j * 8u + 2u * t4 + e;
          if (n >= N) continue;
          const float bv = bias_mode == BIAS_COL ? ld(bias, n) : bias_mode == BIAS_ROW ? ld(bias, m) : -0.0f;
          st(c, cbase + (ulong)m * ldc + n, fma(alpha, acc[i][j][2u * h + e], bv));
        }
      }
    }
  }
}

#define MMA_ZERO_ACC(acc)             \
  _Pragma("unroll") for (uint i = 0; i < 4u; ++i) \
    _Pragma("unroll") for (uint j = 0; j < 4u; ++j) \
      _Pragma("unroll") for (uint e = 0; e < 4u; ++e) acc[i][j][e] = 0.0f

// gemm_tiled's arguments. Local size (MMA_THREADS), grid (ceil(N/MMA_TN) * MMA_THREADS, ceil(M/MMA_TM), batch).
__kernel __attribute__((reqd_work_group_size(MMA_THREADS, 1, 1))) void gemm_mma(
    __global const store_t* a_, ulong a_off, ulong a_bs, ulong lda, __global const store_t* b_, ulong b_off,
    ulong b_bs, ulong ldbk, ulong ldbn, __global const store_t* bias, ulong bias_off, int bias_mode,
    __global store_t* c, ulong c_off, ulong c_bs, ulong ldc, uint M, uint N, uint K, float alpha) {
  __local uint as[MMA_TM][MMA_PITCH] __attribute__((aligned(16)));
  __local uint bs[MMA_TN][MMA_PITCH] __attribute__((aligned(16)));
  __local uint mma_x[MMA_X_WORDS(MMA_THREADS)];
  const ulong bt = get_global_id(2);
  // Pairs (k, k+1) are read as one 32-bit word where they are aligned words.
  const ulong a0 = a_off + bt * a_bs, b0 = b_off + bt * b_bs;
  const bool a_words = ((a0 | lda | K) & 1u) == 0u, b_words = ldbk == 1u && ((b0 | ldbn | K) & 1u) == 0u;
  __global const ushort* const a = (__global const ushort*)a_ + a0;
  __global const ushort* const bm = (__global const ushort*)b_ + b0;
  const uint tid = (uint)get_local_id(0);
  const uint lane = tid & 31u, warp = tid >> 5;
  const uint g8 = lane >> 2, t4 = lane & 3u;
  const uint wm = (warp / MMA_WARPS_N) * 64u, wn = (warp % MMA_WARPS_N) * 32u;
  const uint n0 = (uint)get_group_id(0) * MMA_TN, m0 = (uint)get_group_id(1) * MMA_TM;
  // B's consecutive work-items walk n where B is row-major (ldbn == 1), else k.
  const bool b_rows = ldbn == 1u;

  float acc[4][4][4];
  MMA_ZERO_ACC(acc);
  uint ra[MMA_LOADS_A], rb[MMA_LOADS_B];
#define GEMM_MMA_LOAD(K0)                                                                                   \
  {                                                                                                         \
    _Pragma("unroll") for (uint l = 0; l < MMA_LOADS_A; ++l) {                                              \
      const uint i = tid + l * MMA_THREADS;                                                                 \
      ra[l] = mma_pair_a(a, lda, a_words, m0 + i / MMA_KP, (K0) + 2u * (i % MMA_KP), M, K);                 \
    }                                                                                                       \
    _Pragma("unroll") for (uint l = 0; l < MMA_LOADS_B; ++l) {                                              \
      const uint i = tid + l * MMA_THREADS;                                                                 \
      const uint kp = b_rows ? i / MMA_TN : i % MMA_KP, nn = b_rows ? i % MMA_TN : i / MMA_KP;              \
      rb[l] = mma_pair_b(bm, ldbk, ldbn, b_words, (K0) + 2u * kp, n0 + nn, N, K);                           \
    }                                                                                                       \
  }
  GEMM_MMA_LOAD(0u)
  for (uint k0 = 0; k0 < K; k0 += MMA_TK) {
#pragma unroll
    for (uint l = 0; l < MMA_LOADS_A; ++l) {
      const uint i = tid + l * MMA_THREADS, r = i / MMA_KP;
      as[r][mma_slot(r, i % MMA_KP)] = ra[l];
    }
#pragma unroll
    for (uint l = 0; l < MMA_LOADS_B; ++l) {
      const uint i = tid + l * MMA_THREADS;
      const uint r = b_rows ? i % MMA_TN : i / MMA_KP, kp = b_rows ? i / MMA_TN : i % MMA_KP;
      bs[r][mma_slot(r, kp)] = rb[l];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (k0 + MMA_TK < K) GEMM_MMA_LOAD(k0 + MMA_TK)
    mma_tile_product(acc, as, bs, mma_x, wm, wn, g8, t4);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#undef GEMM_MMA_LOAD
  mma_store(acc, bias + bias_off, bias_mode, c, c_off + bt * c_bs, ldc, M, N, alpha, m0, n0, wm, wn, g8, t4);
}

// The convolution as an implicit GEMM on the tensor cores: C[img] (O x OH*OW)
// = W . im2col(x[img]) + bias per output channel, conv_implicit_gemm's
// arguments, grid as gemm_mma's with the images as the batch. The k loop runs
// over blocks of 32 input channels and, inside each, over the KH*KW taps, so
// a k-tile is 32 channels at one tap: its B tile is the image shifted by the
// tap, each work-item's column (output position) is checked against the image
// once per tap, and its loads walk the channels by adding H*W (consecutive
// work-items read consecutive positions); the 9 tiles of a channel block read
// the same image rows. The weights come tap-major, w[o][ky*KW + kx][c] (the
// host transposes them), so a tile's A rows are 32 consecutive halves, read as
// 32-bit pairs where C is even. Each work-item's B pairs are one column's
// consecutive channel pairs, stored to local memory as 64-bit words. The host
// gives it convolutions of at least 32 input channels (fewer would make the
// blocks mostly padding: conv_implicit_gemm takes those).
#define MMA_B_PARTS (MMA_THREADS / MMA_TN)     // work-items per column of the B tile
#define MMA_B_PAIRS (MMA_KP / MMA_B_PARTS)     // pairs each of them loads
#if MMA_B_PARTS * MMA_TN != MMA_THREADS || MMA_B_PAIRS % 8 != 0
#error "conv_implicit_mma: each work-item must load whole groups of 8 pairs of one column"
#endif
__kernel __attribute__((reqd_work_group_size(MMA_THREADS, 1, 1))) void conv_implicit_mma(
    __global const store_t* w_, __global const store_t* x_, ulong x_bs, __global const store_t* bias, int bias_mode,
    __global store_t* out, ulong out_bs, uint O, uint C, uint H, uint W, uint KH, uint KW, uint stride, uint pad,
    uint OH, uint OW) {
  __local uint as[MMA_TM][MMA_PITCH] __attribute__((aligned(16)));
  __local uint bs[MMA_TN][MMA_PITCH] __attribute__((aligned(16)));
  __local uint mma_x[MMA_X_WORDS(MMA_THREADS)];
  const ulong img = get_global_id(2);
  __global const ushort* const w = (__global const ushort*)w_;
  __global const ushort* const x = (__global const ushort*)x_ + img * x_bs;
  const uint taps = KH * KW, K = C * taps, N = OH * OW, hw = H * W;
  const bool a_words = (C & 1u) == 0u;  // then every pair (c, c+1) at a tap is an aligned word
  const uint tid = (uint)get_local_id(0);
  const uint lane = tid & 31u, warp = tid >> 5;
  const uint g8 = lane >> 2, t4 = lane & 3u;
  const uint wm = (warp / MMA_WARPS_N) * 64u, wn = (warp % MMA_WARPS_N) * 32u;
  const uint n0 = (uint)get_group_id(0) * MMA_TN, m0 = (uint)get_group_id(1) * MMA_TM;

  // The block's weight rows (offsets from there fit 32 bits: the host checks MMA_TM * K).
  __global const ushort* const wb = w + (ulong)min(m0, O - 1u) * K;
  // This work-item's B column and its first pair in the tile.
  const uint bcol = tid % MMA_TN, bpair = (tid / MMA_TN) * MMA_B_PAIRS;
  const uint n = n0 + bcol;
  const uint oy = n / OW, ox = n - oy * OW;
  const int iy0 = (int)(oy * stride) - (int)pad, ix0 = (int)(ox * stride) - (int)pad;

  float acc[4][4][4];
  MMA_ZERO_ACC(acc);
  uint ra[MMA_LOADS_A], rb[MMA_B_PAIRS];
  // Tile (cb, tap): channels cb .. cb + 31 at tap (ky, kx).
#define CONV_MMA_LOAD(CB, TAP, KY, KX)                                                                       \
  {                                                                                                         \
    _Pragma("unroll") for (uint l = 0; l < MMA_LOADS_A; ++l) {                                              \
      const uint i = tid + l * MMA_THREADS, m = m0 + i / MMA_KP, ch = (CB) + 2u * (i % MMA_KP);             \
      const bool in = m < O && ch < C, in_hi = in && ch + 1u < C;                                           \
      const uint at = in ? (i / MMA_KP) * K + (TAP) * C + ch : 0u;                                          \
      uint v;                                                                                               \
      if (a_words) {                                                                                        \
        v = ((__global const uint*)wb)[at >> 1];                                                            \
      } else {                                                                                              \
        const uint hi = wb[in_hi ? at + 1u : at];                                                           \
        v = (uint)wb[at] | (in_hi ? hi << 16 : 0u);                                                         \
      }                                                                                                     \
      ra[l] = in ? v : 0u;                                                                                  \
    }                                                                                                       \
    const int iy = iy0 + (int)(KY), ix = ix0 + (int)(KX);                                                   \
    const bool inside = n < N && (uint)iy < H && (uint)ix < W;                                              \
    const uint at = inside ? (uint)iy * W + (uint)ix : 0u;                                                  \
    const uint c1 = (CB) + 2u * bpair;                                                                      \
    __global const ushort* const xc = x + (ulong)min(c1, C - 1u) * hw;                                      \
    _Pragma("unroll") for (uint j = 0; j < MMA_B_PAIRS; ++j) {                                              \
      const bool lo = inside && c1 + 2u * j < C, hi = inside && c1 + 2u * j + 1u < C;                       \
      const uint vlo = xc[lo ? at + (2u * j) * hw : 0u], vhi = xc[hi ? at + (2u * j + 1u) * hw : 0u];       \
      rb[j] = (lo ? vlo : 0u) | (hi ? vhi << 16 : 0u);                                                      \
    }                                                                                                       \
  }
  const uint tiles = (C + MMA_TK - 1u) / MMA_TK * taps;
  ConvTile tile = {0u, 0u, 0u};
  CONV_MMA_LOAD(0u, 0u, 0u, 0u)
  for (uint t = 0; t < tiles; ++t) {
#pragma unroll
    for (uint l = 0; l < MMA_LOADS_A; ++l) {
      const uint i = tid + l * MMA_THREADS, r = i / MMA_KP;
      as[r][mma_slot(r, i % MMA_KP)] = ra[l];
    }
    // Pairs p and p + 4 of a group side by side: one 64-bit store each.
#pragma unroll
    for (uint j = 0; j < MMA_B_PAIRS; j += 8u)
#pragma unroll
      for (uint q = 0; q < 4u; ++q)
        *(__local uint2*)&bs[bcol][mma_slot(bcol, bpair + j + q)] = (uint2)(rb[j + q], rb[j + q + 4u]);
    barrier(CLK_LOCAL_MEM_FENCE);
    tile = conv_next_tile(tile, KH, KW, MMA_TK);
    if (t + 1u < tiles) CONV_MMA_LOAD(tile.cb, tile.ky * KW + tile.kx, tile.ky, tile.kx)
    mma_tile_product(acc, as, bs, mma_x, wm, wn, g8, t4);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#undef CONV_MMA_LOAD
  mma_store(acc, bias, bias_mode, out, img * out_bs, N, O, N, 1.0f, m0, n0, wm, wn, g8, t4);
}
#endif
