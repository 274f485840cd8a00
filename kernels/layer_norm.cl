// layer_norm.cl: statistics per row over the last dimension (norm_stats in
// common.cl), then a per-feature affine: out = ((x - mean) * rstd) * gamma + beta
// in f32, rounded once. One work-group per row; grid = local size * rows.
__kernel void layer_norm(__global const store_t* x, __global const store_t* gamma, __global const store_t* beta,
                         __global store_t* out, ulong d, float eps, int has_gamma, int has_beta,
                         __local float* scratch) {
  const ulong row = (ulong)get_group_id(0) * d;
  const uint lid = (uint)get_local_id(0), nl = (uint)get_local_size(0);
  const float2 st = norm_stats(x, row, d, eps, scratch);
  const float mean = st.x, rstd = st.y;
  for (ulong j = (ulong)lid * 16u; j < d; j += (ulong)nl * 16u) {
    if (j + 16u <= d) {
      const float16 g = has_gamma ? ld16(gamma, j) : (float16)(1.0f);
      const float16 b = has_beta ? ld16(beta, j) : (float16)(0.0f);
      st16(out, row + j, ((ld16(x, row + j) - mean) * rstd) * g + b);
    } else {
      for (ulong i = j; i < d; ++i) {
        const float g = has_gamma ? ld(gamma, i) : 1.0f;
        const float b = has_beta ? ld(beta, i) : 0.0f;
        st(out, row + i, ((ld(x, row + i) - mean) * rstd) * g + b);
      }
    }
  }
}
