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

