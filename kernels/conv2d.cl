// conv2d.cl: im2col for convolution as GEMM (kernels/matmul.cl does the sums).
// out[b][o][p] = sum_k w[o][k] * col[b][k][p] + bias[o], p = oy*OW + ox and
// k = (ci*KH + ky)*KW + kx: the GEMM's k order is the op's native summation
// order (op_args.hpp). Padding contributes zeros that are multiplied like data
// (a non-finite weight over padding gives NaN, as in the reference).
//
// conv_im2col_panels packs f32 panels of GEMM B (k-blocked by kc as
// matmul.cl lays them out) for the output positions [p0, p0 + pc) of each
// image: native accumulation, and the shapes the CPU family's conv_cpu does
// not take (gemm::runs_cpu_conv: strided, small images, deep layers); conv_cpu
// gathers the same panels inside the GEMM, and GPU style reads the columns on
// the fly (matmul/gemm_tiled.cl conv_implicit_gemm).

#ifndef GEMM_NV
#define GEMM_NV 1
#endif
#define GEMM_NR (16 * GEMM_NV)

// Geometry of one convolution, passed as a struct-free argument list:
// C, H, W input; KH, KW kernel; stride, pad; OW output width; p0 the first
// output position of the chunk and pc its length.

// Grid: (ceil(K / kpi), ceil(ceil(pc / NR) / ppi), images): each work-item writes rows [k0, k0 + kpi) of ppi
// consecutive panels. One 16-column vector per work-item was 92160 work-groups for a 1280-channel 8x8 layer, and
// their launch overheads took most of its 6.8 ms (1.4 ms now, on a 2-core Zen 3). Image b is read at x_off +
// b * x_bs and its panels start at b * dst_bs floats.
__kernel CPU_ONE_ITEM void conv_im2col_panels(__global const store_t* x, ulong x_off, ulong x_bs, __global float* dst,
                                              ulong dst_bs, uint C, uint H, uint W, uint KH, uint KW, uint stride,
                                              uint pad, uint OW, uint p0, uint pc, uint kc, uint kpi, uint ppi) {
  const ulong b = get_global_id(2);
  const uint K = C * KH * KW;
  const uint panels = (pc + GEMM_NR - 1) / GEMM_NR;
  const uint nb0 = (uint)get_global_id(1) * ppi, nb_end = min(panels, nb0 + ppi);
  const uint k0 = (uint)get_global_id(0) * kpi, k_end = min(K, k0 + kpi);
  uint kx = k0 % KW, ky = (k0 / KW) % KH, ci = k0 / (KW * KH);  // walked along with k
  const uint oy0 = (p0 + nb0 * GEMM_NR) / OW, ox0 = (p0 + nb0 * GEMM_NR) % OW;
  for (uint k = k0; k < k_end; ++k) {
    const __global store_t* xp = x + x_off + b * x_bs + (ulong)ci * H * W;
    uint oy = oy0, ox = ox0;  // walked along with the columns
    for (uint nb = nb0; nb < nb_end; ++nb) {
      __global float* d = dst + b * dst_bs + panel_row(nb, panels, k, K, kc, GEMM_NR);
      for (uint v = 0; v < GEMM_NV; ++v) {
        const uint q = nb * GEMM_NR + 16u * v;  // the vector's first column within the chunk
        vstore16(im2col_row16(xp, H, W, stride, pad, OW, oy, ox, ky, kx, q < pc ? pc - q : 0u), 0, d + 16u * v);
        ox += 16u;
        while (ox >= OW) ox -= OW, ++oy;
      }
    }
    if (++kx == KW) {
      kx = 0;
      if (++ky == KH) ky = 0, ++ci;
    }
  }
}

