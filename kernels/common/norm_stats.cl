// ---------------------------------------------------------------------------
// Norm statistics of x[base, base + count), computed by the whole work-group;
// returns (mean, rstd). f32 accumulation: two passes (mean, then centred
// squares) with f32 partial sums; by a work-group of one (the CPU style) chunk
// by chunk (norm_stats_chunked), x read once. Native: one work-item sums x and x*x in
// memory order, every partial sum rounded to the dtype (op_args.hpp), then
// mean = sum / n, var = max(sumsq / n - mean^2, 0) in f32 as the reference.
// scratch: max(2, local size) floats.
static inline __attribute__((always_inline)) float2 norm_stats(__global const store_t* x, ulong base, ulong count,
                                                               float eps, __local float* scratch) {
  const uint lid = (uint)get_local_id(0), nl = (uint)get_local_size(0);
#ifdef ACC_NATIVE
  if (lid == 0) {
    float sum = 0.0f, sumsq = 0.0f;
    ulong i = 0;
    for (; i + 16u <= count; i += 16u) {
      float v[16];
      vstore16(ld16(x, base + i), 0, v);
      for (uint j = 0; j < 16u; ++j) {
        sum = nat_add(sum, v[j]);
        sumsq = nat_fma(v[j], v[j], sumsq);
      }
    }
    for (; i < count; ++i) {
      const float v = ld(x, base + i);
      sum = nat_add(sum, v);
      sumsq = nat_fma(v, v, sumsq);
    }
    const float n = (float)count;
    const float mean = sum / n;
    float var = sumsq / n - mean * mean;
    if (var < 0.0f) var = 0.0f;  // cancellation; a NaN variance stays NaN
    scratch[0] = mean;
    scratch[1] = 1.0f / sqrt(var + eps);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float2 r = (float2)(scratch[0], scratch[1]);
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#else
  if (nl == 1) return norm_stats_chunked(x, base, count, eps);
  // Summed about the first value (the shifted-data form): the mean's rounding errors are then of the spread's
  // size, not of the mean's (norm_stats_chunked).
  const float shift = ld(x, base);
  float16 acc = 0.0f;
  float tail = 0.0f;
  for (ulong i = (ulong)lid * 16u; i < count; i += (ulong)nl * 16u) {
    if (i + 16u <= count) {
      acc += ld16(x, base + i) - shift;
    } else {
      for (ulong j = i; j < count; ++j) tail += ld(x, base + j) - shift;
    }
  }
  const float mean = wg_sum(lane_sum16(acc) + tail, scratch) / (float)count;  // of x - shift
  acc = 0.0f;
  tail = 0.0f;
  for (ulong i = (ulong)lid * 16u; i < count; i += (ulong)nl * 16u) {
    if (i + 16u <= count) {
      const float16 d = (ld16(x, base + i) - shift) - mean;
      acc = fma(d, d, acc);
    } else {
      for (ulong j = i; j < count; ++j) {
        const float d = (ld(x, base + j) - shift) - mean;
        tail = fma(d, d, tail);
      }
    }
  }
  const float var = wg_sum(lane_sum16(acc) + tail, scratch) / (float)count;
  return (float2)(shift + mean, 1.0f / sqrt(var + eps));
#endif
}

