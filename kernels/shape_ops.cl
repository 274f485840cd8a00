// shape_ops.cl: data movement as bit copies of storage words (word_t: uint for
// f32, ushort for f16/bf16), and dtype casts.

// Copies `run` words of each of `rows` rows: dst[dst_off + r * dst_stride + j] =
// src[src_off + r * src_stride + j]. Serves concat (one launch per input) and
// slice. Grid: (chunks of 16 words, rows).
__kernel void copy_rows(__global const word_t* src, ulong src_off, ulong src_stride, __global word_t* dst,
                        ulong dst_off, ulong dst_stride, ulong run) {
  const ulong j0 = (ulong)get_global_id(0) * 16u;
  const ulong r = get_global_id(1);
  if (j0 >= run) return;
  const __global word_t* s = src + src_off + r * src_stride;
  __global word_t* d = dst + dst_off + r * dst_stride;
  if (j0 + 16u <= run) {
    vstore16(vload16(0, s + j0), 0, d + j0);
  } else {
    for (ulong j = j0; j < run; ++j) d[j] = s[j];
  }
}

// out[i0, i1, i2, i3] = in[i0 * st0 + i1 * st1 + i2 * st2 + i3 * st3] where stN is the
// input stride walked by output axis N. Grid: (chunks of 16 along out axis 3, axis 2, axes 0*1).
__kernel void permute4(__global const word_t* src, __global word_t* dst, uint o1, uint o2, uint o3, ulong st0,
                       ulong st1, ulong st2, ulong st3) {
  const uint j0 = (uint)get_global_id(0) * 16u;
  const uint i2 = (uint)get_global_id(1);
  const uint i01 = (uint)get_global_id(2);
  if (j0 >= o3) return;
  const uint i0 = i01 / o1, i1 = i01 % o1;
  const ulong in = i0 * st0 + i1 * st1 + i2 * st2;
  const ulong out = ((ulong)i01 * o2 + i2) * o3;
  const uint end = min(o3, j0 + 16u);
  if (st3 == 1 && end == j0 + 16u) {
    vstore16(vload16(0, src + in + j0), 0, dst + out + j0);
  } else {
    for (uint j = j0; j < end; ++j) dst[out + j] = src[in + j * st3];
  }
}

// A convolution's weights tap-major, dst[o][t][c] = src[o][c][t] (conv_implicit_mma's layout):
// a work-item per (c, o) reads its taps (contiguous) and writes them C apart, so a warp's reads
// and each of its writes are contiguous. Grid (c_count, o_count).
__kernel void conv_weights_tap_major(__global const word_t* src, __global word_t* dst, uint c_count, uint taps) {
  const uint c = (uint)get_global_id(0);
  const ulong o = get_global_id(1);
  if (c >= c_count) return;
  __global const word_t* const s = src + (o * c_count + c) * taps;
  __global word_t* const d = dst + o * c_count * taps + c;
  for (uint t = 0; t < taps; ++t) d[(ulong)t * c_count] = s[t];
}

// Nearest-neighbour 2x: out[p, 2y + dy, 2x + dx] = in[p, y, x]. Grid: (chunks of 8 along w, h, planes).
// stream (the host's choice: outputs past the caches on a CPU device): non-temporal stores of the
// words (common.cl, st16_stream), where they are aligned. For the VAE's 512 x 128 x 128 input the 128 MB
// output cost 10.4-11 ms against 3.2-4.4 ms streamed (2-core Zen 4, alternating).
__kernel void upsample_nearest2x(__global const word_t* src, __global word_t* dst, uint h, uint w, uint stream) {
  const uint x0 = (uint)get_global_id(0) * 8u;
  const uint y = (uint)get_global_id(1);
  const ulong plane = get_global_id(2);
  if (x0 >= w) return;
  const __global word_t* s = src + (plane * h + y) * w;
  __global word_t* d0 = dst + (plane * 2u * h + 2u * y) * 2u * w;
  __global word_t* d1 = d0 + 2u * w;
  if (x0 + 8u <= w) {
#if defined(STORE_F32)
    const uint8 v = vload8(0, s + x0);
    const uint16 o = (uint16)(v.s0, v.s0, v.s1, v.s1, v.s2, v.s2, v.s3, v.s3,  //
                              v.s4, v.s4, v.s5, v.s5, v.s6, v.s6, v.s7, v.s7);
#else
    const ushort8 v = vload8(0, s + x0);
    const ushort16 o = (ushort16)(v.s0, v.s0, v.s1, v.s1, v.s2, v.s2, v.s3, v.s3,  //
                                  v.s4, v.s4, v.s5, v.s5, v.s6, v.s6, v.s7, v.s7);
#endif
#if defined(NS_NT_STORE)
    if (stream && ((ulong)(d0 + 2u * x0) % sizeof(o)) == 0 && ((ulong)(d1 + 2u * x0) % sizeof(o)) == 0) {
      __builtin_nontemporal_store(o, (__global ns_words16*)(d0 + 2u * x0));
      __builtin_nontemporal_store(o, (__global ns_words16*)(d1 + 2u * x0));
    } else
#endif
    {
      vstore16(o, 0, d0 + 2u * x0);
      vstore16(o, 0, d1 + 2u * x0);
    }
  } else {
    for (uint x = x0; x < w; ++x) {
      const word_t v = s[x];
      d0[2u * x] = v;
      d0[2u * x + 1u] = v;
      d1[2u * x] = v;
      d1[2u * x + 1u] = v;
    }
  }
}

// Casts into the storage dtype (-DSTORE_*) from each source dtype: widening is
// exact, narrowing rounds to nearest even (f16 overflows to Inf). Grid: chunks of 16.
#define NS_CAST_KERNEL(NAME, SRC_T, LOAD16, LOAD1)                                  \
  __kernel void NAME(__global const SRC_T* src, __global store_t* dst, ulong n) {   \
    const ulong i0 = (ulong)get_global_id(0) * 16u;                                 \
    if (i0 + 16u <= n) {                                                            \
      st16(dst, i0, LOAD16);                                                        \
    } else {                                                                        \
      for (ulong i = i0; i < n; ++i) st(dst, i, LOAD1);                             \
    }                                                                               \
  }

NS_CAST_KERNEL(cast_from_f32, float, vload16(0, src + i0), src[i])
NS_CAST_KERNEL(cast_from_f16, half, vload_half16(0, src + i0), f16_to_f32(((__global const ushort*)src)[i]))
NS_CAST_KERNEL(cast_from_bf16, ushort, as_float16(convert_uint16(vload16(0, src + i0)) << 16), bf16_to_f32(src[i]))