#if defined(CPU_KERNELS) && !defined(ACC_NATIVE)
// Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions in the CPU family with f32 accumulation (Lavin and Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2016; interpolation points 0, +-1, +-2, infinity):
//   out tile (4x4) = AT [ (G g GT) . (BT d B) ] A over the 6x6 input tile d at (4ty - pad, 4tx - pad),
// the elementwise product summed over input channels as 36 GEMMs (matmul.cl gemm_cpu_direct_a):
//   M[e] (o x tiles) = U[e] (o x c) . V[e] (c x tiles), e = 6i + j.
// 2.25 multiplications per output and input channel instead of 9. The sums are in f32 like the direct
// convolution's, but not the same sums: the transforms add and subtract up to 8x neighbouring values, so results
// differ from the direct path by a few f32 ulps of those terms (up to about 2e-5 of the largest output against
// 3e-6), and one non-finite input makes NaN over every output tile it touches where the direct path gives +-Inf
// or NaN over its 3x3 neighbourhood (winograd.cpp runs_winograd says when it runs; BackendOptions::winograd
// keeps the direct path).
//
// Each transform is written once for float and float16 (16 tiles in the vector lanes).
#define WINO_BT_COLUMN(T, d0, d1, d2, d3, d4, d5, r)        \
  do {                                                      \
    const T ba_ = (d4) - 4.0f * (d2), bb_ = (d3) - 4.0f * (d1); \
    const T bc_ = (d4) - (d2), be_ = 2.0f * ((d3) - (d1));      \
    (r)[0] = 4.0f * (d0) - 5.0f * (d2) + (d4);              \
    (r)[1] = ba_ + bb_;                                       \
    (r)[2] = ba_ - bb_;                                       \
    (r)[3] = bc_ + be_;                                       \
    (r)[4] = bc_ - be_;                                       \
    (r)[5] = 4.0f * (d1) - 5.0f * (d3) + (d5);              \
  } while (0)

#define WINO_AT_COLUMN(T, m0, m1, m2, m3, m4, m5, r)   \
  do {                                                 \
    const T ap_ = (m1) + (m2), aq_ = (m1) - (m2);         \
    const T as_ = (m3) + (m4), at_ = (m3) - (m4);         \
    (r)[0] = (m0) + ap_ + as_;                           \
    (r)[1] = aq_ + 2.0f * at_;                           \
    (r)[2] = ap_ + 4.0f * as_;                           \
    (r)[3] = aq_ + 8.0f * at_ + (m5);                    \
  } while (0)

// A 6x6 tile through a 1-D transform COLUMN (6 values in, N out) down its columns, then along the rows of the
// result: dst[N i + j] for i, j < N.
#define WINO_2D(T, COLUMN, N, src, dst)                                                                     \
  do {                                                                                                      \
    T t_[6 * (N)];                                                                                          \
    for (int c = 0; c < 6; ++c) {                                                                           \
      T r_[N];                                                                                              \
      COLUMN(T, src[c], src[6 + c], src[12 + c], src[18 + c], src[24 + c], src[30 + c], r_);                \
      for (int i = 0; i < (N); ++i) t_[6 * i + c] = r_[i];                                                  \
    }                                                                                                       \
    for (int i = 0; i < (N); ++i) {                                                                         \
      COLUMN(T, t_[6 * i], t_[6 * i + 1], t_[6 * i + 2], t_[6 * i + 3], t_[6 * i + 4], t_[6 * i + 5],      \
             (dst) + (N) * i);                                                                              \
    }                                                                                                       \
  } while (0)
// The 36 transformed inputs v[6i + j] of a 6x6 tile d[6r + c]; the 4x4 outputs y[4i + j] of the 36 products.
#define WINO_INPUT(T, d, v) WINO_2D(T, WINO_BT_COLUMN, 6, d, v)
#define WINO_OUTPUT(T, m, y) WINO_2D(T, WINO_AT_COLUMN, 4, m, y)

