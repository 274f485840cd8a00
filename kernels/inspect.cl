// inspect.cl: the inspector's per-step reductions of one [C, H, W] map
// (backend/map_reduce.hpp), read in the storage dtype (-DSTORE_*), computed in
// f32. What the host reads back is a few KB. GPUs, two launches per map:
//   map_lines     one work-group per line (C*H rows, then C*W columns): mean and
//                 std of the finite values (two passes), plus, for rows, the
//                 counts, min/max and centred sum of squares kept on the device;
//   map_channels  one work-item per channel: the row records combined
//                 (Chan et al.'s pairwise formula for the moments).
// CPU-style devices, one launch for up to three maps of one shape and dtype:
//   map_stats_item  one work-item per channel of each map: its rows, its
//                 columns and the channel record, in one output buffer.
// Both, where something is non-finite:
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

// Chan et al.'s pairwise update: (n, mean, m2) take in a block of nb values
// with mean bmean and centred sum of squares bm2.
static inline void ns_chan_add(float* n, float* mean, float* m2, float nb, float bmean, float bm2) {
  const float nn = *n + nb;
  const float delta = bmean - *mean;
  *mean += delta * (nb / nn);
  *m2 += bm2 + delta * delta * (*n * nb / nn);
  *n = nn;
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
    ns_chan_add(&n, &mean, &m2, nb, f.x, f.y);
    lo = fmin(lo, f.z);
    hi = fmax(hi, f.w);
  }
  ch_f[ch] = (float4)(mean, m2, n > 0.0f ? lo : 0.0f, n > 0.0f ? hi : 0.0f);
  for (uint k = 0; k < NS_NSTAT; ++k) ch_u[(ulong)ch * NS_NSTAT + k] = cnt[k];
}

// The reduction of one line (first pass and centred second pass).
typedef struct {
  ns_line_acc acc;
  float mean, m2;
} ns_line_stats;

static inline ns_line_stats ns_line_reduce(__global const store_t* x, ulong first, ulong stride, uint len, float near,
                                           float over) {
  ns_line_stats r;
  r.acc = ns_first_pass(x, first, stride, 0, len, 1, near, over);
  r.mean = r.acc.fin > 0 ? r.acc.sum / (float)r.acc.fin : NAN;
  r.m2 = ns_m2(x, first, stride, 0, len, 1, r.mean);
  return r;
}

static inline float2 ns_line_out(const ns_line_stats* r) {
  return (float2)(r->mean, r->acc.fin > 0 ? sqrt(r->m2 / (float)r->acc.fin) : NAN);
}

