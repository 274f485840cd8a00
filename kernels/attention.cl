// attention.cl: fused multi-head attention with an online softmax (SDPA /
// flash-like), the semantics of AttentionArgs in op_args.hpp:
//   s = round(scale * q.k), q.k accumulated per precision.accumulate (native:
//   every partial sum rounded to the dtype, the score rounded to the dtype);
//   otherwise kept in f32, or rounded to the dtype when softmax=native.
//   Over keys j ascending: m' = max(m, s); corr = exp(m - m'); p = exp(s - m');
//   l = l*corr + p; o = o*corr + p*v_j (softmax=native: every step rounded to
//   the dtype, products exact); out = o / l rounded once. With softmax=f32 the
//   max is updated per block of 16 keys (an f32-rounding-level difference).
// The materialised implementations (bmm, sliced) run on the GEMM and softmax
// kernels (engine/backend/opencl/attention.cpp).
//
// CPU-friendly layout: each work-item owns ATTN_QB query rows of one head and
// walks the keys once for all of them (each k_j, v_j load serves QB rows), so
// there are no barriers and no local memory. Tensors are [batch, seq, heads*d].
// The loops over the QB rows are unrolled so their accumulators live in
// registers (PoCL otherwise keeps them on the stack: 2.3x slower).

#ifndef ATTN_QB
#define ATTN_QB 4
#endif
#ifndef ATTN_MAX_D
#define ATTN_MAX_D 512  // head sizes above this take the bmm path (logged by the host)
#endif

// q.k for one query row held in registers/private memory and one stored key row.
inline float attn_dot(const float* qv, __global const store_t* kr, uint d) {
#ifdef ACC_NATIVE
  float acc = 0.0f;
  for (uint c = 0; c < d; ++c) acc = nat_fma(qv[c], ld(kr, c), acc);
  return acc;
#else
  float acc = 0.0f;
  uint c = 0;
  if ((d & 7u) == 0u) {
    float8 a8 = 0.0f;
    for (; c < d; c += 8u) a8 = fma(vload8(0, qv + c), ld8(kr, c), a8);
    const float4 a4 = a8.lo + a8.hi;
    acc = (a4.x + a4.y) + (a4.z + a4.w);
  }
  for (; c < d; ++c) acc = fma(qv[c], ld(kr, c), acc);
  return acc;
#endif
}

#if ATTN_QB != 4
#error "attention_fused is written for ATTN_QB == 4"
#endif

// q.k of the 4 query rows against one key row (each k element loaded once).
inline float4 attn_dot4(float qv[ATTN_QB][ATTN_MAX_D], __global const store_t* kr, uint d) {
#ifdef ACC_NATIVE
  float4 acc = 0.0f;  // the 4 rows' sums, each rounded after every term, c ascending
  for (uint c = 0; c < d; ++c) {
    const float4 q4 = (float4)(qv[0][c], qv[1][c], qv[2][c], qv[3][c]);
    acc = nat_fma4(q4, (float4)(ld(kr, c)), acc);
  }
  return acc;
#else
  if ((d & 7u) == 0u) {
    float8 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (uint c = 0; c < d; c += 8u) {
      const float8 kk = ld8(kr, c);
      a0 = fma(vload8(0, qv[0] + c), kk, a0);
      a1 = fma(vload8(0, qv[1] + c), kk, a1);
      a2 = fma(vload8(0, qv[2] + c), kk, a2);
      a3 = fma(vload8(0, qv[3] + c), kk, a3);
    }
    const float8 lo = (float8)(a0.lo + a0.hi, a1.lo + a1.hi);
    const float8 hi = (float8)(a2.lo + a2.hi, a3.lo + a3.hi);
    const float4 l2 = (float4)(lo.s0 + lo.s1, lo.s4 + lo.s5, hi.s0 + hi.s1, hi.s4 + hi.s5);
    const float4 h2 = (float4)(lo.s2 + lo.s3, lo.s6 + lo.s7, hi.s2 + hi.s3, hi.s6 + hi.s7);
    return l2 + h2;
  }
  return (float4)(attn_dot(qv[0], kr, d), attn_dot(qv[1], kr, d), attn_dot(qv[2], kr, d), attn_dot(qv[3], kr, d));
#endif
}