// U[e][o - o0][c] = (G g GT)[e] for the 3x3 kernels g = w[o][c] of output channels [o0, o0 + ob), 16 input
// channels per work-item. Grid: (ceil(C / 16), ob).
__kernel CPU_ONE_ITEM void winograd_weights(__global const store_t* w, __global float* u, uint C, uint o0, uint ob) {
  const uint c0 = 16u * (uint)get_global_id(0), o = (uint)get_global_id(1);
  const __global store_t* g = w + ((ulong)(o0 + o) * C + c0) * 9u;
  const ulong plane = (ulong)ob * C;
  __global float* dst = u + (ulong)o * C + c0;
  if (c0 + 16u <= C) {
    // The 16 kernels are 144 consecutive values: kernel j's tap t is value 9j + t.
    float gs[144];
    for (int i = 0; i < 9; ++i) vstore16(ld16(g, 16 * i), 0, gs + 16 * i);
    float16 uv[36];
    wino_weights16(gs, uv);
    for (int e = 0; e < 36; ++e) vstore16(uv[e], 0, dst + e * plane);
    return;
  }
  for (uint j = 0; c0 + j < C; ++j) {
    float gv[9], uv[36];
    for (int t = 0; t < 9; ++t) gv[t] = ld(g, 9u * j + (uint)t);
    WINO_WEIGHTS(float, gv, uv);
    for (int e = 0; e < 36; ++e) dst[e * plane + j] = uv[e];
  }
}

// Where tile q of the call lies: image, top row and left column of its 6x6 input window.
static inline void wino_tile(uint q, uint TH, uint TW, uint pad, uint* img, int* y0, int* x0) {
  const uint per_image = TH * TW;
  *img = q / per_image;
  const uint r = q - *img * per_image;
  *y0 = (int)(4u * (r / TW)) - (int)pad;
  *x0 = (int)(4u * (r % TW)) - (int)pad;
}

// 16 transformed values to V, around the caches where the compiler can (V is larger than the caches: the
// GEMM reads it back from memory either way, and an ordinary store would first read each line in).
static inline void wino_store16(__global float* p, float16 v) {
#if defined(NS_NT_STORE)
  if ((ulong)p % 64 == 0) {
    __builtin_nontemporal_store(v, (__global float16*)p);
    return;
  }
#endif
  vstore16(v, 0, p);
}