// The whole reduction for CPU-style devices: one work-item per channel of up to
// three maps of the same [C, H, W] shape and dtype (a step's latent and its two
// noise predictions), so that a step costs one launch and one read instead of
// two launches and three reads per map (each about 20 us in PoCL's queue).
// Work-item g reduces channel g % c of map g / c. Its results, as 32-bit words
// at out + (g / c) * words with words = 2c(h + w) + 12c:
//   [0, 2c(h + w))               float (mean, std) per line: the c*h rows, then the c*w columns;
//   [2c(h + w), 2c(h + w) + 4c)  float (mean, m2, min, max) per channel;
//   then NS_NSTAT uint counters per channel.
// The same arithmetic, in the same order, as map_lines + map_channels.
__kernel void map_stats_item(__global const store_t* x0, ulong base0, float near0, float over0,
                             __global const store_t* x1, ulong base1, float near1, float over1,
                             __global const store_t* x2, ulong base2, float near2, float over2, uint maps, uint c,
                             uint h, uint w, __global uint* out) {
  const uint g = (uint)get_global_id(0);
  if (g >= maps * c) return;
  const uint m = g / c, ch = g % c;
  __global const store_t* x = m == 0 ? x0 : (m == 1 ? x1 : x2);
  const ulong base = (m == 0 ? base0 : (m == 1 ? base1 : base2)) + (ulong)ch * h * w;
  const float near = m == 0 ? near0 : (m == 1 ? near1 : near2);
  const float over = m == 0 ? over0 : (m == 1 ? over1 : over2);
  const ulong lines = (ulong)c * (h + w);
  __global uint* o = out + (ulong)m * (2 * lines + 12 * (ulong)c);

  uint fin = 0, nans = 0, pinf = 0, ninf = 0, nr = 0, ov = 0, clip = 0;
  float n = 0.0f, mean = 0.0f, m2 = 0.0f, lo = INFINITY, hi = -INFINITY;
  for (uint y = 0; y < h; ++y) {
    const ns_line_stats r = ns_line_reduce(x, base + (ulong)y * w, 1, w, near, over);
    const float2 line = ns_line_out(&r);
    const ulong at = 2 * ((ulong)ch * h + y);
    o[at] = as_uint(line.x);
    o[at + 1] = as_uint(line.y);
    fin += r.acc.fin;
    nans += r.acc.nan;
    pinf += r.acc.pinf;
    ninf += r.acc.ninf;
    nr += r.acc.near;
    ov += r.acc.over;
    clip += r.acc.clip;
    const float nb = (float)r.acc.fin;
    if (nb == 0.0f) continue;
    ns_chan_add(&n, &mean, &m2, nb, r.mean, r.m2);
    lo = fmin(lo, r.acc.lo);
    hi = fmax(hi, r.acc.hi);
  }
  for (uint col = 0; col < w; ++col) {
    const ns_line_stats r = ns_line_reduce(x, base + col, w, h, near, over);
    const float2 line = ns_line_out(&r);
    const ulong at = 2 * ((ulong)c * h + (ulong)ch * w + col);
    o[at] = as_uint(line.x);
    o[at + 1] = as_uint(line.y);
  }
  __global uint* f = o + 2 * lines + 4 * (ulong)ch;
  f[0] = as_uint(mean);
  f[1] = as_uint(m2);
  f[2] = as_uint(n > 0.0f ? lo : 0.0f);
  f[3] = as_uint(n > 0.0f ? hi : 0.0f);
  __global uint* u = o + 2 * lines + 4 * (ulong)c + NS_NSTAT * (ulong)ch;
  u[0] = fin;
  u[1] = nans;
  u[2] = pinf;
  u[3] = ninf;
  u[4] = nr;
  u[5] = ov;
  u[6] = clip;
  u[7] = 0;
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

// One work-item per pixel, from the first four channels (`used` of them; the
// others have zero factors and are not read):
//   v[k] = bias[k] + sum_c f_k[c] * x[c][i] * scale        (k = r, g, b)
// out[i] = (byte(v[r]), byte(v[g]), byte(v[b]), flags), byte(v) = round(clamp((v + 1) / 2, 0, 1) * 255), 0 for
// non-finite; flags counts the pixel's non-finite values (bits 0-1), those with |v| > over (bits 2-3) and those
// with |v| > 1 (bits 4-5), for the host to add up: no atomics, no counters to clear.
static inline uchar ns_preview_byte(float v) { return (uchar)round(clamp((v + 1.0f) * 0.5f, 0.0f, 1.0f) * 255.0f); }

__kernel void latent_preview(__global const store_t* x, ulong base, uint used, uint plane, float4 fr, float4 fg,
                             float4 fb, float4 bias, float scale, float over, __global uchar4* out) {
  const uint i = (uint)get_global_id(0);
  if (i >= plane) return;
  const ulong at = base + i;
  const float4 lat = (float4)(used > 0 ? ld(x, at) : 0.0f, used > 1 ? ld(x, at + plane) : 0.0f,
                              used > 2 ? ld(x, at + 2 * (ulong)plane) : 0.0f,
                              used > 3 ? ld(x, at + 3 * (ulong)plane) : 0.0f) *
                     scale;
  const float v[3] = {bias.x + fr.x * lat.x + fr.y * lat.y + fr.z * lat.z + fr.w * lat.w,
                      bias.y + fg.x * lat.x + fg.y * lat.y + fg.z * lat.z + fg.w * lat.w,
                      bias.z + fb.x * lat.x + fb.y * lat.y + fb.z * lat.z + fb.w * lat.w};
  uint bad = 0, beyond = 0, clipped = 0;
  uchar byte[3];
  for (uint k = 0; k < 3; ++k) {
    const int fin = isfinite(v[k]);
    const float a = fabs(v[k]);
    bad += fin ? 0u : 1u;
    beyond += fin && a > over ? 1u : 0u;
    clipped += fin && a > 1.0f ? 1u : 0u;
    byte[k] = fin ? ns_preview_byte(v[k]) : (uchar)0;
  }
  out[i] = (uchar4)(byte[0], byte[1], byte[2], (uchar)(bad | beyond << 2 | clipped << 4));
}
