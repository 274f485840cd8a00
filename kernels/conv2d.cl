// conv2d.cl: im2col for convolution as GEMM (kernels/matmul.cl does the sums).
// out[b][o][p] = sum_k w[o][k] * col[b][k][p] + bias[o], p = oy*OW + ox and
// k = (ci*KH + ky)*KW + kx: the GEMM's k order is the op's native summation
// order (op_args.hpp). Padding contributes zeros that are multiplied like data
// (a non-finite weight over padding gives NaN, as in the reference).
//
// conv_im2col_panels packs f32 panels of GEMM B (cpu style and native
// accumulation, k-blocked by kc as matmul.cl lays them out) for the output
// positions [p0, p0 + pc) of each image. GPU style reads the columns on the
// fly instead (matmul.cl conv_implicit_gemm).

#ifndef GEMM_NV
#define GEMM_NV 1
#endif
#define GEMM_NR (16 * GEMM_NV)

// Geometry of one convolution, passed as a struct-free argument list:
// C, H, W input; KH, KW kernel; stride, pad; OW output width; p0 the first
// output position of the chunk and pc its length.

// Grid: (K, ceil(pc / NR), images). Image b is read at x_off + b * x_bs and its
// panels start at b * dst_bs floats.
__kernel void conv_im2col_panels(__global const store_t* x, ulong x_off, ulong x_bs, __global float* dst,
                                 ulong dst_bs, uint C, uint H, uint W, uint KH, uint KW, uint stride, uint pad,
                                 uint OW, uint p0, uint pc, uint kc) {
  const uint k = (uint)get_global_id(0);
  const uint nb = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  const uint K = C * KH * KW;
  const uint kx = k % KW, ky = (k / KW) % KH, ci = k / (KW * KH);
  const __global store_t* xp = x + x_off + b * x_bs + (ulong)ci * H * W;
  __global float* d = dst + b * dst_bs + panel_row(nb, (pc + GEMM_NR - 1) / GEMM_NR, k, K, kc, GEMM_NR);
  const uint q0 = nb * GEMM_NR;  // first column of this panel within the chunk
  uint oy = (p0 + q0) / OW, ox = (p0 + q0) % OW;  // walked along with the columns
  for (uint v = 0; v < GEMM_NV; ++v) {
    const int iy = (int)(oy * stride + ky) - (int)pad;
    const int ix = (int)(ox * stride + kx) - (int)pad;
    // Fast paths: 16 consecutive positions in one output row at stride 1: inside the image, a
    // padding row (zeros), or one column over the left or right edge (3x3 with padding 1: one
    // vector load and a lane shift instead of 16 bounds-checked scalar loads).
    if (stride == 1u && q0 + 16u * v + 16u <= pc && ox + 16u <= OW && W >= 16u) {
      float16 row;
      bool done = true;
      if (iy < 0 || iy >= (int)H) {
        row = (float16)(0.0f);
      } else if (ix >= 0 && ix + 16 <= (int)W) {
        row = ld16(xp, (ulong)iy * W + (uint)ix);
      } else if (ix == -1) {
        const float16 a = ld16(xp, (ulong)iy * W);
        row = (float16)(0.0f, a.s0, a.s1, a.s2, a.s3, a.s4, a.s5, a.s6, a.s7, a.s8, a.s9, a.sa, a.sb, a.sc, a.sd,
                        a.se);
      } else if (ix + 15 == (int)W) {
        const float16 a = ld16(xp, (ulong)iy * W + (uint)(ix - 1));
        row = (float16)(a.s1, a.s2, a.s3, a.s4, a.s5, a.s6, a.s7, a.s8, a.s9, a.sa, a.sb, a.sc, a.sd, a.se, a.sf,
                        0.0f);
      } else {
        done = false;
      }
      if (done) {
        vstore16(row, 0, d + 16u * v);
        ox += 16u;
        if (ox == OW) ox = 0, ++oy;
        continue;
      }
    }
    float t[16];
    for (uint j = 0; j < 16u; ++j) {
      float val = 0.0f;
      if (q0 + 16u * v + j < pc) {
        const int y = (int)(oy * stride + ky) - (int)pad;
        const int xx = (int)(ox * stride + kx) - (int)pad;
        if (y >= 0 && y < (int)H && xx >= 0 && xx < (int)W) val = ld(xp, (ulong)y * W + (uint)xx);
      }
      t[j] = val;
      if (++ox == OW) ox = 0, ++oy;
    }
    vstore16(vload16(0, t), 0, d + 16u * v);
  }
}
