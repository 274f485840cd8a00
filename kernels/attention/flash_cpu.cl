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
//   the scores of FLB key blocks (a softmax block) go to a private buffer, then
//   m' = max(m, S_0..S_n-1), lane by lane; P_j = exp2(S_j - m') in place;
//       l = l * exp2(m - m') + sum_j P_j (the running max moves once per
//       softmax block: the same result up to f32 rounding);
//   O^T[col] = O^T[col] * exp2(m - m') + sum_j P_j * V[j][col], FV columns
//       at a time (8; 4 per half at two halves) against the softmax block's P, from V packed as [key][dvp]
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
// Inf in their V must not reach it). A NaN score makes its row's P and l NaN
// from there on: the whole row comes out NaN, as the reference. With `causal`,
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
#elif FLW == 16 && FLH == 1
#define FK 16
#define FK_KEYS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#elif FLW == 8 && FLH == 2
#define FK 6
#define FK_KEYS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#elif FLW == 8 && FLH == 1
#define FK 12
#define FK_KEYS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#else
#error "FLW 16 or 8, FLH 1 or 2"
#endif
#define FR (FLW * FLH)  // query rows per work-item
// Key blocks per softmax block (-DFLB, attention.cpp: 48-64 keys): the scores leave the registers FK keys at a
// time for a private buffer, and the softmax's work per block (the new maximum's exp2 and rescale test, l, and
// O's loads, rescale and stores around P.V, one pass of FV columns per block) is paid once per FLB * FK keys
// instead of once per FK. On a 2-core AVX2 Zen 3 at 16 rows x 6 keys, 8 key blocks (48 keys) against the
// kernel before (one block's softmax in registers), alternating runs: the UNet's 4096-token self attention
// (8 x 40 heads) 548 -> 493 ms (medians), the 1024-token one 72 -> 65 ms, the 256-token one (8 x 160) 1.3x, the
// 77-key cross attentions 1.04-1.34x (bench/README.md); 12 and 16 blocks measured within the noise of 8.
#ifndef FLB
#define FLB 8
#endif
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

// Per key j of key block jj (of a softmax block) and half h (the half's vector of rows); Q^T, O^T and m, l hold
// the halves of a channel (of m, of l) side by side: vector c * FLH + h.
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
#define FL_SB(j, h) sb[(jj * FK + (j)) * FLH + (h)]  // key j of key block jj, half h, in the softmax block
#define FL_STORE_S_H(j, h) FL_SB(j, h) = s##j##_##h;
#define FL_STORE_S(j) FL_HALVES(FL_STORE_S_H, j)
#define FL_LOAD_ML(h)                       \
  floatw m##h = vloadw(h, ml);              \
  floatw l##h = vloadw(FLH + (h), ml);      \
  const intw last##h = (intw)((int)(i0 + (h) * FLW)) + FL_LANES;  // causal: each lane's last key
#define FL_SAVE_ML(h)     \
  fl_store(m##h, h, ml);  \
  fl_store(l##h, FLH + (h), ml);
// Over the scores of a softmax block's nb key blocks in sb: each half's new running max mn (fmax skips a NaN
// score, but its P is NaN, so the row's l turns NaN and stays NaN, and every O / l of the row comes out NaN, as
// the reference's), the rows that take no key yet (the reference skips them; their P are exp2(-Inf - 0) = 0),
// the rescale, P in place of S, and l.
#define FL_MAX_H(j, h) mn##h = fmax(mn##h, FL_SB(j, h));
#define FL_MAX(j) FL_HALVES(FL_MAX_H, j)
#define FL_P_H(j, h)                               \
  {                                                \
    const floatw pk = fl_exp2(FL_SB(j, h) - mb##h); \
    FL_SB(j, h) = pk;                              \
    ps##h += pk;                                   \
  }
#define FL_P(j) FL_HALVES(FL_P_H, j)
#define FL_SOFTMAX_INIT(h) floatw mn##h = m##h;
#define FL_SOFTMAX_P(h)                                            \
  const intw none##h = mn##h == (floatw)(-INFINITY);               \
  const floatw mb##h = select(mn##h, (floatw)(0.0f), none##h);     \
  const floatw corr##h = fl_exp2(m##h - mb##h);                    \
  floatw ps##h = 0.0f;
#define FL_SOFTMAX_L(h) l##h = fma(l##h, corr##h, ps##h);
#define FL_SOFTMAX                                                 \
  FL_EACH_HALF(FL_SOFTMAX_INIT)                                    \
  for (uint jj = 0; jj < nb; ++jj) {                               \
    FK_KEYS(FL_MAX)                                                \
  }                                                                \
  FL_EACH_HALF(FL_SOFTMAX_P)                                       \
  for (uint jj = 0; jj < nb; ++jj) {                               \
    FK_KEYS(FL_P)                                                  \
  }                                                                \
  FL_EACH_HALF(FL_SOFTMAX_L)
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
#define FL_P_OF_KEY(j, h) const floatw p##h = FL_SB(j, h);
#define FL_PV_KEY(j, COL)                                 \
  {                                                       \
    const __global float* vr = vc + (jj * FK + (j)) * dvp; \
    FL_HALVES(FL_P_OF_KEY, j)                             \
    FV_COLS(COL)                                          \
  }
#define FL_PV(j) FL_PV_KEY(j, FL_PV_COL)
#define FL_PV_TAKE(j) FL_PV_KEY(j, FL_PV_COL_TAKE)  // rows that take no key yet keep their O (0 * Inf would be NaN)
#define FL_SAVE_O_H(x, h) fl_store(o##x##_##h, (x) * FLH + (h), oc);
#define FL_SAVE_O(x) FL_HALVES(FL_SAVE_O_H, x)

// Grid: (ceil(sq / (FR * groups)), heads, batch); one work-item per group.
// A work-item takes `groups` blocks of FR query rows and walks the keys in
// chunks of `chunk` key blocks (whole softmax blocks: a multiple of FLB,
// attention.cpp): each chunk of packed K and V is read from memory once for
// all its row blocks, then from the caches (one row block per
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
  floatw sb[FLB * FK * FLH];  // one softmax block's S, then P: key k's half h at k * FLH + h

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
      for (uint jb0 = kb0; jb0 < kb1; jb0 += FLB) {  // a softmax block: nb key blocks
        const uint nb = min((uint)FLB, kb1 - jb0);
        for (uint jj = 0; jj < nb; ++jj, kp += d * FK) {
          const uint jb = jb0 + jj;
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
          FK_KEYS(FL_STORE_S)
        }
        FL_SOFTMAX
        const bool skipping = false FL_EACH_HALF(FL_ANY_NONE);
        const bool rescale = false FL_EACH_HALF(FL_MOVED);
        FL_EACH_HALF(FL_TAKE_MAX)
        const __global float* vj = vb + (ulong)jb0 * FK * dvp;
        for (uint c = 0; c < dvp; c += FV) {
          __local float* oc = ot + c * FR;
          const __global float* vc = vj + c;
          FV_COLS(FL_DECL_O)
          if (rescale) {
            FV_COLS(FL_RESCALE)
          }
          if (!skipping) {
            for (uint jj = 0; jj < nb; ++jj) {
              FK_KEYS(FL_PV)
            }
          } else {
            for (uint jj = 0; jj < nb; ++jj) {
              FK_KEYS(FL_PV_TAKE)
            }
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