// NaN-propagating maximum and the sum of the 16 lanes.
inline float max16_nan(float16 x) {
  if (any(isnan(x))) return NAN;
  const float8 a = fmax(x.lo, x.hi);
  const float4 b = fmax(a.lo, a.hi);
  const float2 c = fmax(b.lo, b.hi);
  return fmax(c.x, c.y);
}
inline float sum16(float16 x) {
  const float8 a = x.lo + x.hi;
  const float4 b = a.lo + a.hi;
  return (b.x + b.y) + (b.z + b.w);
}

inline float attn_score(float dot, float scale) {
#if defined(ACC_NATIVE) || defined(SOFTMAX_NATIVE)
  return round_affine(scale, dot, -0.0f);  // round_dtype(scale * dot), one rounding
#else
  return scale * dot;
#endif
}

// Grid: (ceil(sq / QB), heads, batch).
// The kernels other than attention_flash are left out of the flash programs
// (-DFL_D ...: one program per tile set): a GPU compiler builds every kernel
// of a program, seconds each on NVIDIA.
#ifndef FL_D
__kernel void attention_fused(__global const store_t* q, __global const store_t* k, __global const store_t* v,
                              __global store_t* out, uint sq, uint sk, uint heads, uint d, uint dv, float scale,
                              int causal) {
  const uint i0 = (uint)get_global_id(0) * ATTN_QB;
  const uint h = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  if (i0 >= sq) return;
  const uint rows = min((uint)ATTN_QB, sq - i0);
  const ulong qstride = (ulong)heads * d, vstride = (ulong)heads * dv;

  float qv[ATTN_QB][ATTN_MAX_D];
  float o[ATTN_QB][ATTN_MAX_D];
  float m[ATTN_QB], l[ATTN_QB];
  uint nkeys[ATTN_QB];
  uint kmax = 0;
  #pragma unroll
  for (uint r = 0; r < ATTN_QB; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    nkeys[r] = r < rows ? (causal ? min(i0 + r + 1u, sk) : sk) : 0u;
    kmax = max(kmax, nkeys[r]);
    const __global store_t* qr = q + (b * sq + i0 + r) * qstride + (ulong)h * d;
    for (uint c = 0; c < d; ++c) qv[r][c] = r < rows ? ld(qr, c) : 0.0f;  // rows past sq: zeros, never stored
    for (uint c = 0; c < dv; ++c) o[r][c] = 0.0f;
  }

  const __global store_t* kb = k + b * sk * qstride + (ulong)h * d;
  const __global store_t* vb = v + b * sk * vstride + (ulong)h * dv;
#ifdef SOFTMAX_NATIVE
  // Every step in the dtype, one key at a time (the order is part of the result).
  for (uint j = 0; j < kmax; ++j) {
    const __global store_t* kr = kb + j * qstride;
    const __global store_t* vr = vb + j * vstride;
    float dots[ATTN_QB];
    vstore4(attn_dot4(qv, kr, d), 0, dots);
    for (uint r = 0; r < rows; ++r) {
      if (j >= nkeys[r]) continue;
      const float s = attn_score(dots[r], scale);
      const float m_new = nan_max(m[r], s);
      if (m_new == -INFINITY) continue;  // only -Inf scores so far: they weigh 0
      const float corr = nat_exp(nat_add(m[r], -m_new));
      const float p = nat_exp(nat_add(s, -m_new));
      l[r] = nat_fma(l[r], corr, p);
      uint c = 0;
#if NAT_HW
      // Half units: o * corr rounded, then p * v added with one rounding (two half ops).
      for (; c < dv; ++c) o[r][c] = hw_fma(p, ld(vr, c), hw_mul(o[r][c], corr));
#else
      for (; c + 8u <= dv; c += 8u) {  // o*corr and p*v are exact products of stored values
        vstore8(round_sum8(vload8(0, o[r] + c) * corr, p * ld8(vr, c)), 0, o[r] + c);
      }
      for (; c < dv; ++c) o[r][c] = round_sum(o[r][c] * corr, p * ld(vr, c));
#endif
      m[r] = m_new;
    }
  }
#else
  // f32 softmax: the running max moves once per block of 16 keys, so exp runs on
  // vectors and o is rescaled once per block (the same result up to f32
  // rounding). Each k and v row loaded serves all ATTN_QB query rows.
  for (uint j0 = 0; j0 < kmax; j0 += 16u) {
    float s[ATTN_QB][16];
    for (uint jj = 0; jj < 16u; ++jj) {
      const uint j = j0 + jj;
      float dot[ATTN_QB] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (j < kmax) vstore4(attn_dot4(qv, kb + j * qstride, d), 0, dot);
#pragma unroll
      for (uint r = 0; r < ATTN_QB; ++r) s[r][jj] = j < nkeys[r] ? attn_score(dot[r], scale) : -INFINITY;
    }

    float p[ATTN_QB][16], corr[ATTN_QB];
    uint jr[ATTN_QB];  // keys of this block that row r takes (0: row unchanged)
    uint jmax = 0;
    #pragma unroll
    for (uint r = 0; r < ATTN_QB; ++r) {
      jr[r] = 0u;
      corr[r] = 1.0f;
      if (j0 >= nkeys[r]) continue;
      const float16 s16 = vload16(0, s[r]);
      const float m_new = nan_max(m[r], max16_nan(s16));
      if (m_new == -INFINITY) continue;  // only -Inf scores so far: they weigh 0
      jr[r] = min(16u, nkeys[r] - j0);
      jmax = max(jmax, jr[r]);
      corr[r] = exp(m[r] - m_new);
      const float16 p16 = exp(s16 - m_new);  // masked keys hold -Inf: p = 0
      vstore16(p16, 0, p[r]);
      l[r] = fma(l[r], corr[r], sum16(p16));
      m[r] = m_new;
    }

    // Usually every row takes the same keys: then the loop needs no per-row test. (A
    // skipped key must not enter even as 0 * v: v may be Inf or NaN.)
    bool uniform = true;
    #pragma unroll
    for (uint r = 0; r < ATTN_QB; ++r) uniform = uniform && jr[r] == jmax;
    const __global store_t* vj = vb + j0 * vstride;
    uint c = 0;
    if ((dv & 7u) == 0u) {
      for (; c < dv; c += 8u) {
        float8 acc[ATTN_QB];
        #pragma unroll
        for (uint r = 0; r < ATTN_QB; ++r) acc[r] = vload8(0, o[r] + c) * corr[r];
        if (uniform) {
          for (uint jj = 0; jj < jmax; ++jj) {
            const float8 vv = ld8(vj + jj * vstride, c);
            #pragma unroll
            for (uint r = 0; r < ATTN_QB; ++r) acc[r] = fma((float8)(p[r][jj]), vv, acc[r]);
          }
        } else {
          for (uint jj = 0; jj < jmax; ++jj) {
            const float8 vv = ld8(vj + jj * vstride, c);
            #pragma unroll
            for (uint r = 0; r < ATTN_QB; ++r) {
              if (jj < jr[r]) acc[r] = fma((float8)(p[r][jj]), vv, acc[r]);
            }
          }
        }
        #pragma unroll
        for (uint r = 0; r < ATTN_QB; ++r) vstore8(acc[r], 0, o[r] + c);
      }
    }
    for (; c < dv; ++c) {
      #pragma unroll
      for (uint r = 0; r < ATTN_QB; ++r) {
        float acc = o[r][c] * corr[r];
        for (uint jj = 0; jj < jr[r]; ++jj) acc = fma(p[r][jj], ld(vj + jj * vstride, c), acc);
        o[r][c] = acc;
      }
    }
  }
#endif

  for (uint r = 0; r < rows; ++r) {
    __global store_t* orow = out + (b * sq + i0 + r) * vstride + (ulong)h * dv;
    for (uint c = 0; c < dv; ++c) st(orow, c, o[r][c] / l[r]);
  }
}
#endif  // !FL_D

