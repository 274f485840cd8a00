// softmax.cl: softmax over rows, one work-group per row (local size 1 on CPUs:
// one work-item walks its row in 16-wide vectors; a GPU group splits it).
//
// softmax=f32: max, exp and sum in f32, out = exp(x - max) / sum rounded once.
// softmax=native (-DSOFTMAX_NATIVE): as half kernels do, every step rounded to
// the dtype: p = round(exp(round(x - max))) (stored in out), the sum of p in
// memory order by one work-item (each partial sum rounded), then round(p / sum).
// A NaN anywhere in the row makes the whole row NaN (NaN-propagating max).
//
// Also serves attention's materialised scores: row r (query row0 + r of a
// head) uses only its first min((row0 + r) % causal_sq + 1, d) entries when
// causal_sq != 0 and writes zeros after them; the input may be f32 scores
// (softmax_rows_f32in) or stored values (softmax_rows).

static inline uint softmax_valid(ulong row, uint d, uint causal_sq) {
  return causal_sq ? min((uint)(row % causal_sq) + 1u, d) : d;
}

// Each work-item takes chunks of 16 consecutive entries (vector loads and exp).
#define NS_SOFTMAX_KERNEL(NAME, SRC_T, LD1, LD16)                                                          \
  __kernel void NAME(__global const SRC_T* x, ulong x_off, __global store_t* out, ulong out_off, uint d,   \
                     uint causal_sq, uint row0, __local float* scratch) {                                  \
    const ulong r = get_group_id(0);                                                                       \
    const uint lid = (uint)get_local_id(0), nl = (uint)get_local_size(0);                                  \
    const uint n = softmax_valid(r + row0, d, causal_sq);                                                  \
    x += x_off + r * d;                                                                                    \
    const ulong o = out_off + r * d;                                                                       \
    float m = -INFINITY;                                                                                   \
    for (uint j = lid * 16u; j < n; j += nl * 16u) {                                                       \
      if (j + 16u <= n) {                                                                                  \
        float t[16];                                                                                       \
        vstore16(LD16(x, j), 0, t);                                                                        \
        for (uint i = 0; i < 16u; ++i) m = nan_max(m, t[i]);                                               \
      } else {                                                                                             \
        for (uint i = j; i < n; ++i) m = nan_max(m, LD1(x, i));                                            \
      }                                                                                                    \
    }                                                                                                      \
    m = wg_max(m, scratch);                                                                                \
    NS_SOFTMAX_BODY(LD1, LD16)                                                                             \
    for (uint j = n + lid; j < d; j += nl) st(out, o + j, 0.0f);                                           \
  }

#ifdef SOFTMAX_NATIVE
#define NS_SOFTMAX_BODY(LD1, LD16)                                                           \
  for (uint j = lid; j < n; j += nl) st(out, o + j, nat_exp(nat_add(LD1(x, j), -m)));        \
  barrier(CLK_GLOBAL_MEM_FENCE);                                                             \
  if (lid == 0) {                                                                            \
    float sum = 0.0f;                                                                        \
    for (uint j = 0; j < n; ++j) sum = nat_add(sum, ld(out, o + j));                         \
    scratch[0] = sum;                                                                        \
  }                                                                                          \
  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);                                       \
  const float sum = scratch[0];                                                              \
  for (uint j = lid; j < n; j += nl) st(out, o + j, ld(out, o + j) / sum);
#else
#define NS_SOFTMAX_BODY(LD1, LD16)                                                           \
  float16 part16 = 0.0f;                                                                     \
  float part = 0.0f;                                                                         \
  for (uint j = lid * 16u; j < n; j += nl * 16u) {                                           \
    if (j + 16u <= n) {                                                                      \
      part16 += exp(LD16(x, j) - m);                                                         \
    } else {                                                                                 \
      for (uint i = j; i < n; ++i) part += exp(LD1(x, i) - m);                               \
    }                                                                                        \
  }                                                                                          \
  const float sum = wg_sum(part + lane_sum16(part16), scratch);                              \
  for (uint j = lid * 16u; j < n; j += nl * 16u) {                                           \
    if (j + 16u <= n) {                                                                      \
      st16(out, o + j, exp(LD16(x, j) - m) / sum);                                           \
    } else {                                                                                 \
      for (uint i = j; i < n; ++i) st(out, o + i, exp(LD1(x, i) - m) / sum);                 \
    }                                                                                        \
  }
#endif

#define NS_LD_F32(p, i) ((p)[(i)])
#define NS_LD16_F32(p, i) vload16(0, (p) + (i))
NS_SOFTMAX_KERNEL(softmax_rows, store_t, ld, ld16)
NS_SOFTMAX_KERNEL(softmax_rows_f32in, float, NS_LD_F32, NS_LD16_F32)
