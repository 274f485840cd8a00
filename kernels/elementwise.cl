// elementwise.cl: a (op) b with b broadcast through strides, on a 4-D view.
// The result is the exact a (op) b rounded once to the storage dtype, as the
// reference computes it in double. A product of two stored values is exact in
// f32. A sum of two stored values is rounded to f32 and again at the store,
// and that is still the exact sum rounded once: f32 carries 24 bits, at least
// 2p + 2 for f16 (p = 11) and bf16 (p = 8), and at that width rounding twice
// cannot differ from rounding once for a sum (Figueroa, "When is double
// rounding innocuous?", 1995); in f32 storage it is rounded once anyway.
//
// Grid: dim 0 = chunks of 16 along the last axis, dim 1 = axis 2, dim 2 = axes 0*1.

#define NS_BINARY_KERNEL(NAME, OP16, OP1)                                                     \
  __kernel void NAME(__global const store_t* a, __global const store_t* b, __global store_t* out, \
                     uint s1, uint s2, uint s3, ulong bs0, ulong bs1, ulong bs2, ulong bs3) {    \
    const uint j0 = (uint)get_global_id(0) * 16u;                                             \
    const uint i2 = (uint)get_global_id(1);                                                   \
    const uint i01 = (uint)get_global_id(2);                                                  \
    if (j0 >= s3) return;                                                                     \
    const uint i0 = i01 / s1, i1 = i01 % s1;                                                  \
    const ulong row = ((ulong)i01 * s2 + i2) * s3;                                            \
    const ulong boff = i0 * bs0 + i1 * bs1 + i2 * bs2;                                        \
    if (j0 + 16u <= s3 && bs3 <= 1) {                                                         \
      const float16 x = ld16(a, row + j0);                                                    \
      const float16 y = bs3 == 1 ? ld16(b, boff + j0) : (float16)(ld(b, boff));               \
      st16(out, row + j0, OP16);                                                              \
    } else {                                                                                  \
      const uint end = min(s3, j0 + 16u);                                                     \
      for (uint j = j0; j < end; ++j) {                                                       \
        const float x = ld(a, row + j);                                                       \
        const float y = ld(b, boff + j * bs3);                                                \
        st(out, row + j, OP1);                                                                \
      }                                                                                       \
    }                                                                                         \
  }

NS_BINARY_KERNEL(binary_add, x + y, x + y)
NS_BINARY_KERNEL(binary_sub, x - y, x - y)
NS_BINARY_KERNEL(binary_mul, x * y, x * y)