// ---------------------------------------------------------------------------
// CPU style, flash-blocked (attention_flash_cpu): f32 accumulation and f32
// softmax, no causal mask. Keys run along the vector lanes, so both products
// are GEMM-shaped micro-kernels that broadcast one scalar against 16-wide
// rows, as gemm_cpu does (no horizontal sums in the inner loops):
//   S (FQB rows x 32 keys) = Q . K^T, from K packed per (batch, head) as
//       [key block][d][32] (attn_pack_kt), Q transposed in private memory;
//   online softmax per row in base 2 (scores scaled by scale * log2(e),
//       then exp2: the same softmax, exp2 is the cheaper function), the
//       running max moved once per 32 keys (the same result up to f32
//       rounding); the running sums l are kept per lane and added up once at
//       the end;
//   O (FQB rows x dvp) = O * corr + P . V, from V packed as [key][dvp]
//       (attn_pack_v, dvp = dv rounded up to 16, zero-padded).
// Padded keys score -Inf and carry zero V rows, so they weigh exactly 0.
// Each work-item streams its head's packed K and V once for FQB query rows.

#define FQB 8
#define FQB_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define FKB 32  // keys per block

// K of one (batch, head) as [ceil(sk/FKB)][d][FKB] f32, keys past sk zero.
// Grid: (ceil(sk/FKB), heads, batch).
#ifndef FL_D
__kernel void attn_pack_kt(__global const store_t* k, __global float* kt, uint sk, uint heads, uint d) {
  const uint jb = (uint)get_global_id(0);
  const uint h = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  const uint nkb = (sk + FKB - 1u) / FKB;
  const ulong qstride = (ulong)heads * d;
  __global float* dst = kt + ((b * heads + h) * nkb + jb) * (ulong)d * FKB;
  for (uint jj = 0; jj < FKB; ++jj) {
    const uint j = jb * FKB + jj;
    const __global store_t* kr = k + (b * sk + j) * qstride + (ulong)h * d;
    for (uint c = 0; c < d; ++c) dst[c * FKB + jj] = j < sk ? ld(kr, c) : 0.0f;
  }
}

