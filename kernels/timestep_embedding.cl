// timestep_embedding.cl: diffusers get_timestep_embedding. The frequency
// exponent and argument follow diffusers' f32 steps, as the reference does;
// sin/cos come from the device library (a few ulp from the reference's double).
//
// out[b, i] = sin(arg) and out[b, half + i] = cos(arg) (swapped when flip),
// arg = t[b] * exp((-log_period * i) / denom); an odd dim gets a zero last column.
// Grid: (half, batch).
__kernel void timestep_embedding(__global const float* timesteps, __global store_t* out, uint dim, uint half_dim,
                                 float log_period, float denom, int flip) {
  const uint i = (uint)get_global_id(0);
  const ulong b = get_global_id(1);
  const ulong row = b * dim;
  if (i < half_dim) {
    const float exponent = (-log_period * (float)i) / denom;
    const float arg = timesteps[b] * exp(exponent);
    const float s = sin(arg), c = cos(arg);
    st(out, row + i, flip ? c : s);
    st(out, row + half_dim + i, flip ? s : c);
  }
  if (i == 0 && (dim & 1u)) st(out, row + dim - 1u, 0.0f);
}
