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
        if (k0 + kcb >= K) {
          const uint pf_col = n0;
          GEMM_ROWS(GEMM_PREFETCH_ROW)
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
// planes wait in local memory too (pl). U is the same (common/panels.cl wino_weights16), and the sums are those of
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