// V of one (batch, head) as [ceil(sk/FKB)*FKB][dvp] f32, zero-padded.
// Grid: (ceil(sk/FKB), heads, batch).
__kernel void attn_pack_v(__global const store_t* v, __global float* vp, uint sk, uint heads, uint dv, uint dvp) {
  const uint jb = (uint)get_global_id(0);
  const uint h = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  const uint nkb = (sk + FKB - 1u) / FKB;
  const ulong vstride = (ulong)heads * dv;
  __global float* dst = vp + ((b * heads + h) * nkb * FKB + jb * FKB) * (ulong)dvp;
  for (uint jj = 0; jj < FKB; ++jj) {
    const uint j = jb * FKB + jj;
    const __global store_t* vr = v + (b * sk + j) * vstride + (ulong)h * dv;
    for (uint c = 0; c < dvp; ++c) dst[jj * dvp + c] = j < sk && c < dv ? ld(vr, c) : 0.0f;
  }
}
#endif  // !FL_D

// Row r's scores are s_r (keys 0-15 of the block) and t_r (keys 16-31).
#define FL_DECL_S(r) float16 s##r = 0.0f, t##r = 0.0f;
#define FL_QK(r)                                     \
  {                                                  \
    const float16 qc = (float16)(qt[c * FQB + r]);   \
    s##r = fma(qc, k0, s##r);                        \
    t##r = fma(qc, k1, t##r);                        \
  }
