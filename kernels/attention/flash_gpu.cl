// ---------------------------------------------------------------------------
// GPU style (attention_flash): f32 accumulation and f32 softmax, no causal
// mask. The SIMT flash-attention layout: a work-group of 16 x FL_TY work-items
// (1-D, tx = lid % 16, ty = lid / 16) takes FL_BQ = 8 * FL_TY query rows of one
// (batch, head); their Q block is loaded into local memory ONCE, then the keys
// are walked in tiles of FL_BK = 16 * FL_KN:
//   1. K tile -> local [channel][key] (coalesced along the channels);
//   2. S = scale * Q.K^T in registers, 8 rows x FL_KN keys per work-item
//      (rows 8 ty .. 8 ty + 7, keys FL_KN tx ..): per channel two broadcast
//      float4 reads of Q and one FL_KN-wide read of K feed 8 * FL_KN FMAs;
//   3. each row's tile maximum (NaN-propagating) is combined through local
//      memory by one work-item per row, which moves the running max m and
//      the rescale factor corr = exp(m_old - m_new); the V tile is loaded
//      meanwhile (into K's place);
//   4. P = exp(S - m) into local [key][row]; each work-item keeps its rows'
//      partial sums l over its own keys (added up once at the end);
//   5. O = O * corr + P.V, O in registers: 8 rows x FL_DJ columns (tx + 16 j)
//      per work-item; per key two broadcast float4 reads of P and FL_DJ
//      conflict-free reads of V feed 8 * FL_DJ FMAs.
// The running max moves once per tile (the fused kernel: per 16 keys), an
// f32-rounding-level difference. A row whose scores are all -Inf so far takes
// no key (p = 0, its O restarts from 0 at its first finite score, as the
// reference skips those keys); keys past sk score -Inf and have zero V rows.
// Head sizes: FL_D (d rounded up to 4) and 16 * FL_DJ (dv rounded up to 16),
// the tiles chosen per head size by the host (attention.cpp, flash_tiles);
// compiled only when FL_D is given.
// Grid: (16 * FL_TY * ceil(sq / FL_BQ), batch * heads), local (16 * FL_TY).
#ifdef FL_D
#define FL_RM 8                      // query rows per work-item
#define FL_NT (16 * FL_TY)           // work-items per group
#define FL_BQ (FL_RM * FL_TY)        // query rows per group
#define FL_BK (16 * FL_KN)           // keys per tile
#define FL_DVP (16 * FL_DJ)          // V / O columns (padded)
#define FL_KROW (FL_BK + FL_KN)      // K row stride in floats (one vector of padding)
#define FL_PROW (FL_BQ + 4)          // P row stride in floats
#define FL_QSZ (FL_D * FL_BQ)        // Q block [channel][row]
#define FL_KSZ (FL_D * FL_KROW)      // K tile [channel][key]
#define FL_VSZ (FL_BK * FL_DVP)      // V tile [key][column], in K's place
#define FL_KVSZ (FL_KSZ > FL_VSZ ? FL_KSZ : FL_VSZ)
#define FL_PSZ (FL_BK * FL_PROW)     // P [key][row]; also the row partials [tx][row]
#define FL_LOCAL (FL_QSZ + FL_KVSZ + FL_PSZ + 2 * FL_BQ)  // floats; attention.cpp: flash_local_bytes
// Vectors are taken apart by component (no vload/vstore on private arrays:
// every private array here is indexed only by unrolled constants).
#define FL_F8(a, b) {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}
#define FL_V4(p, i) (float4)(p[i], p[i + 1], p[i + 2], p[i + 3])
#if FL_KN == 4
typedef float4 flkvec;
#define FL_KF(kv) {kv.x, kv.y, kv.z, kv.w}
#elif FL_KN == 2
typedef float2 flkvec;
#define FL_KF(kv) {kv.x, kv.y}
#else
#error "attention_flash: FL_KN must be 2 or 4"
#endif
#if FL_D % 4 != 0 || FL_TY % 4 != 0 || ((FL_PROW / 4) & 1) == 0
#error "attention_flash: FL_D and FL_TY must be multiples of 4"
#endif

