// attention.cl: fused multi-head attention with an online softmax (SDPA /
// flash-like), the semantics of AttentionArgs in op_args.hpp:
//   s = round(scale * q.k), q.k accumulated per precision.accumulate (native:
//   every partial sum rounded to the dtype, the score rounded to the dtype);
//   otherwise kept in f32, or rounded to the dtype when softmax=native.
//   Over keys j ascending: m' = max(m, s); corr = exp(m - m'); p = exp(s - m');
//   l = l*corr + p; o = o*corr + p*v_j (softmax=native: every step rounded to
//   the dtype, products exact); out = o / l rounded once.
// The materialised implementations (bmm, sliced) run on the GEMM and softmax
// kernels (engine/backend/opencl/attention.cpp).
//
// CPU-friendly layout: each work-item owns ATTN_QB query rows of one head and
// walks the keys once for all of them (each k_j, v_j load serves QB rows), so
// there are no barriers and no local memory. Tensors are [batch, seq, heads*d].

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
  for (uint c = 0; c < d; ++c) acc = round_sum(acc, qv[c] * ld(kr, c));
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

inline float attn_score(float dot, float scale) {
#if defined(ACC_NATIVE) || defined(SOFTMAX_NATIVE)
  return round_affine(scale, dot, -0.0f);  // round_dtype(scale * dot), one rounding
#else
  return scale * dot;
#endif
}

// Grid: (ceil(sq / QB), heads, batch).
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
  for (uint r = 0; r < ATTN_QB; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    nkeys[r] = r < rows ? (causal ? min(i0 + r + 1u, sk) : sk) : 0u;
    kmax = max(kmax, nkeys[r]);
    if (r < rows) {
      const __global store_t* qr = q + (b * sq + i0 + r) * qstride + (ulong)h * d;
      for (uint c = 0; c < d; ++c) qv[r][c] = ld(qr, c);
      for (uint c = 0; c < dv; ++c) o[r][c] = 0.0f;
    }
  }

  const __global store_t* kb = k + b * sk * qstride + (ulong)h * d;
  const __global store_t* vb = v + b * sk * vstride + (ulong)h * dv;
  for (uint j = 0; j < kmax; ++j) {
    const __global store_t* kr = kb + j * qstride;
    const __global store_t* vr = vb + j * vstride;
    for (uint r = 0; r < rows; ++r) {
      if (j >= nkeys[r]) continue;
      const float s = attn_score(attn_dot(qv[r], kr, d), scale);
      const float m_new = nan_max(m[r], s);
      if (m_new == -INFINITY) continue;  // only -Inf scores so far: they weigh 0
#ifdef SOFTMAX_NATIVE
      const float corr = exp_round(round_sum(m[r], -m_new));
      const float p = exp_round(round_sum(s, -m_new));
      l[r] = round_sum(l[r] * corr, p);
      for (uint c = 0; c < dv; ++c) o[r][c] = round_sum(o[r][c] * corr, p * ld(vr, c));
#else
      const float corr = exp(m[r] - m_new);
      const float p = exp(s - m_new);
      l[r] = fma(l[r], corr, p);
      uint c = 0;
      if ((dv & 7u) == 0u) {
        for (; c < dv; c += 8u) vstore8(fma((float8)(p), ld8(vr, c), vload8(0, o[r] + c) * corr), 0, o[r] + c);
      }
      for (; c < dv; ++c) o[r][c] = fma(p, ld(vr, c), o[r][c] * corr);
#endif
      m[r] = m_new;
    }
  }

  for (uint r = 0; r < rows; ++r) {
    __global store_t* orow = out + (b * sq + i0 + r) * vstride + (ulong)h * dv;
    for (uint c = 0; c < dv; ++c) st(orow, c, o[r][c] / l[r]);
  }
}
