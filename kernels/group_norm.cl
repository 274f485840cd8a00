// group_norm.cl: statistics per (sample, group of c/groups channels) over all
// their positions (norm_stats in common.cl), then a per-channel affine:
// out = ((x - mean) * rstd) * gamma + beta in f32, rounded once. With `act`,
// out = silu(that value rounded to the storage dtype): GROUP_NORM then SILU,
// bit for bit, without writing and reading the normalised tensor.
// One work-group per (sample, group); grid = local size * n * groups. stream: the output goes around the
// caches (common.cl, st16_stream).
__kernel void group_norm(__global const store_t* x, __global const store_t* gamma, __global const store_t* beta,
                         __global store_t* out, uint c, ulong s, uint groups, float eps, int has_gamma, int has_beta,
                         int act, uint stream, __local float* scratch) {
  const uint job = (uint)get_group_id(0);
  const uint lid = (uint)get_local_id(0), nl = (uint)get_local_size(0);
  const uint cg = c / groups;
  const ulong base = (ulong)job * cg * s;  // a group is one contiguous run of [cg, s]
  const float2 st = norm_stats(x, base, (ulong)cg * s, eps, scratch);
  const float mean = st.x, rstd = st.y;
  const uint c0 = (job % groups) * cg;
  for (uint ci = 0; ci < cg; ++ci) {
    const float g = has_gamma ? ld(gamma, c0 + ci) : 1.0f;
    const float b = has_beta ? ld(beta, c0 + ci) : 0.0f;
    const ulong row = base + (ulong)ci * s;
    for (ulong j = (ulong)lid * 16u; j < s; j += (ulong)nl * 16u) {
      if (j + 16u <= s) {
        const float16 y = ((ld16(x, row + j) - mean) * rstd) * g + b;
        st16_stream(out, row + j, act ? silu16(round_store16(y)) : y, stream);
      } else {
        for (ulong i = j; i < s; ++i) {
          const float y = ((ld(x, row + i) - mean) * rstd) * g + b;
          st(out, row + i, act ? silu1(round_store(y)) : y);
        }
      }
    }
  }
}