__kernel __attribute__((reqd_work_group_size(FL_NT, 1, 1))) void attention_flash(
    __global const store_t* q, __global const store_t* k, __global const store_t* v, __global store_t* out, uint sq,
    uint sk, uint heads, uint d, uint dv, float scale) {
  __local float4 smem[FL_LOCAL / 4];
  __local float* const qs = (__local float*)smem;        // [FL_D][FL_BQ]
  __local float* const kvs = qs + FL_QSZ;                 // K [FL_D][FL_KROW], then V [FL_BK][FL_DVP]
  __local float* const ps = kvs + FL_KVSZ;                // P [FL_BK][FL_PROW], row partials [16][FL_PROW]
  __local float* const row_m = ps + FL_PSZ;               // running max per row
  __local float* const row_corr = row_m + FL_BQ;          // this tile's rescale (-1: restart O from 0)
  __local const float4* const qs4 = (__local const float4*)qs;
  __local const flkvec* const ks = (__local const flkvec*)kvs;
  __local float4* const ps4 = (__local float4*)ps;

  const uint tid = (uint)get_local_id(0);
  const uint tx = tid % 16u, ty = tid / 16u;
  const uint i0 = (uint)get_group_id(0) * FL_BQ;
  const uint bh = (uint)get_global_id(1);
  const uint b = bh / heads, h = bh % heads;
  const ulong qstride = (ulong)heads * d, vstride = (ulong)heads * dv;
  const __global store_t* qb = q + (ulong)b * sq * qstride + (ulong)h * d;
  const __global store_t* kb = k + (ulong)b * sk * qstride + (ulong)h * d;
  const __global store_t* vb = v + (ulong)b * sk * vstride + (ulong)h * dv;

  // The Q block, once: consecutive work-items read consecutive channels of a row.
  // Rows past sq and channels past d are zeros (never stored / add nothing).
  for (uint e = tid; e < FL_QSZ; e += FL_NT) {
    const uint c = e % FL_D, r = e / FL_D, row = i0 + r;
    qs[c * FL_BQ + r] = (row < sq && c < d) ? ld(qb + (ulong)row * qstride, c) : 0.0f;
  }
  if (tid < FL_BQ) row_m[tid] = -INFINITY;

  float o[FL_RM][FL_DJ];
  float lp[FL_RM];  // this work-item's share of each row's running sum
#pragma unroll
  for (uint i = 0; i < FL_RM; ++i) {
    lp[i] = 0.0f;
#pragma unroll
    for (uint j = 0; j < FL_DJ; ++j) o[i][j] = 0.0f;
  }

  for (uint j0 = 0; j0 < sk; j0 += FL_BK) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile's V and P are consumed (first tile: Q stored)
    for (uint e = tid; e < FL_D * FL_BK; e += FL_NT) {
      const uint c = e % FL_D, kk = e / FL_D, key = j0 + kk;
      kvs[c * FL_KROW + kk] = (key < sk && c < d) ? ld(kb + (ulong)key * qstride, c) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float s[FL_RM][FL_KN];
#pragma unroll
    for (uint i = 0; i < FL_RM; ++i)
#pragma unroll
      for (uint j = 0; j < FL_KN; ++j) s[i][j] = 0.0f;
#pragma unroll 4
    for (uint c = 0; c < FL_D; ++c) {
      const float4 qa = qs4[c * (FL_BQ / 4) + 2u * ty], qb = qs4[c * (FL_BQ / 4) + 2u * ty + 1u];
      const flkvec kv = ks[c * (FL_KROW / FL_KN) + tx];
      const float qf[FL_RM] = FL_F8(qa, qb), kf[FL_KN] = FL_KF(kv);
#pragma unroll
      for (uint i = 0; i < FL_RM; ++i)
#pragma unroll
        for (uint j = 0; j < FL_KN; ++j) s[i][j] = fma(qf[i], kf[j], s[i][j]);
    }
    // Scale, mask the keys past sk, and this work-item's share of each row's tile max.
    float pm[FL_RM];
#pragma unroll
    for (uint i = 0; i < FL_RM; ++i) {
      pm[i] = -INFINITY;
#pragma unroll
      for (uint j = 0; j < FL_KN; ++j) {
        const uint key = j0 + tx * FL_KN + j;
        s[i][j] = key < sk ? scale * s[i][j] : -INFINITY;
        pm[i] = nan_max(pm[i], s[i][j]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // K is consumed: V may take its place
    ps4[tx * (FL_PROW / 4) + 2u * ty] = FL_V4(pm, 0);
    ps4[tx * (FL_PROW / 4) + 2u * ty + 1u] = FL_V4(pm, 4);
    for (uint e = tid; e < FL_VSZ; e += FL_NT) {  // key kk in P's slot order (see below)
      const uint c = e % FL_DVP, kk = e / FL_DVP, key = j0 + kk;
      kvs[((kk % FL_KN) * 16u + kk / FL_KN) * FL_DVP + c] = (key < sk && c < dv) ? ld(vb + (ulong)key * vstride, c) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid < FL_BQ) {
      const float m_old = row_m[tid];
      float m_new = m_old;
      for (uint t = 0; t < 16u; ++t) m_new = nan_max(m_new, ps[t * FL_PROW + tid]);
      row_m[tid] = m_new;
      // m_old = -Inf: no key taken yet, O and l are 0 (or 0 * Inf from skipped keys): restart them.
      row_corr[tid] = m_old == -INFINITY ? (m_new == -INFINITY ? 1.0f : -1.0f) : exp(m_old - m_new);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // P = exp(S - m) for this work-item's block; O and l rescaled.
#pragma unroll
    for (uint i = 0; i < FL_RM; ++i) {
      const uint r = FL_RM * ty + i;
      const float mn = row_m[r], corr = row_corr[r];
      const bool none = mn == -INFINITY;  // only -Inf scores so far: they weigh 0
      float tile_sum = 0.0f;
#pragma unroll
      for (uint j = 0; j < FL_KN; ++j) {
        s[i][j] = none ? 0.0f : exp(s[i][j] - mn);
        tile_sum += s[i][j];
      }
      const bool restart = corr < 0.0f;
      lp[i] = restart ? tile_sum : fma(lp[i], corr, tile_sum);
#pragma unroll
      for (uint j = 0; j < FL_DJ; ++j) o[i][j] = restart ? 0.0f : o[i][j] * corr;
    }
    // P's key slots: key tx * FL_KN + j goes to slot 16 j + tx, so the float4
    // stores of 8 consecutive work-items hit distinct banks (FL_PROW / 4 is odd).
#pragma unroll
    for (uint j = 0; j < FL_KN; ++j) {
      ps4[(16u * j + tx) * (FL_PROW / 4) + 2u * ty] = (float4)(s[0][j], s[1][j], s[2][j], s[3][j]);
      ps4[(16u * j + tx) * (FL_PROW / 4) + 2u * ty + 1u] = (float4)(s[4][j], s[5][j], s[6][j], s[7][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // O += P.V over the tile's key slots (keys past sk: p = 0 and v = 0).
#pragma unroll 4
    for (uint kk = 0; kk < FL_BK; ++kk) {
      const float4 pa = ps4[kk * (FL_PROW / 4) + 2u * ty], pb = ps4[kk * (FL_PROW / 4) + 2u * ty + 1u];
      const float pf[FL_RM] = FL_F8(pa, pb);
#pragma unroll
      for (uint j = 0; j < FL_DJ; ++j) {
        const float vv = kvs[kk * FL_DVP + tx + 16u * j];
#pragma unroll
        for (uint i = 0; i < FL_RM; ++i) o[i][j] = fma(pf[i], vv, o[i][j]);
      }
    }
  }

  // l: the 16 work-items' shares of each row, added up in a fixed order.
  barrier(CLK_LOCAL_MEM_FENCE);
  ps4[tx * (FL_PROW / 4) + 2u * ty] = FL_V4(lp, 0);
  ps4[tx * (FL_PROW / 4) + 2u * ty + 1u] = FL_V4(lp, 4);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (tid < FL_BQ) {
    float l = 0.0f;
    for (uint t = 0; t < 16u; ++t) l += ps[t * FL_PROW + tid];
    row_corr[tid] = l;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (uint i = 0; i < FL_RM; ++i) {
    const uint r = FL_RM * ty + i, row = i0 + r;
    if (row >= sq) continue;
    const float l = row_corr[r];
    __global store_t* orow = out + ((ulong)b * sq + row) * vstride + (ulong)h * dv;
#pragma unroll
    for (uint j = 0; j < FL_DJ; ++j) {
      const uint c = tx + 16u * j;
      if (c < dv) st(orow, c, o[i][j] / l);
    }
  }
}
#endif

