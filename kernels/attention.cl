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
static inline float attn_dot(const float* qv, __global const store_t* kr, uint d) {
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
static inline float4 attn_dot4(float qv[ATTN_QB][ATTN_MAX_D], __global const store_t* kr, uint d) {
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

// NaN-propagating maximum of the 16 lanes.
static inline float max16_nan(float16 x) {
  if (any(isnan(x))) return NAN;
  const float8 a = fmax(x.lo, x.hi);
  const float4 b = fmax(a.lo, a.hi);
  const float2 c = fmax(b.lo, b.hi);
  return fmax(c.x, c.y);
}

static inline float attn_score(float dot, float scale) {
#if defined(ACC_NATIVE) || defined(SOFTMAX_NATIVE)
  return round_affine(scale, dot, -0.0f);  // round_dtype(scale * dot), one rounding
#else
  return scale * dot;
#endif
}

// Grid: (ceil(sq / QB), heads, batch).
// The kernels other than attention_flash are left out of the flash programs
// (-DFL_D ...: one program per tile set): a GPU compiler builds every kernel
// of a program, seconds each on NVIDIA. In the CPU family this kernel has a
// program of its own (-DATTN_FUSED): there it only runs native precision (and
// the rare call whose packed K and V would not fit one allocation), while
// every other attention takes attention_flash_cpu; apart, a default run does
// not build it (1.8 s of a 2-core cold start's compiler time).
#if !defined(FL_D) && !defined(FM_DK) && (!defined(CPU_KERNELS) || defined(ATTN_FUSED))
__kernel CPU_ONE_ITEM void attention_fused(__global const store_t* q, __global const store_t* k,
                                           __global const store_t* v, __global store_t* out, uint sq, uint sk,
                                           uint heads, uint d, uint dv, float scale, int causal) {
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
      l[r] = fma(l[r], corr[r], lane_sum16(p16));
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
#endif  // !FL_D && !FM_DK && (!CPU_KERNELS || ATTN_FUSED)

// The flash-blocked kernels by family, in kernels/attention/ (spliced in at
// build time): flash_cpu (attn_pack_kt, attn_pack_v, attention_flash_cpu),
// flash_gpu (attention_flash), flash_mma (attention_flash_mma, tensor cores).
#include "attention/flash_cpu.cl"
#include "attention/flash_gpu.cl"
#include "attention/flash_mma.cl"
