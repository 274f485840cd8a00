// ---------------------------------------------------------------------------
// Tensor cores (attention_flash_mma; f16 storage, f32 accumulation, f32
// softmax, no causal mask; -DFM_DK with -DMMA_PTX on NVIDIA sm_80+, or
// -DMMA_EMULATE in tests): the FlashAttention-2 layout on mma.sync m16n8k16.
// A work-group of FM_WARPS warps takes FM_BQ = 16 * FM_WARPS query rows of one
// (batch, head), each warp 16 of them; their Q fragments stay in registers for
// the whole key loop. Keys are walked in tiles of FM_BK (64; 32 above head size 96):
//   1. the K tile into local memory as [key][channel pair] and the V tile as
//      [column][key pair] (the tensor cores' "col" operand layout);
//   2. S = Q.K^T on the tensor cores: 16 rows x FM_BK keys per warp, f32;
//   3. scale, mask keys past sk (-Inf), each row's tile maximum over the four
//      work-items that hold the row (two warp shuffles), the running max m and
//      the rescale corr = exp(m_old - m_new) per row, as attention_flash;
//   4. P = exp(S - m) in f32 (each work-item keeps its share of the row sums
//      l), split into two halves, P = P_hi + P_lo (P_hi = half(P), P_lo =
//      half(P - P_hi)); the S fragments are their A fragments as they lie;
//   5. O = O * corr + P_hi.V + P_lo.V on the tensor cores, O (16 rows x FM_DV)
//      in f32 registers.
// The split keeps P to about 22 bits (the tensor cores take halves): the
// products are exact and the sums f32, as in the SIMT kernels, so the result
// is theirs up to the order of the f32 additions, where P rounded once to
// half would move it by ~2^-12 relative per probability (an error above the
// f16 cells of the op suite). Pairs are read as 32-bit words: d and dv must
// be even (the host checks). Head sizes up to 160.
// Grid: (FM_NT * ceil(sq / FM_BQ), batch * heads), local (FM_NT).
#ifdef FM_DK
#if !defined(STORE_F16) || (!defined(MMA_PTX) && !defined(MMA_EMULATE))
#error "attention_flash_mma: f16 storage and -DMMA_PTX or -DMMA_EMULATE"
#endif
#if FM_DK % 16 != 0 || FM_DV % 8 != 0
#error "attention_flash_mma: FM_DK must be a multiple of 16 and FM_DV of 8"
#endif
#define FM_WARPS 4
#define FM_NT (32 * FM_WARPS)
#define FM_BQ (16 * FM_WARPS)
#ifndef FM_BK
#define FM_BK 64                // keys per tile (32 for heads above 96: fewer registers)
#endif
#if FM_BK % 16 != 0
#error "attention_flash_mma: FM_BK must be a multiple of 16"
#endif
#define FM_KP (FM_DK / 2)       // channel pairs of a K row
#define FM_KPITCH (FM_KP + 4)   // uints a K row: fragment loads hit 32 distinct banks
#define FM_VP (FM_BK / 2)       // key pairs of a V column
#define FM_VPITCH (FM_VP + 4)
#define FM_NB (FM_BK / 8)       // n8 blocks of scores per warp
#define FM_DB (FM_DV / 8)       // n8 blocks of the output
#define FM_KS (FM_DK / 16)      // k16 steps of Q.K^T

// Whether a half word pair holds an Inf or NaN (exponent all ones), per half.
static inline uint fm_nonfinite_halves(uint w) {
  return ((w & 0x7c00u) == 0x7c00u ? 0xffffu : 0u) | ((w & 0x7c000000u) == 0x7c000000u ? 0xffff0000u : 0u);
}

// O += P.V for one key tile: P (the warp's scores after exp, f32) split into
// halves P_hi + P_lo; parts: 1 P_lo, 2 P_hi, 3 both (P_lo first). Keys 16 ks4
// .. 16 ks4 + 15 are the score blocks 2 ks4 and 2 ks4 + 1 (fragment registers:
// block 2 ks4 elements 0,1 | 2,3, then block 2 ks4 + 1 elements 0,1 | 2,3).
static inline __attribute__((always_inline)) void fm_pv(float (*o)[4], float (*s)[4], __local uint (*vs)[FM_VPITCH],
                                                        uint g8, uint t4, uint parts, __local uint* mma_x) {
  MMA_UNROLL
  for (uint ks4 = 0; ks4 < FM_BK / 16u; ++ks4) {
    uint p_hi[4], p_lo[4];
#pragma unroll
    for (uint r = 0; r < 4u; ++r) {
      const float x0 = s[2u * ks4 + (r >> 1)][2u * (r & 1u)], x1 = s[2u * ks4 + (r >> 1)][2u * (r & 1u) + 1u];
      p_hi[r] = pack_half2(x0, x1);
      const float2 h = unpack_half2(p_hi[r]);
      p_lo[r] = pack_half2(x0 - h.x, x1 - h.y);  // the differences are exact in f32
    }
    MMA_UNROLL
    for (uint j = 0; j < FM_DB; ++j) {
      const uint vf[2] = {vs[8u * j + g8][8u * ks4 + t4], vs[8u * j + g8][8u * ks4 + 4u + t4]};
      if (parts & 1u) MMA_16816(o[j], p_lo, vf, mma_x);
      if (parts & 2u) MMA_16816(o[j], p_hi, vf, mma_x);
    }
  }
}

