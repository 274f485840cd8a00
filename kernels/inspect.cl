// inspect.cl: the inspector's per-step reductions of one [C, H, W] map
// (backend/map_reduce.hpp), read in the storage dtype (-DSTORE_*), computed in
// f32. Three launches; what the host reads back is a few KB:
//   map_lines     one work-group per line (C*H rows, then C*W columns): mean and
//                 std of the finite values (two passes), plus, for rows, the
//                 counts, min/max and centred sum of squares kept on the device
//                 (map_lines_item: the same with one work-item per line, for CPUs);
//   map_channels  one work-item per channel: the row records combined
//                 (Chan et al.'s pairwise formula for the moments);
//   map_mask      one work-item per mask cell: non-finite values in the cell.
// And latent_preview: one work-item per pixel, the linear latent -> RGB preview.

#define NS_NSTAT 8  // uint counters per record: finite, nan, +inf, -inf, near, over, clipped, (pad)

// Line g of the map at element offset `base`: its first element and stride.
static inline void ns_line(uint g, uint c_h, uint h, uint w, ulong base, ulong* first, ulong* stride, uint* len) {
  if (g < c_h) {
    const uint c = g / h, y = g % h;
    *first = base + ((ulong)c * h + y) * w;
    *stride = 1;
    *len = w;
  } else {
    const uint k = g - c_h;
    const uint c = k / w, x = k % w;
    *first = base + (ulong)c * h * w + x;
    *stride = w;
    *len = h;
  }
}

// What one work-item gathers from its values of a line (first pass): counters
// in a struct of scalars, since a private array indexed at run time lives in
// memory on CPU drivers.
typedef struct {
  uint fin, nan, pinf, ninf, near, over, clip;
  float sum, lo, hi;
} ns_line_acc;

static inline void ns_acc_init(ns_line_acc* a) {
  a->fin = a->nan = a->pinf = a->ninf = a->near = a->over = a->clip = 0;
  a->sum = 0.0f;
  a->lo = INFINITY;
  a->hi = -INFINITY;
}

// Branch-free on purpose: CPU drivers vectorise it across work-items.
static inline void ns_acc_add(ns_line_acc* a, float v, float near, float over) {
  const int fin = isfinite(v);
  const float m = fabs(v);
  a->nan += isnan(v) ? 1u : 0u;
  a->pinf += isinf(v) && v > 0.0f ? 1u : 0u;
  a->ninf += isinf(v) && v < 0.0f ? 1u : 0u;
  a->fin += fin ? 1u : 0u;
  a->sum += fin ? v : 0.0f;
  a->lo = fin ? fmin(a->lo, v) : a->lo;
  a->hi = fin ? fmax(a->hi, v) : a->hi;
  a->near += fin && m >= near ? 1u : 0u;
  a->over += fin && m > over ? 1u : 0u;
  a->clip += fin && m > 1.0f ? 1u : 0u;
}

// The first pass over elements begin, begin + step, ... of a line.
static inline ns_line_acc ns_first_pass(__global const store_t* x, ulong first, ulong stride, uint begin, uint len,
                                        uint step, float near, float over) {
  ns_line_acc acc;
  ns_acc_init(&acc);
  for (uint i = begin; i < len; i += step) ns_acc_add(&acc, ld(x, first + i * stride), near, over);
  return acc;
}

// Sum of squared deviations from `mean` of the finite values (second pass).
static inline float ns_m2(__global const store_t* x, ulong first, ulong stride, uint begin, uint len, uint step,
                          float mean) {
  float m2 = 0.0f;
  for (uint i = begin; i < len; i += step) {
    const float v = ld(x, first + i * stride);
    if (isfinite(v)) {
      const float d = v - mean;
      m2 += d * d;
    }
  }
  return m2;
}

// Sums of a __local array of n floats / uints into element 0 (one work-item);
// n is the work-group size (at most 256), so a serial pass costs nothing next
// to the loads.
static inline float ns_local_sum(__local float* v, uint n) {
  float s = 0.0f;
  for (uint i = 0; i < n; ++i) s += v[i];
  return s;
}