#define FL_SCALE(r)                                           \
  s##r *= scale;                                              \
  t##r *= scale;                                              \
  if (partial) {                                              \
    s##r = select((float16)(-INFINITY), s##r, live0);         \
    t##r = select((float16)(-INFINITY), t##r, live1);         \
  }                                                           \
  nan_seen |= isnan(s##r) | isnan(t##r);
// Row maxima with fmax (a NaN score is found by nan_seen and handled apart).
#define FL_ROWMAX(r) max16(fmax(s##r, t##r))
#define FL_ROWMAX_NAN(r) nan_max(max16_nan(s##r), max16_nan(t##r))
// Probabilities, and the per-lane running sums l_r = l_r * corr + p.
#define FL_PROBS(r)                                                                     \
  {                                                                                     \
    const int16 skip = (int16)(none.s##r);                                              \
    const float16 ps = select(exp2(s##r - mn.s##r), (float16)(0.0f), skip);             \
    const float16 pt = select(exp2(t##r - mn.s##r), (float16)(0.0f), skip);             \
    vstore16(ps, 0, pb + r * FKB);                                                      \
    vstore16(pt, 0, pb + r * FKB + 16);                                                 \
    vstore16(fma(vload16(r, lv), (float16)(corr.s##r), ps + pt), r, lv);                \
  }
#define FL_DECL_O(r) float16 a##r = vload16(0, o + r * ATTN_MAX_D + c) * corr.s##r;
#define FL_PV(r) a##r = fma((float16)(pb[r * FKB + jj]), vv, a##r);
#define FL_PV_TAKE(r) \
  if (!none.s##r) a##r = fma((float16)(pb[r * FKB + jj]), vv, a##r);
#define FL_SAVE_O(r) vstore16(a##r, 0, o + r * ATTN_MAX_D + c);
// Two 16-wide column chunks of O at once: one broadcast of p feeds two FMAs.
#define FL_DECL_O2(r)                                            \
  float16 a##r = vload16(0, o + r * ATTN_MAX_D + c) * corr.s##r; \
  float16 b##r = vload16(0, o + r * ATTN_MAX_D + c + 16) * corr.s##r;
#define FL_PV2(r)                                   \
  {                                                 \
    const float16 pr = (float16)(pb[r * FKB + jj]); \
    a##r = fma(pr, vv, a##r);                       \
    b##r = fma(pr, vw, b##r);                       \
  }
#define FL_SAVE_O2(r)                        \
  vstore16(a##r, 0, o + r * ATTN_MAX_D + c); \
  vstore16(b##r, 0, o + r * ATTN_MAX_D + c + 16);

inline float max16(float16 x) {
  const float8 a = fmax(x.lo, x.hi);
  const float4 b = fmax(a.lo, a.hi);
  const float2 c = fmax(b.lo, b.hi);
  return fmax(c.x, c.y);
}

// Grid: (ceil(sq / FQB), heads, batch); one work-item per group.
#ifndef FL_D
__kernel void attention_flash_cpu(__global const store_t* q, __global const float* kt, __global const float* vp,
                                  __global store_t* out, uint sq, uint sk, uint heads, uint d, uint dv, uint dvp,
                                  float scale) {
  const uint i0 = (uint)get_global_id(0) * FQB;
  const uint h = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  if (i0 >= sq) return;
  // Scores in base 2 (s * scale * log2(e), then exp2): the same softmax, and exp2 is cheaper than exp.
  scale *= M_LOG2E_F;
  const uint rows = min((uint)FQB, sq - i0);
  const ulong qstride = (ulong)heads * d, vstride = (ulong)heads * dv;
  const uint nkb = (sk + FKB - 1u) / FKB;
  const ulong bh = b * heads + h;

  float qt[ATTN_MAX_D * FQB];  // Q^T: the FQB values of channel c are adjacent
  float o[FQB * ATTN_MAX_D];
  float pb[FQB * FKB];
  float lv[FQB * 16];  // per-lane running sums
  float8 m = (float8)(-INFINITY);
  for (uint r = 0; r < FQB; ++r) {
    const __global store_t* qr = q + (b * sq + i0 + r) * qstride + (ulong)h * d;
    for (uint c = 0; c < d; ++c) qt[c * FQB + r] = r < rows ? ld(qr, c) : 0.0f;  // rows past sq: never stored
    for (uint c = 0; c < dvp; ++c) o[r * ATTN_MAX_D + c] = 0.0f;
    vstore16((float16)(0.0f), r, lv);
  }
  const float16 lane = (float16)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f, 11.0f, 12.0f,
                                 13.0f, 14.0f, 15.0f);

  const __global float* kp = kt + bh * nkb * (ulong)d * FKB;
  const __global float* vb = vp + bh * nkb * FKB * (ulong)dvp;
  for (uint jb = 0; jb < nkb; ++jb, kp += d * FKB) {
    FQB_ROWS(FL_DECL_S)
    for (uint c = 0; c < d; ++c) {
      const float16 k0 = vload16(0, kp + c * FKB);
      const float16 k1 = vload16(0, kp + c * FKB + 16u);
      FQB_ROWS(FL_QK)
    }
    const bool partial = jb * FKB + FKB > sk;
    const float valid = (float)(sk - jb * FKB);
    const int16 live0 = isless(lane, (float16)(valid)), live1 = isless(lane + 16.0f, (float16)(valid));
    int16 nan_seen = 0;
    FQB_ROWS(FL_SCALE)
    float8 mx;
    if (!any(nan_seen)) {
      mx = (float8)(FL_ROWMAX(0), FL_ROWMAX(1), FL_ROWMAX(2), FL_ROWMAX(3), FL_ROWMAX(4), FL_ROWMAX(5),
                    FL_ROWMAX(6), FL_ROWMAX(7));
    } else {
      mx = (float8)(FL_ROWMAX_NAN(0), FL_ROWMAX_NAN(1), FL_ROWMAX_NAN(2), FL_ROWMAX_NAN(3), FL_ROWMAX_NAN(4),
                    FL_ROWMAX_NAN(5), FL_ROWMAX_NAN(6), FL_ROWMAX_NAN(7));
    }
    const float8 mn = select(select(mx, m, isgreaterequal(m, mx)), m, isnan(m));  // nan_max(m, mx)
    const int8 none = mn == (float8)(-INFINITY);  // -1 where the row takes no key yet
    const float8 corr = select(exp2(m - mn), (float8)(1.0f), none);
    FQB_ROWS(FL_PROBS)
    m = mn;
    const bool skipped = any(none);
    const __global float* vj = vb + (ulong)jb * FKB * dvp;
    uint c = 0;
    if (!skipped) {
      for (; c + 32u <= dvp; c += 32u) {
        FQB_ROWS(FL_DECL_O2)
        for (uint jj = 0; jj < FKB; ++jj) {
          const float16 vv = vload16(0, vj + jj * dvp + c);
          const float16 vw = vload16(0, vj + jj * dvp + c + 16u);
          FQB_ROWS(FL_PV2)
        }
        FQB_ROWS(FL_SAVE_O2)
      }
    }
    for (; c < dvp; c += 16u) {
      FQB_ROWS(FL_DECL_O)
      if (!skipped) {
        for (uint jj = 0; jj < FKB; ++jj) {
          const float16 vv = vload16(0, vj + jj * dvp + c);
          FQB_ROWS(FL_PV)
        }
      } else {
        for (uint jj = 0; jj < FKB; ++jj) {
          const float16 vv = vload16(0, vj + jj * dvp + c);
          FQB_ROWS(FL_PV_TAKE)
        }
      }
      FQB_ROWS(FL_SAVE_O)
    }
  }

  for (uint r = 0; r < rows; ++r) {
    const float l = sum16(vload16(r, lv));
    __global store_t* orow = out + (b * sq + i0 + r) * vstride + (ulong)h * dv;
    for (uint c = 0; c < dv; ++c) st(orow, c, o[r * ATTN_MAX_D + c] / l);
  }
}
#endif  // !FL_D

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
