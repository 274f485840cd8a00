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
// the fly (matmul.cl conv_implicit_gemm).

#ifndef GEMM_NV
#define GEMM_NV 1
#endif
#define GEMM_NR (16 * GEMM_NV)

// Geometry of one convolution, passed as a struct-free argument list:
// C, H, W input; KH, KW kernel; stride, pad; OW output width; p0 the first
// output position of the chunk and pc its length.

// Grid: (K, ceil(pc / NR), images). Image b is read at x_off + b * x_bs and its
// panels start at b * dst_bs floats.
__kernel CPU_ONE_ITEM void conv_im2col_panels(__global const store_t* x, ulong x_off, ulong x_bs, __global float* dst,
                                              ulong dst_bs, uint C, uint H, uint W, uint KH, uint KW, uint stride,
                                              uint pad, uint OW, uint p0, uint pc, uint kc) {
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
    const uint q = q0 + 16u * v;
    vstore16(im2col_row16(xp, H, W, stride, pad, OW, oy, ox, ky, kx, q < pc ? pc - q : 0u), 0, d + 16u * v);
    ox += 16u;
    while (ox >= OW) ox -= OW, ++oy;
  }
}
