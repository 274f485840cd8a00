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

// ---------------------------------------------------------------------------
// CPU style, flash-blocked (attention_flash_cpu): f32 accumulation and f32
// softmax, with or without a causal mask. Query rows run along the vector lanes (FR per
// work-item) and the FK keys of a block along registers, so both products are
// GEMM-shaped micro-kernels that broadcast one stored value against a vector
// of FR rows, and the softmax needs no horizontal reductions:
//   S_j (FR rows, key j) = sum_c Q^T[c] * K[j][c]: Q transposed into private
//       memory once, scaled by scale * log2(e) (the scores come out in base 2:
//       the same softmax through exp2, the cheaper function), against K
//       packed per (batch, head) as [key block][d][FK] (attn_pack_kt);
//   m' = max(m, S_0..S_FK-1), lane by lane; P_j = exp2(S_j - m');
//       l = l * exp2(m - m') + sum_j P_j (the running max moves once per
//       block: the same result up to f32 rounding);
//   O^T[col] = O^T[col] * exp2(m - m') + sum_j P_j * V[j][col], FV columns
//       at a time (8; 4 per half at 32 rows) against the block's P, from V packed as [key][dvp]
//       (attn_pack_v, dvp = dv rounded up to 8: SD's heads 40-160 need no
//       padding). The rescale is skipped when no row's maximum moved.
// Against the kernel before (keys along the lanes, 8 rows x 32 keys in 16-wide
// vectors: 20-25% of the f32 peak on a 2-core AVX2 EPYC, where this one runs
// 1.2-2x faster at every SD 1.5 attention shape): no row maxima across lanes,
// no padding of SD 1.x's 40-wide heads to 48, and on AVX2 no accumulator
// spills (the one before spilled in both products).
// Padded keys score -Inf and carry zero V rows, so they weigh exactly 0; a row
// whose scores have all been -Inf so far takes none of the block's keys (its P
// are exp2(-Inf - 0) = 0 and its O is kept, as the reference skips them: an
// Inf in their V must not reach it). A NaN score makes its row's maximum NaN
// (nan_max), as the reference: the whole row comes out NaN. With `causal`,
// row i takes keys 0..i (attention_fused's mask): the blocks past the last
// row's key are not visited, and in the blocks that reach past a row's own
// index those keys score -Inf, lane by lane.
// Each work-item streams its head's packed K and V once for FR query rows.

// The lanes follow the device's native float vectors (-DFLW, attention.cpp),
// and a work-item takes FLH halves of FLW query rows (-DFLH, 1 or 2):
//   FLW 16, FLH 2: 32 rows x 8 keys, the AVX-512 default. Each broadcast key
//     value (QK) and V value (PV) feeds both halves: 10 loads per 16 FMAs in
//     QK and 1 broadcast per 2 FMAs in PV, against 17 per 16 and 1 per FMA at
//     16 rows, which CPUs with two 512-bit FMAs beside two loads a cycle
//     (Intel's Xeons, Zen 5) could not keep fed. 16 score vectors, and in P.V
//     4 columns of O per half beside them. On a 2-core Zen 5: the UNet's
//     8 x 40 heads 1.09-1.21x faster than at 16 rows (61-67% of the peak),
//     the VAE's 512-wide head 1.17-1.26x (76-80%).
//   FLW 16, FLH 1: 16 rows x 16 keys (32 registers hold the 16 score vectors
//     and, in P.V, the 16 P vectors beside 8 columns of O).
//   FLW 8, FLH 2: 16 rows x 6 keys, the AVX2 default (16 registers: 12 score
//     vectors, the two halves of Q and a broadcast key value). 8 loads per 12
//     FMAs in QK and 6 per 8 in P.V, against 13 per 12 and 9 per 8 at 8 rows.
//     On a 2-core first-generation Zen (256-bit FMAs issued as two halves):
//     the UNet's 8 x 40 heads at 4096 tokens 1.18x faster than at 8 rows
//     (59% of the peak against 51%); 5 and 7 keys were slower (7: 14 score
//     vectors and Q no longer fit).
//   FLW 8, FLH 1: 8 rows x 12 keys.
#ifndef FLW
#define FLW 16
#endif
#ifndef FLH
#define FLH 1
#endif
#if FLW == 16 && FLH == 2
#define FK 8  // keys per block
#define FK_KEYS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define FK_KEYS_H(X, h) X(0, h) X(1, h) X(2, h) X(3, h) X(4, h) X(5, h) X(6, h) X(7, h)
#define FL_PSUM(h) (((s0_##h + s1_##h) + (s2_##h + s3_##h)) + ((s4_##h + s5_##h) + (s6_##h + s7_##h)))
#elif FLW == 16 && FLH == 1
#define FK 16
#define FK_KEYS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define FK_KEYS_H(X, h) \
  X(0, h) X(1, h) X(2, h) X(3, h) X(4, h) X(5, h) X(6, h) X(7, h) X(8, h) X(9, h) X(10, h) X(11, h) X(12, h) X(13, h) X(14, h) X(15, h)