// V for tiles [t0, t0 + tc) of the call (tiles numbered image by image, row by row, TH x TW per image): input
// channel c of tile t0 + q is column q, row c of V[e]'s panels (GEMM_NR wide, k-blocked by kc as matmul.cl reads
// B, planes v_bs floats apart). Grid: (C, ceil(tc / 16)), 16 tiles per work-item in the vector lanes.
__kernel CPU_ONE_ITEM void winograd_input(__global const store_t* x, uint C, uint H, uint W, uint pad, uint TH,
                                          uint TW, uint t0, uint tc, __global float* v, ulong v_bs, uint kc) {
  const uint c = (uint)get_global_id(0), nb = (uint)get_global_id(1);
  const uint q0 = t0 + 16u * nb;
  __global float* dst = v + panel_row(nb / GEMM_NV, (tc + GEMM_NR - 1u) / GEMM_NR, c, C, kc, GEMM_NR) +
                        16u * (nb % GEMM_NV);
  uint img;
  int y0, x0;
  wino_tile(q0, TH, TW, pad, &img, &y0, &x0);
  if (16u * nb + 16u <= tc && (q0 - img * TH * TW) % TW + 16u <= TW) {
    // 16 tiles side by side in one tile row: six input rows of 66 values, each split into the tiles' columns.
    const __global store_t* xc = x + ((ulong)img * C + c) * H * W;
    const uint16 m = (uint16)(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    float16 d[36];
    for (int r = 0; r < 6; ++r) {
      const int y = y0 + r;
      if (y < 0 || y >= (int)H) {
        for (int k = 0; k < 6; ++k) d[6 * r + k] = (float16)(0.0f);
        continue;
      }
      const __global store_t* row = xc + (ulong)y * W;
      // The next channel's row, which the work-item after this one transforms.
      for (int k = 0; k < 80; k += 64 / (int)sizeof(store_t)) ns_prefetch_at(row + (ulong)H * W + x0 + k);
      const float16 a0 = row16_padded(row, x0, W), a1 = row16_padded(row, x0 + 16, W);
      const float16 a2 = row16_padded(row, x0 + 32, W), a3 = row16_padded(row, x0 + 48, W);
      const int xe = x0 + 64;
      const float e0 = xe >= 0 && xe < (int)W ? ld(row, (uint)xe) : 0.0f;
      const float e1 = xe + 1 >= 0 && xe + 1 < (int)W ? ld(row, (uint)(xe + 1)) : 0.0f;
      for (int k = 0; k < 4; ++k) {
        const float16 lo = shuffle2(a0, a1, m + (uint)k), hi = shuffle2(a2, a3, m + (uint)k);
        d[6 * r + k] = (float16)(lo.lo, hi.lo);
      }
      const float16 c0 = d[6 * r], c1 = d[6 * r + 1];
      d[6 * r + 4] = (float16)(c0.s1, c0.s2, c0.s3, c0.s4, c0.s5, c0.s6, c0.s7, c0.s8, c0.s9, c0.sa, c0.sb, c0.sc,
                               c0.sd, c0.se, c0.sf, e0);
      d[6 * r + 5] = (float16)(c1.s1, c1.s2, c1.s3, c1.s4, c1.s5, c1.s6, c1.s7, c1.s8, c1.s9, c1.sa, c1.sb, c1.sc,
                               c1.sd, c1.se, c1.sf, e1);
    }
    float16 out[36];
    WINO_INPUT(float16, d, out);
    for (int e = 0; e < 36; ++e) wino_store16(dst + (ulong)e * v_bs, out[e]);
    return;
  }
  // 16 tiles across tile rows (fewer than 16 tiles a row: the 32x32 and 16x16 layers) or images, or the chunk's
  // last tiles (fewer than 16; the lanes after the last are zero and load nothing: their tile positions lie past
  // the last image): each lane gathers its own tile's 6x6 window, and the transform runs in the vector lanes as
  // above. One tile at a time took 16x the vector path's arithmetic: the input transform was 0.59 s of a 3.75 s
  // SD 1.5 UNet call (f32, latent 64, 2-core Zen 5), 0.13 s this way (f16: 0.16 s).
  // (The loops run over all 16 lanes, a constant trip count as before the last tiles came here.)
  const uint live = min(16u, tc - 16u * nb);
  int ys[16], xs[16];
  ulong base[16];
  for (uint j = 0; j < 16u; ++j) {
    uint im;
    wino_tile(q0 + j, TH, TW, pad, &im, &ys[j], &xs[j]);  // arithmetic only: past the last image for dead lanes
    base[j] = ((ulong)im * C + c) * H * W;
  }
  // win[16 (6r + k) + j]: lane j's window; a row segment inside the image in two 4-wide loads (halves and
  // bf16 converted four at a time), bounds checked value by value only at the image's edges.
  float win[36 * 16];
  for (uint j = 0; j < 16u; ++j) {
    if (j >= live) {
      for (int e = 0; e < 36; ++e) win[16 * e + j] = 0.0f;
      continue;
    }
    const __global store_t* xc = x + base[j];
    const int xj = xs[j];
    const bool inner = xj >= 0 && xj + 6 <= (int)W;
    for (int r = 0; r < 6; ++r) {
      const int y = ys[j] + r;
      float* w = win + 16 * 6 * r + j;
      if (y < 0 || y >= (int)H) {
        for (int k = 0; k < 6; ++k) w[16 * k] = 0.0f;
        continue;
      }
      const __global store_t* row = xc + (ulong)y * W;
      if (inner) {
        const float4 a = ld4(row, xj), b = ld4(row, xj + 2);
        w[0] = a.s0, w[16] = a.s1, w[32] = a.s2, w[48] = a.s3, w[64] = b.s2, w[80] = b.s3;
      } else {
        for (int k = 0; k < 6; ++k) w[16 * k] = xj + k >= 0 && xj + k < (int)W ? ld(row, (uint)(xj + k)) : 0.0f;
      }
    }
  }
  float16 d[36];
  for (int e = 0; e < 36; ++e) d[e] = vload16(0, win + 16 * e);
  float16 out[36];
  WINO_INPUT(float16, d, out);
  for (int e = 0; e < 36; ++e) wino_store16(dst + (ulong)e * v_bs, out[e]);
}

// Output channels [o0, o0 + rows of M) for tiles [t0, t0 + tc) from M[e] (row o - o0, tile q of the chunk in
// column q; rows tcp floats, planes m_bs floats apart), plus bias[o]; stream: whole tiles' rows stored around
// the caches (common/memory.cl st16_stream). Grid: (rows of M, ceil(tc / 16)).
__kernel CPU_ONE_ITEM void winograd_output(__global const float* mp, ulong m_bs, uint tcp, __global const store_t* bias,
                                           __global store_t* out, uint o0, uint O, uint OH, uint OW, uint TH, uint TW,
                                           uint t0, uint tc, uint stream) {
  const uint o = o0 + (uint)get_global_id(0), nb = (uint)get_global_id(1);
  const uint q0 = t0 + 16u * nb;
  const __global float* src = mp + (ulong)get_global_id(0) * tcp + 16u * nb;
  float16 m[36];
  for (int e = 0; e < 36; ++e) {
    m[e] = vload16(0, src + (ulong)e * m_bs);
    // 36 streams are more than the hardware prefetchers follow: ask for the rows two work-items ahead.
    ns_prefetch_at(src + (ulong)e * m_bs + 2u * tcp);
  }
  float16 y[16];
  WINO_OUTPUT(float16, m, y);
  const float b = bias ? ld(bias, o) : 0.0f;
  for (int i = 0; i < 16; ++i) y[i] += b;
  uint img;
  int y0, x0;
  wino_tile(q0, TH, TW, 0u, &img, &y0, &x0);
  __global store_t* oc = out + ((ulong)img * O + o) * OH * OW;
  if (16u * nb + 16u <= tc && (q0 - img * TH * TW) % TW + 16u <= TW && x0 + 64 <= (int)OW && y0 + 4 <= (int)OH) {
    // Whole tiles side by side: each output row is the tiles' four columns interleaved.
    const uint16 lo = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const uint16 hi = lo + (uint16)(8);
    const uint16 q4 = (uint16)(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
    const uint16 q4h = q4 + (uint16)(8);
    for (int i = 0; i < 4; ++i) {
      const float16 z01l = shuffle2(y[4 * i], y[4 * i + 1], lo), z23l = shuffle2(y[4 * i + 2], y[4 * i + 3], lo);
      const float16 z01h = shuffle2(y[4 * i], y[4 * i + 1], hi), z23h = shuffle2(y[4 * i + 2], y[4 * i + 3], hi);
      const ulong row = (ulong)(y0 + i) * OW + (uint)x0;
      st16_stream(oc, row, shuffle2(z01l, z23l, q4), stream);
      st16_stream(oc, row + 16u, shuffle2(z01l, z23l, q4h), stream);
      st16_stream(oc, row + 32u, shuffle2(z01h, z23h, q4), stream);
      st16_stream(oc, row + 48u, shuffle2(z01h, z23h, q4h), stream);
    }
    return;
  }
#if defined(STORE_F16)
  // Rounded to f16 16 values at a time by the CPU's conversion instruction (ns_f16_words16, as st16), then
  // stored as words: a scalar st() is the exact integer emulation, which made f16 1.5x f32's time here (the
  // UNet's 16x16 and 32x32 outputs take this path). The same bits.
  ushort ys[256] __attribute__((aligned(32)));
  for (int i = 0; i < 16; ++i) *(__private ushort16*)(ys + 16 * i) = ns_f16_words16(y[i]);
#define WINO_ST(p, i, v) (((__global ushort*)(p))[(i)] = (v))
#else
  float ys[256];
  for (int i = 0; i < 16; ++i) vstore16(y[i], 0, ys + 16 * i);
#define WINO_ST(p, i, v) st(p, i, v)
#endif
  for (uint j = 0; j < 16u && 16u * nb + j < tc; ++j) {
    wino_tile(q0 + j, TH, TW, 0u, &img, &y0, &x0);
    oc = out + ((ulong)img * O + o) * OH * OW;
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 4; ++k) {
        if (y0 + i < (int)OH && x0 + k < (int)OW) {
          WINO_ST(oc, (ulong)(y0 + i) * OW + (uint)(x0 + k), ys[16 * (4 * i + k) + j]);
        }
      }
    }
  }
#undef WINO_ST
}
#endif  // CPU_KERNELS && !ACC_NATIVE