// lines_out: float2 (mean, std) per line (NaN when none is finite).
// rows_f: float4 (mean, m2, min, max) per row; rows_u: NS_NSTAT uints per row.
// scratch: 4 * local size floats, ucount: NS_NSTAT * local size uints.
__kernel void map_lines(__global const store_t* x, ulong base, uint c, uint h, uint w, float near, float over,
                        __global float2* lines_out, __global float4* rows_f, __global uint* rows_u,
                        __local float* scratch, __local uint* ucount) {
  const uint g = (uint)get_group_id(0);
  const uint lid = (uint)get_local_id(0), nl = (uint)get_local_size(0);
  ulong first, stride;
  uint len;
  ns_line(g, c * h, h, w, base, &first, &stride, &len);
  const ns_line_acc acc = ns_first_pass(x, first, stride, lid, len, nl, near, over);
  __local float* s_sum = scratch;
  __local float* s_lo = scratch + nl;
  __local float* s_hi = scratch + 2 * nl;
  __local float* s_m2 = scratch + 3 * nl;
  s_sum[lid] = acc.sum;
  s_lo[lid] = acc.lo;
  s_hi[lid] = acc.hi;
  const uint cnt[NS_NSTAT] = {acc.fin, acc.nan, acc.pinf, acc.ninf, acc.near, acc.over, acc.clip, 0};
  for (uint k = 0; k < NS_NSTAT; ++k) ucount[k * nl + lid] = cnt[k];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    for (uint k = 0; k < NS_NSTAT; ++k) {
      uint t = 0;
      for (uint i = 0; i < nl; ++i) t += ucount[k * nl + i];
      ucount[k * nl] = t;
    }
    float l = INFINITY, u = -INFINITY;
    for (uint i = 0; i < nl; ++i) {
      l = fmin(l, s_lo[i]);
      u = fmax(u, s_hi[i]);
    }
    s_lo[0] = l;
    s_hi[0] = u;
    s_sum[0] = ns_local_sum(s_sum, nl);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const uint finite = ucount[0];
  const float mean = finite > 0 ? s_sum[0] / (float)finite : NAN;
  s_m2[lid] = ns_m2(x, first, stride, lid, len, nl, mean);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    const float total = ns_local_sum(s_m2, nl);
    const float sd = finite > 0 ? sqrt(total / (float)finite) : NAN;
    lines_out[g] = (float2)(mean, sd);
    if (g < c * h) {
      rows_f[g] = (float4)(finite > 0 ? mean : 0.0f, total, s_lo[0], s_hi[0]);
      for (uint k = 0; k < NS_NSTAT; ++k) rows_u[(ulong)g * NS_NSTAT + k] = ucount[k * nl];
    }
  }
}

// map_lines for CPU-style devices: one work-item per line, no local memory or
// barriers, so the driver packs many lines into one work-group (a work-group
// per line costs PoCL more than the line itself). Same outputs.
__kernel void map_lines_item(__global const store_t* x, ulong base, uint c, uint h, uint w, float near, float over,
                             __global float2* lines_out, __global float4* rows_f, __global uint* rows_u, uint lines) {
  const uint g = (uint)get_global_id(0);
  if (g >= lines) return;
  ulong first, stride;
  uint len;
  ns_line(g, c * h, h, w, base, &first, &stride, &len);
  const ns_line_acc acc = ns_first_pass(x, first, stride, 0, len, 1, near, over);
  const uint finite = acc.fin;
  const float mean = finite > 0 ? acc.sum / (float)finite : NAN;
  const float m2 = ns_m2(x, first, stride, 0, len, 1, mean);
  lines_out[g] = (float2)(mean, finite > 0 ? sqrt(m2 / (float)finite) : NAN);
  if (g < c * h) {
    rows_f[g] = (float4)(finite > 0 ? mean : 0.0f, m2, acc.lo, acc.hi);
    __global uint* u = rows_u + (ulong)g * NS_NSTAT;
    u[0] = acc.fin;
    u[1] = acc.nan;
    u[2] = acc.pinf;
    u[3] = acc.ninf;
    u[4] = acc.near;
    u[5] = acc.over;
    u[6] = acc.clip;
    u[7] = 0;
  }
}

