// half_probe.cl: the known-answer probe for native half arithmetic
// (engine/backend/opencl/half_units.cpp). Built with -DHW_HALF_PTX it runs the
// device's half units; without, the exact emulation, which the op tests check
// against the same answers. out[4i..4i+3] = nat_fma(a, b, c), nat_add(a, c),
// nat_exp(e), and whether the half units ran (1) or the emulation (0).
__kernel void half_probe(__global const float* a, __global const float* b, __global const float* c,
                         __global const float* e, __global float* out, uint n) {
  const uint i = (uint)get_global_id(0);
  if (i >= n) return;
  out[4u * i] = nat_fma(a[i], b[i], c[i]);
  out[4u * i + 1u] = nat_add(a[i], c[i]);
  out[4u * i + 2u] = nat_exp(e[i]);
  out[4u * i + 3u] = (float)NAT_HW;
}