#define FL_PSUM(h)                                                                                                    \
  ((((s0_##h + s1_##h) + (s2_##h + s3_##h)) + ((s4_##h + s5_##h) + (s6_##h + s7_##h))) +                             \
   (((s8_##h + s9_##h) + (s10_##h + s11_##h)) + ((s12_##h + s13_##h) + (s14_##h + s15_##h))))
#elif FLW == 8 && FLH == 2
#define FK 6
#define FK_KEYS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define FK_KEYS_H(X, h) X(0, h) X(1, h) X(2, h) X(3, h) X(4, h) X(5, h)
#define FL_PSUM(h) (((s0_##h + s1_##h) + (s2_##h + s3_##h)) + (s4_##h + s5_##h))
#elif FLW == 8 && FLH == 1
#define FK 12
#define FK_KEYS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define FK_KEYS_H(X, h) X(0, h) X(1, h) X(2, h) X(3, h) X(4, h) X(5, h) X(6, h) X(7, h) X(8, h) X(9, h) X(10, h) X(11, h)
#define FL_PSUM(h) \
  ((((s0_##h + s1_##h) + (s2_##h + s3_##h)) + ((s4_##h + s5_##h) + (s6_##h + s7_##h))) + ((s8_##h + s9_##h) + (s10_##h + s11_##h)))
#else
#error "FLW 16 or 8, FLH 1 or 2"
#endif
#define FR (FLW * FLH)  // query rows per work-item
// The halves of a work-item's rows: X(a, h) for each half h (variables suffixed _h: s3_1 is key 3's scores
// of the second half).
#if FLH == 2
#define FL_HALVES(X, a) X(a, 0) X(a, 1)
#define FL_EACH_HALF(X) X(0) X(1)
#else
#define FL_HALVES(X, a) X(a, 0)
#define FL_EACH_HALF(X) X(0)
#endif
#if FLW == 16
#define floatw float16
#define intw int16
#define FL_LANES (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define vloadw vload16
#define as_floatw as_float16
#define as_uintw as_uint16
#else
#define floatw float8
#define intw int8
#define FL_LANES (int8)(0, 1, 2, 3, 4, 5, 6, 7)
#define vloadw vload8
#define as_floatw as_float8
#define as_uintw as_uint8
#endif
// 2^x for the softmax, x <= 0 or NaN here. PoCL's exp2() costs 14% of the
// kernel's time at d = 40; this is the vector form: x = k + f, k the nearest
// integer (by adding 1.5 * 2^23 + 127: the sum's low mantissa bits hold k + 127,
// the exponent field's bits once shifted), |f| <= 1/2, 2^f by Cephes' exp2f
// polynomial (1.7e-7 relative). -Inf gives exactly 0 (padded keys weigh
// nothing), 0 gives exactly 1 (the rescale test), NaN stays NaN; x <= -126.5
// gives 0 (k = -127: a zero exponent field), the subnormal results above it
// are approximate (weights below 2^-126 of the row's largest).
static inline floatw fl_exp2(floatw x) {
  x = select(x, (floatw)(-127.0f), (intw)(x < -127.0f));  // NaN compares false: kept
  const floatw t = x + 12583039.0f;                         // 1.5 * 2^23 + 127, rounded to an integer
  const floatw f = x - (t - 12583039.0f);
  floatw p = fma(f, (floatw)(1.535336188319500e-4f), (floatw)(1.339887440266574e-3f));
  p = fma(p, f, (floatw)(9.618437357674640e-3f));
  p = fma(p, f, (floatw)(5.550332471162809e-2f));
  p = fma(p, f, (floatw)(2.402264791363012e-1f));
  p = fma(p, f, (floatw)(6.931472028550421e-1f));
  p = fma(p, f, (floatw)(1.0f));
  return p * as_floatw(as_uintw(t) << 23);
}
// Vector i of a work-item's state (local memory, every vector at a multiple of FLW floats: the state's blocks
// are FR floats apart) as one store: vstore16 there splits a 16-wide store into three (16, 16 and 32 bytes) in
// PoCL's build, which was 15-20% of the kernel's samples in the saves of O.
static inline void fl_store(floatw x, uint i, __local float* p) { *(__local floatw*)(p + i * FLW) = x; }
// Columns of O per pass over a block's P (the packed V's rows are whole passes of 8: attention.cpp).
#if FLH == 2
#define FV 4
#define FV_COLS(X) X(0) X(1) X(2) X(3)
#else
#define FV 8
#define FV_COLS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#endif

// K of one (batch, head) as [ceil(sk/FK)][d][FK] f32, keys past sk zero.
// Grid: (ceil(sk/FK), heads, batch). The CPU flash kernel and its packing
// kernels are left out of the GPU family's programs (-DGPU_KERNELS): a GPU
// compiler builds every kernel of a program, and attention_flash_cpu's
// 16-wide vectors were four fifths of the GPU-style fused attention program
// (the text encoder's, the longest build of a cold start on NVIDIA).
#if !defined(FL_D) && !defined(FM_DK) && !defined(GPU_KERNELS) && !defined(ATTN_FUSED)
__kernel CPU_ONE_ITEM void attn_pack_kt(__global const store_t* k, __global float* kt, uint sk, uint heads, uint d) {
  const uint jb = (uint)get_global_id(0);
  const uint h = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  const uint nkb = (sk + FK - 1u) / FK;
  const ulong qstride = (ulong)heads * d;
  __global float* dst = kt + ((b * heads + h) * nkb + jb) * (ulong)d * FK;
  for (uint jj = 0; jj < FK; ++jj) {
    const uint j = jb * FK + jj;
    const __global store_t* kr = k + (b * sk + j) * qstride + (ulong)h * d;
    // 16 values at a time: for f16 the CPU's conversion instruction (a scalar ld() is its exact integer emulation).
    uint c = 0;
    if (j < sk) {
      for (; c + 16u <= d; c += 16u) {
        float t[16];
        vstore16(ld16(kr, c), 0, t);
        for (uint i = 0; i < 16u; ++i) dst[(c + i) * FK + jj] = t[i];
      }
      for (; c < d; ++c) dst[c * FK + jj] = ld(kr, c);
    }
    for (; c < d; ++c) dst[c * FK + jj] = 0.0f;
  }
}

// V of one (batch, head) as [ceil(sk/FK)*FK][dvp] f32, zero-padded.
// Grid: (ceil(sk/FK), heads, batch).
__kernel CPU_ONE_ITEM void attn_pack_v(__global const store_t* v, __global float* vp, uint sk, uint heads, uint dv,
                                       uint dvp) {
  const uint jb = (uint)get_global_id(0);
  const uint h = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  const uint nkb = (sk + FK - 1u) / FK;
  const ulong vstride = (ulong)heads * dv;
  __global float* dst = vp + ((b * heads + h) * nkb * FK + jb * FK) * (ulong)dvp;
  for (uint jj = 0; jj < FK; ++jj) {
    const uint j = jb * FK + jj;
    const __global store_t* vr = v + (b * sk + j) * vstride + (ulong)h * dv;
    uint c = 0;
    if (j < sk) {
      for (; c + 16u <= dv; c += 16u) vstore16(ld16(vr, c), 0, dst + jj * dvp + c);  // as attn_pack_kt
      for (; c < dv; ++c) dst[jj * dvp + c] = ld(vr, c);
    }
    for (; c < dvp; ++c) dst[jj * dvp + c] = 0.0f;
  }
}
#endif  // !FL_D && !FM_DK && !GPU_KERNELS && !ATTN_FUSED

// Per key j and half h (the half's vector of rows); Q^T, O^T and m, l hold the halves of a channel (of m, of l)
// side by side: vector c * FLH + h.
#define FL_DECL_S_H(j, h) floatw s##j##_##h = 0.0f;
#define FL_DECL_S(j) FL_HALVES(FL_DECL_S_H, j)
#define FL_LOAD_Q(c, h) const floatw q##h = vloadw((c) * FLH + (h), qt);
#define FL_QK_H(j, h) s##j##_##h = fma(q##h, kj, s##j##_##h);
#define FL_QK(j)                          \
  {                                       \
    const floatw kj = (floatw)(kc[j]);    \
    FL_HALVES(FL_QK_H, j)                 \
  }
#define FL_NEG_INF_H(j, h) s##j##_##h = (floatw)(-INFINITY);
#define FL_MASK(j) \
  if (jb * FK + (j) >= sk) { FL_HALVES(FL_NEG_INF_H, j) }
#define FL_CAUSAL_H(j, h) \
  s##j##_##h = select(s##j##_##h, (floatw)(-INFINITY), (intw)((int)(jb * FK + (j))) > last##h);
#define FL_CAUSAL(j) FL_HALVES(FL_CAUSAL_H, j)
#define FL_MAX(j, h) mx##h = fmax(mx##h, s##j##_##h);
#define FL_SUM(j, h) +s##j##_##h
#define FL_NAN(j, h) | isnan(s##j##_##h)
#define FL_P(j, h) s##j##_##h = fl_exp2(s##j##_##h - mb##h);
#define FL_LOAD_ML(h)                       \
  floatw m##h = vloadw(h, ml);              \
  floatw l##h = vloadw(FLH + (h), ml);      \
  const intw last##h = (intw)((int)(i0 + (h) * FLW)) + FL_LANES;  // causal: each lane's last key
#define FL_SAVE_ML(h)     \
  fl_store(m##h, h, ml);  \
  fl_store(l##h, FLH + (h), ml);
// The half's new running max mn (nan_max(m, block): fmax drops NaN, a NaN row stays NaN), the rows that take
// no key yet (the reference skips them; their P are exp2(-Inf - 0) = 0), the rescale, P and l.
#define FL_SOFTMAX(h)                                                                     \
  floatw mx##h = m##h;                                                                    \
  FK_KEYS_H(FL_MAX, h)                                                                    \
  floatw mn##h = select(mx##h, m##h, isnan(m##h));                                        \
  if (any(isnan(0.0f FK_KEYS_H(FL_SUM, h)))) { /* a NaN score (or +Inf beside -Inf) */    \
    mn##h = select(mn##h, (floatw)(NAN), 0 FK_KEYS_H(FL_NAN, h));                         \
  }                                                                                       \
  const intw none##h = mn##h == (floatw)(-INFINITY);                                      \
  const floatw mb##h = select(mn##h, (floatw)(0.0f), none##h);                            \
  const floatw corr##h = fl_exp2(m##h - mb##h);                                           \
  FK_KEYS_H(FL_P, h)                                                                      \
  l##h = fma(l##h, corr##h, FL_PSUM(h));
#define FL_ANY_NONE(h) || any(none##h)
#define FL_MOVED(h) || any(m##h != mn##h)  // exp2(0) == 1 exactly: no row's maximum moved, no rescale
#define FL_TAKE_MAX(h) m##h = mn##h;
#define FL_DECL_O_H(x, h) floatw o##x##_##h = vloadw((x) * FLH + (h), oc);
#define FL_DECL_O(x) FL_HALVES(FL_DECL_O_H, x)
#define FL_RESCALE_H(x, h) o##x##_##h *= corr##h;
#define FL_RESCALE(x) FL_HALVES(FL_RESCALE_H, x)
#define FL_PV_COL_H(x, h) o##x##_##h = fma(p##h, vx, o##x##_##h);
#define FL_PV_COL_TAKE_H(x, h) o##x##_##h = select(fma(p##h, vx, o##x##_##h), o##x##_##h, none##h);
#define FL_PV_COL(x)                   \
  {                                    \
    const floatw vx = (floatw)(vr[x]); \
    FL_HALVES(FL_PV_COL_H, x)          \
  }
#define FL_PV_COL_TAKE(x)              \
  {                                    \
    const floatw vx = (floatw)(vr[x]); \
    FL_HALVES(FL_PV_COL_TAKE_H, x)     \
  }
#define FL_P_OF_KEY(j, h) const floatw p##h = s##j##_##h;
#define FL_PV_KEY(j, COL)                      \
  {                                            \
    const __global float* vr = vc + (j) * dvp; \
    FL_HALVES(FL_P_OF_KEY, j)                  \
    FV_COLS(COL)                               \
  }
#define FL_PV(j) FL_PV_KEY(j, FL_PV_COL)
#define FL_PV_TAKE(j) FL_PV_KEY(j, FL_PV_COL_TAKE)  // rows that take no key yet keep their O (0 * Inf would be NaN)
#define FL_SAVE_O_H(x, h) fl_store(o##x##_##h, (x) * FLH + (h), oc);
#define FL_SAVE_O(x) FL_HALVES(FL_SAVE_O_H, x)

// Grid: (ceil(sq / (FR * groups)), heads, batch); one work-item per group.
// A work-item takes `groups` blocks of FR query rows and walks the keys in
// chunks of `chunk` key blocks: each chunk of packed K and V is read from
// memory once for all its row blocks, then from the caches (one row block per
// pass streamed a large head's K and V from memory for every FR rows: the VAE's
// one-head attention at d = 512, 16384 tokens, is 64 MiB of K and V per pass,
// bandwidth-bound at 27% of the peak). Each row block's state (Q^T scaled,
// O^T, the running max m and sum l) lives in `state`, (d + dvp + 2) * FR floats
// per block. Every row still takes its keys in ascending blocks: the results
// do not depend on groups or chunk, bit for bit.
#if !defined(FL_D) && !defined(FM_DK) && !defined(GPU_KERNELS) && !defined(ATTN_FUSED)
__kernel CPU_ONE_ITEM void attention_flash_cpu(__global const store_t* q, __global const float* kt,
                                               __global const float* vp, __global store_t* out, __local float* state,
                                               uint groups, uint chunk, uint sq, uint sk, uint heads, uint d, uint dv,
                                               uint dvp, float scale, int causal) {
  const uint i00 = (uint)get_global_id(0) * FR * groups;
  const uint h = (uint)get_global_id(1);
  const ulong b = get_global_id(2);
  if (i00 >= sq) return;
  const float qscale = scale * M_LOG2E_F;
  const uint ng = min(groups, (sq - i00 + FR - 1u) / FR);  // row blocks with rows
  const uint gs = (d + dvp + 2u) * FR;                     // floats of state per row block
  const ulong qstride = (ulong)heads * d, vstride = (ulong)heads * dv;
  const uint nkb = (sk + FK - 1u) / FK;
  const ulong bh = b * heads + h;

  for (uint g = 0; g < ng; ++g) {
    const uint i0 = i00 + g * FR, rows = min((uint)FR, sq - i0);
    __local float* qt = state + g * gs;  // Q^T, scaled: the FR values of channel c are adjacent
    __local float* ot = qt + d * FR;  // O^T
    // Q's rows 8 channels at a time: for f16 the CPU's conversion instruction, where a scalar ld() is its exact
    // integer emulation (the UNet's Q and O in f16 made its attention 4-7% slower than in f32). Same values.
    for (uint r = 0; r < FR; ++r) {
      const __global store_t* qr = q + (b * sq + i0 + r) * qstride + (ulong)h * d;
      uint c = 0;
      if (r < rows) {
        for (; c + 8u <= d; c += 8u) {
          float t[8];
          vstore8(ld8(qr, c) * qscale, 0, t);
          for (uint i = 0; i < 8u; ++i) qt[(c + i) * FR + r] = t[i];
        }
        for (; c < d; ++c) qt[c * FR + r] = ld(qr, c) * qscale;
      }
      for (; c < d; ++c) qt[c * FR + r] = 0.0f;  // rows past sq: never stored
    }
    for (uint c = 0; c < dvp * FLH; ++c) fl_store((floatw)(0.0f), c, ot);
    for (uint h = 0; h < FLH; ++h) {
      fl_store((floatw)(-INFINITY), h, ot + dvp * FR);  // m
      fl_store((floatw)(0.0f), FLH + h, ot + dvp * FR);  // l
    }
  }

  const uint last_row = min(sq, i00 + ng * FR) - 1u;
  const uint nkb_all = causal ? min(nkb, last_row / FK + 1u) : nkb;  // blocks with a key some row takes
  for (uint kb0 = 0; kb0 < nkb_all; kb0 += chunk) {
    for (uint g = 0; g < ng; ++g) {
      const uint i0 = i00 + g * FR, rows = min((uint)FR, sq - i0);
      const uint nkb_run = causal ? min(nkb, (i0 + rows - 1u) / FK + 1u) : nkb;
      const uint kb1 = min(kb0 + chunk, nkb_run);
      if (kb0 >= kb1) continue;
      __local float* qt = state + g * gs;
      __local float* ot = qt + d * FR;
      __local float* ml = ot + dvp * FR;
      FL_EACH_HALF(FL_LOAD_ML)
      const __global float* kp = kt + (bh * nkb + kb0) * (ulong)d * FK;
      const __global float* vb = vp + bh * nkb * FK * (ulong)dvp;
      for (uint jb = kb0; jb < kb1; ++jb, kp += d * FK) {
        FK_KEYS(FL_DECL_S)
        for (uint c = 0; c < d; ++c) {
          FL_HALVES(FL_LOAD_Q, c)
          const __global float* kc = kp + c * FK;
          FK_KEYS(FL_QK)
        }
        if (jb * FK + FK > sk) {
          FK_KEYS(FL_MASK)
        }
        if (causal && jb * FK + FK - 1u > i0) {
          FK_KEYS(FL_CAUSAL)
        }
        FL_EACH_HALF(FL_SOFTMAX)
        const bool skipping = false FL_EACH_HALF(FL_ANY_NONE);
        const bool rescale = false FL_EACH_HALF(FL_MOVED);
        FL_EACH_HALF(FL_TAKE_MAX)
        const __global float* vj = vb + (ulong)jb * FK * dvp;
        for (uint c = 0; c < dvp; c += FV) {
          __local float* oc = ot + c * FR;
          const __global float* vc = vj + c;
          FV_COLS(FL_DECL_O)
          if (rescale) {
            FV_COLS(FL_RESCALE)
          }
          if (!skipping) {
            FK_KEYS(FL_PV)
          } else {
            FK_KEYS(FL_PV_TAKE)
          }
          FV_COLS(FL_SAVE_O)
        }
      }
      FL_EACH_HALF(FL_SAVE_ML)
    }
  }

  for (uint g = 0; g < ng; ++g) {
    const uint i0 = i00 + g * FR, rows = min((uint)FR, sq - i0);
    __local float* ot = state + g * gs + d * FR;
    // O / l for the FR rows at once, a half at a time (correctly rounded, as the scalar division; 16 scalar
    // divisions per channel were 2% of the 4096-token self attention and more of the 77-key cross attention),
    // then row by row.
    for (uint h = 0; h < FLH; ++h) {
      const floatw l = vloadw(FLH + h, ot + dvp * FR);
      for (uint c = 0; c < dv; ++c) fl_store(vloadw(c * FLH + h, ot) / l, c * FLH + h, ot);
    }
    for (uint r = 0; r < rows; ++r) {  // 8 channels a store, as Q's loads
      __global store_t* orow = out + (b * sq + i0 + r) * vstride + (ulong)h * dv;
      uint c = 0;
      for (; c + 8u <= dv; c += 8u) {
        float t[8];
        for (uint i = 0; i < 8u; ++i) t[i] = ot[(c + i) * FR + r];
        st8(orow, c, vload8(0, t));
      }
      for (; c < dv; ++c) st(orow, c, ot[c * FR + r]);
    }
  }
}
#endif  // !FL_D && !FM_DK && !GPU_KERNELS && !ATTN_FUSED

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