__kernel __attribute__((reqd_work_group_size(FM_NT, 1, 1))) void attention_flash_mma(
    __global const store_t* q, __global const store_t* k, __global const store_t* v, __global store_t* out, uint sq,
    uint sk, uint heads, uint d, uint dv, float scale) {
  __local uint ks[FM_BK][FM_KPITCH];
  __local uint vs[FM_DV][FM_VPITCH];
  __local uint mma_x[MMA_X_WORDS(FM_NT)];
  __local int v_nonfinite[2];  // per tile parity: the V tile holds an Inf or NaN
  const uint tid = (uint)get_local_id(0);
  const uint lane = tid & 31u, warp = tid >> 5;
  const uint g8 = lane >> 2, t4 = lane & 3u;
  const uint i0 = (uint)get_group_id(0) * FM_BQ + warp * 16u;
  const uint bh = (uint)get_global_id(1);
  const uint b = bh / heads, h = bh % heads;
  // Rows in uints (pairs): d and dv are even, so every row starts on a pair.
  const uint qrow = heads * d / 2u, vrow = heads * dv / 2u;
  __global const uint* const qb = (__global const uint*)q + ((ulong)b * sq * heads * d + (ulong)h * d) / 2u;
  __global const uint* const kb = (__global const uint*)k + ((ulong)b * sk * heads * d + (ulong)h * d) / 2u;
  __global const uint* const vb = (__global const uint*)v + ((ulong)b * sk * heads * dv + (ulong)h * dv) / 2u;
  const uint dp = d / 2u, dvp = dv / 2u;

  // Q fragments (rows i0 + g8 and i0 + g8 + 8; rows past sq and channels past d are zeros).
  uint qf[FM_KS][4];
#pragma unroll
  for (uint s = 0; s < FM_KS; ++s) {
#pragma unroll
    for (uint r = 0; r < 4u; ++r) {
      const uint row = i0 + g8 + 8u * (r & 1u), pair = 8u * s + t4 + 4u * (r >> 1);
      qf[s][r] = (row < sq && pair < dp) ? qb[(ulong)row * qrow + pair] : 0u;
    }
  }
  float o[FM_DB][4];
#pragma unroll
  for (uint j = 0; j < FM_DB; ++j)
#pragma unroll
    for (uint e = 0; e < 4u; ++e) o[j][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g8, g8 + 8; l: this work-item's keys
  if (tid == 0u) v_nonfinite[0] = 0;

  for (uint j0 = 0, tile = 0; j0 < sk; j0 += FM_BK, ++tile) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile is consumed
    for (uint e = tid; e < FM_BK * FM_KP; e += FM_NT) {
      const uint kk = e / FM_KP, pair = e % FM_KP, key = j0 + kk;
      ks[kk][pair] = (key < sk && pair < dp) ? kb[(ulong)key * qrow + pair] : 0u;
    }
    // V: work-item (column pair cp, key pair kp) reads columns 2cp, 2cp+1 of keys 2kp, 2kp+1 (two words)
    // and writes the key pairs of both columns.
    bool my_nonfinite = false;
    for (uint e = tid; e < FM_VP * (FM_DV / 2); e += FM_NT) {
      const uint cp = e % (FM_DV / 2), kp = e / (FM_DV / 2), key = j0 + 2u * kp;
      const uint w0 = (key < sk && cp < dvp) ? vb[(ulong)key * vrow + cp] : 0u;
      const uint w1 = (key + 1u < sk && cp < dvp) ? vb[(ulong)(key + 1u) * vrow + cp] : 0u;
      vs[2u * cp][kp] = (w0 & 0xffffu) | (w1 << 16);
      vs[2u * cp + 1u][kp] = (w0 >> 16) | (w1 & 0xffff0000u);
      my_nonfinite = my_nonfinite || (fm_nonfinite_halves(w0) | fm_nonfinite_halves(w1)) != 0u;
    }
    if (my_nonfinite) atomic_or(&v_nonfinite[tile & 1u], 1);
    barrier(CLK_LOCAL_MEM_FENCE);
    const bool v_bad = v_nonfinite[tile & 1u] != 0;  // the same for the whole group
    if (tid == 0u) v_nonfinite[(tile + 1u) & 1u] = 0;  // its last readers were in the previous tile

    float s[FM_NB][4];
#pragma unroll
    for (uint j = 0; j < FM_NB; ++j)
#pragma unroll
      for (uint e = 0; e < 4u; ++e) s[j][e] = 0.0f;
    MMA_UNROLL
    for (uint st = 0; st < FM_KS; ++st) {
      MMA_UNROLL
      for (uint j = 0; j < FM_NB; ++j) {
        const uint kf[2] = {ks[8u * j + g8][8u * st + t4], ks[8u * j + g8][8u * st + 4u + t4]};
        MMA_16816(s[j], qf[st], kf, mma_x);
      }
    }
    // Scale, mask the keys past sk, and each row's tile maximum (NaN-propagating).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (uint j = 0; j < FM_NB; ++j) {
#pragma unroll
      for (uint e = 0; e < 4u; ++e) {
        const uint key = j0 + 8u * j + 2u * t4 + (e & 1u);
        s[j][e] = key < sk ? scale * s[j][e] : -INFINITY;
        mx[e >> 1] = nan_max(mx[e >> 1], s[j][e]);
      }
    }
    float corr[2];
    bool none[2], restart[2];
    MMA_UNROLL
    for (uint r = 0; r < 2u; ++r) {
      mx[r] = nan_max(mx[r], warp_xor(mx[r], 1u, mma_x));
      mx[r] = nan_max(mx[r], warp_xor(mx[r], 2u, mma_x));
      const float m_new = nan_max(m[r], mx[r]);
      // m_old = -Inf: no key taken yet, O and l are 0: restart them from this tile.
      restart[r] = m[r] == -INFINITY && m_new != -INFINITY;
      corr[r] = m[r] == -INFINITY ? 1.0f : exp(m[r] - m_new);
      none[r] = m_new == -INFINITY;  // only -Inf scores so far: they weigh 0
      m[r] = m_new;
    }
    float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (uint j = 0; j < FM_NB; ++j) {
#pragma unroll
      for (uint e = 0; e < 4u; ++e) {
        const uint r = e >> 1;
        s[j][e] = none[r] ? 0.0f : exp(s[j][e] - m[r]);
        tile_sum[r] += s[j][e];
      }
    }
#pragma unroll
    for (uint r = 0; r < 2u; ++r) l[r] = restart[r] ? tile_sum[r] : fma(l[r], corr[r], tile_sum[r]);
#pragma unroll
    for (uint j = 0; j < FM_DB; ++j) {
#pragma unroll
      for (uint e = 0; e < 4u; ++e) o[j][e] = restart[e >> 1] ? 0.0f : o[j][e] * corr[e >> 1];
    }
    // O += P_hi.V + P_lo.V. A V tile with an Inf or NaN: P_hi.V first, then P_lo
    // times V with those values zeroed (P_lo is 0 where P is a half, and 0 * Inf
    // would turn the reference's Inf into NaN). A probability under 2^-25 is 0
    // in P_hi too: its key's Inf then gives NaN where the reference's f32 p
    // gives Inf (both non-finite).
    if (!v_bad) {
      fm_pv(o, s, vs, g8, t4, 3u, mma_x);
    } else {
      fm_pv(o, s, vs, g8, t4, 2u, mma_x);
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint e = tid; e < FM_VP * (FM_DV / 2); e += FM_NT) {
        const uint cp = e % (FM_DV / 2), kp = e / (FM_DV / 2);
        vs[2u * cp][kp] &= ~fm_nonfinite_halves(vs[2u * cp][kp]);
        vs[2u * cp + 1u][kp] &= ~fm_nonfinite_halves(vs[2u * cp + 1u][kp]);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      fm_pv(o, s, vs, g8, t4, 1u, mma_x);
    }
  }

  // l: the four work-items' shares of each row, added up in a fixed order.
  MMA_UNROLL
  for (uint r = 0; r < 2u; ++r) {
    l[r] += warp_xor(l[r], 1u, mma_x);
    l[r] += warp_xor(l[r], 2u, mma_x);
  }
#pragma unroll
  for (uint r = 0; r < 2u; ++r) {
    const uint row = i0 + g8 + 8u * r;
    if (row >= sq) continue;
    __global store_t* orow = out + ((ulong)b * sq + row) * heads * dv + (ulong)h * dv;
#pragma unroll
    for (uint j = 0; j < FM_DB; ++j) {
#pragma unroll
      for (uint e = 0; e < 2u; ++e) {
        const uint c = 8u * j + 2u * t4 + e;
        if (c < dv) st(orow, c, o[j][2u * r + e] / l[r]);
      }
    }
  }
}
#endif  // FM_DK
