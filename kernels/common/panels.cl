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
// and after `count` columns (matmul/conv_cpu.cl conv_cpu, conv2d.cl conv_im2col_panels).
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

// 8 consecutive values of a row of W from column x0, zero outside [0, W): row16_padded for rows of 8 outputs.
static __attribute__((always_inline)) inline float8 row8_padded(__global const store_t* row, int x0, uint W) {
  if (x0 >= 0 && x0 + 8 <= (int)W) return ld8(row, (uint)x0);
  if (W >= 8u && x0 == -1) {
    const float8 a = ld8(row, 0u);
    return (float8)(0.0f, a.s0, a.s1, a.s2, a.s3, a.s4, a.s5, a.s6);
  }
  if (W >= 8u && x0 + 7 == (int)W) {
    const float8 a = ld8(row, (uint)(x0 - 1));
    return (float8)(a.s1, a.s2, a.s3, a.s4, a.s5, a.s6, a.s7, 0.0f);
  }
  float t[8];
  for (int j = 0; j < 8; ++j) {
    const int xx = x0 + j;
    t[j] = xx >= 0 && xx < (int)W ? ld(row, (uint)xx) : 0.0f;
  }
  return vload8(0, t);
}

// 16 positions of an image 8 outputs wide, from the start of an output row: two output rows (the UNet's 8x8
// level, and the stride-2 convolutions down to it), each row8_padded at stride 1 or the even lanes of a
// row16_padded at stride 2. They took im2col_row16_any, one element at a time: 14% of a 1280-channel 8x8
// convolution's time on a 2-core Zen 3, for 6 MB of columns.
static __attribute__((noinline)) float16 im2col_row16_ow8(__global const store_t* xp, uint H, uint W, uint stride,
                                                          uint pad, uint oy, uint ky, uint kx) {
  const int ix = (int)kx - (int)pad;
  float8 h[2];
  for (uint i = 0; i < 2u; ++i) {
    const int iy = (int)((oy + i) * stride + ky) - (int)pad;
    if (iy < 0 || iy >= (int)H) {
      h[i] = (float8)(0.0f);
      continue;
    }
    const __global store_t* row = xp + (ulong)iy * W;
    h[i] = stride == 1u ? row8_padded(row, ix, W) : row16_padded(row, ix, W).even;
  }
  return (float16)(h[0], h[1]);
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
  if (OW == 8u && ox == 0u && count >= 16u && stride <= 2u) return im2col_row16_ow8(xp, H, W, stride, pad, oy, ky, kx);
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

// Winograd F(4x4, 3x3)'s weight transform (conv2d.cl winograd_weights, matmul/conv_cpu.cl winograd_fused_cpu: one
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