// ch_f: float4 (mean, m2, min, max) per channel; ch_u: NS_NSTAT uints per channel.
__kernel void map_channels(__global const float4* rows_f, __global const uint* rows_u, uint c, uint h,
                           __global float4* ch_f, __global uint* ch_u) {
  const uint ch = (uint)get_global_id(0);
  if (ch >= c) return;
  uint cnt[NS_NSTAT] = {0, 0, 0, 0, 0, 0, 0, 0};
  float n = 0.0f, mean = 0.0f, m2 = 0.0f, lo = INFINITY, hi = -INFINITY;
  for (uint y = 0; y < h; ++y) {
    const ulong r = (ulong)ch * h + y;
    const float4 f = rows_f[r];
    for (uint k = 0; k < NS_NSTAT; ++k) cnt[k] += rows_u[r * NS_NSTAT + k];
    const float nb = (float)rows_u[r * NS_NSTAT];
    if (nb == 0.0f) continue;
    const float nn = n + nb;
    const float delta = f.x - mean;
    mean += delta * (nb / nn);
    m2 += f.y + delta * delta * (n * nb / nn);
    n = nn;
    lo = fmin(lo, f.z);
    hi = fmax(hi, f.w);
  }
  ch_f[ch] = (float4)(mean, m2, n > 0.0f ? lo : 0.0f, n > 0.0f ? hi : 0.0f);
  for (uint k = 0; k < NS_NSTAT; ++k) ch_u[(ulong)ch * NS_NSTAT + k] = cnt[k];
}

// mask_out: non-finite values per cell of cell_h x cell_w pixels, all channels.
__kernel void map_mask(__global const store_t* x, ulong base, uint c, uint h, uint w, uint cell_h, uint cell_w,
                       uint cols, uint cells, __global uint* mask_out) {
  const uint cell = (uint)get_global_id(0);
  if (cell >= cells) return;
  const uint y0 = (cell / cols) * cell_h, x0 = (cell % cols) * cell_w;
  const uint y1 = min(h, y0 + cell_h), x1 = min(w, x0 + cell_w);
  uint bad = 0;
  for (uint ch = 0; ch < c; ++ch)
    for (uint y = y0; y < y1; ++y)
      for (uint xx = x0; xx < x1; ++xx) bad += isfinite(ld(x, base + ((ulong)ch * h + y) * w + xx)) ? 0u : 1u;
  mask_out[cell] = bad;
}

// rgb[i*3 + k] = byte((bias[k] + sum_c factors[c*3 + k] * x[c][i] * scale + 1) / 2), 0 for
// non-finite; counts: [0] non-finite, [1] |v| > over, [2] |v| > 1 (atomics, rare events).
__kernel void latent_preview(__global const store_t* x, ulong base, uint used, uint plane,
                             __constant float* factors, float b0, float b1, float b2, float scale, float over,
                             __global uchar* rgb, volatile __global uint* counts) {
  const uint i = (uint)get_global_id(0);
  if (i >= plane) return;
  float v[3] = {b0, b1, b2};
  for (uint ch = 0; ch < used; ++ch) {
    const float s = ld(x, base + (ulong)ch * plane + i) * scale;
    for (uint k = 0; k < 3; ++k) v[k] += factors[ch * 3 + k] * s;
  }
  for (uint k = 0; k < 3; ++k) {
    uchar byte = 0;
    if (isfinite(v[k])) {
      const float a = fabs(v[k]);
      if (a > over) atomic_inc(&counts[1]);
      if (a > 1.0f) atomic_inc(&counts[2]);
      byte = (uchar)round(clamp((v[k] + 1.0f) * 0.5f, 0.0f, 1.0f) * 255.0f);
    } else {
      atomic_inc(&counts[0]);
    }
    rgb[(ulong)i * 3 + k] = byte;
  }
}
