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

