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
