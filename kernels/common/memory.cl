// ---------------------------------------------------------------------------
// Loads and stores. Offsets are in elements. Vector forms read/write n
// consecutive elements starting at element i (no alignment beyond the
// element's own is required).

static inline float bf16_to_f32(ushort b) { return as_float((uint)b << 16); }
static inline ushort f32_to_bf16(float f) { return (ushort)(as_uint(ns_round_bf16(f)) >> 16); }

// Scalar f16 conversions in integer arithmetic: PoCL's scalar vload_half /
// vstore_half are slow library routines, while the vector forms map to the
// CPU's conversion instructions. Both are exact (RNE, Inf, NaN, subnormals).
static inline float f16_to_f32(ushort h) {
  const uint em = (uint)h & 0x7fffu;
  const uint sign = ((uint)h & 0x8000u) << 16;
  uint bits = (em << 13) + 0x38000000u;                              // normal: rebias 15 -> 127
  bits = em >= 0x7c00u ? (em << 13) | 0x7f800000u : bits;             // Inf / NaN
  bits = em < 0x0400u ? as_uint((float)em * 0x1p-24f) : bits;         // zero / subnormal
  return as_float(bits | sign);
}
// f32 -> f16 word, exact (16 lanes: ns_f16_words16).
static inline ushort f32_to_f16(float f) {
  const uint u = as_uint(ns_round_f16(f));  // now exactly representable (or Inf / NaN)
  const uint a = u & 0x7fffffffu;
  const uint sign = (u >> 16) & 0x8000u;
  uint h = (a - 0x38000000u) >> 13;                                  // normal
  h = a >= 0x7f800000u ? 0x7c00u | ((a >> 13) & 0x3ffu) : h;         // Inf / NaN (quiet bit kept)
  h = a < 0x38800000u ? (uint)(as_float(a) * 0x1p24f) : h;            // zero / subnormal (exact)
  return (ushort)(h | sign);
}

#if defined(STORE_F16) && defined(F16_CVT)
// GPU style (-DF16_CVT): scalar vload_half / vstore_half_rte are conversion
// instructions on GPUs (exact: RNE, Inf, NaN, subnormals, as below).
#define ld(p, i) vload_half((i), (p))
#define ld4(p, i) vload_half4(0, (p) + (i))
#define ld8(p, i) vload_half8(0, (p) + (i))
#define ld16(p, i) vload_half16(0, (p) + (i))
#define st(p, i, v) vstore_half_rte((v), (i), (p))
#define st4(p, i, v) vstore_half4_rte((v), 0, (p) + (i))
#define st8(p, i, v) vstore_half8_rte((v), 0, (p) + (i))
#define st16(p, i, v) vstore_half16_rte((v), 0, (p) + (i))
#elif defined(STORE_F16)
// st4 / st8 / st16: the words converted in private memory, stored by one vector move (ns_f16_words16 above).
#define ld(p, i) f16_to_f32(((__global const ushort*)(p))[(i)])
#define ld4(p, i) vload_half4(0, (p) + (i))
#define ld8(p, i) vload_half8(0, (p) + (i))
#define ld16(p, i) vload_half16(0, (p) + (i))
#define st(p, i, v) (((__global ushort*)(p))[(i)] = f32_to_f16(v))
#define ns_st_words(N, p, i, v) (*(__global ns_ushort##N##_a2*)((__global ushort*)(p) + (i)) = ns_f16_words##N(v))
#define st4(p, i, v) ns_st_words(4, p, i, v)
#define st8(p, i, v) ns_st_words(8, p, i, v)
#define st16(p, i, v) ns_st_words(16, p, i, v)
#elif defined(STORE_BF16)
#define ld(p, i) bf16_to_f32((p)[(i)])
#define ld4(p, i) as_float4(convert_uint4(vload4(0, (p) + (i))) << 16)
#define ld8(p, i) as_float8(convert_uint8(vload8(0, (p) + (i))) << 16)
#define ld16(p, i) as_float16(convert_uint16(vload16(0, (p) + (i))) << 16)
#define st(p, i, v) ((p)[(i)] = f32_to_bf16(v))
#define st4(p, i, v) vstore4(convert_ushort4(as_uint4(ns_round_bf16_4(v)) >> 16), 0, (p) + (i))
#define st8(p, i, v) vstore8(convert_ushort8(as_uint8(ns_round_bf16_8(v)) >> 16), 0, (p) + (i))
#define st16(p, i, v) vstore16(convert_ushort16(as_uint16(ns_round_bf16_16(v)) >> 16), 0, (p) + (i))
#else
#define ld(p, i) ((p)[(i)])
#define ld4(p, i) vload4(0, (p) + (i))
#define ld8(p, i) vload8(0, (p) + (i))
#define ld16(p, i) vload16(0, (p) + (i))
#define st(p, i, v) ((p)[(i)] = (v))
#define st4(p, i, v) vstore4((v), 0, (p) + (i))
#define st8(p, i, v) vstore8((v), 0, (p) + (i))
#define st16(p, i, v) vstore16((v), 0, (p) + (i))
#endif

// Gathers (im2col_row16_any, row16_padded): ns_word(p, i) is element i's storage word, NS_ZERO_WORD +0.0's, and
// ns_words16_to_f32(t) widens 16 words in private memory at once, where ld() one at a time would run f16's
// integer conversion per value (the vector conversion is one instruction on CPUs). The same values.
#if defined(STORE_F16) || defined(STORE_BF16)
typedef ushort ns_word_t;
#define ns_word(p, i) (((__global const ushort*)(p))[(i)])
#else
typedef float ns_word_t;
#define ns_word(p, i) ((p)[(i)])
#endif
#define NS_ZERO_WORD ((ns_word_t)0)
#if defined(STORE_F16)
#define ns_words16_to_f32(t) vload_half16(0, (__private const half*)(t))
#elif defined(STORE_BF16)
#define ns_words16_to_f32(t) as_float16(convert_uint16(vload16(0, (t))) << 16)
#else
#define ns_words16_to_f32(t) vload16(0, (t))
#endif

// st16_stream(p, i, v, stream): st16, or, where the host sets `stream` (an
// output past the caches on a CPU device, OpenClBackend::streams_output) and the
// compiler has non-temporal stores for x86-64, a store around the caches when
// the 16 elements are aligned for the vector (a misaligned one faults).
// Ordinary stores first read every output line into the cache (write-allocate):
// three transfers per element instead of two for an op that reads each element
// once and writes it once. The same bits as st16: the storage words are computed first, then
// stored. Streamed stores are weakly ordered: the locked instructions with which
// the driver's worker threads finish a command drain them before the next
// command reads the output (a fence per work-item would cost more than they save).
#if defined(__x86_64__) && defined(__has_builtin)
#if __has_builtin(__builtin_nontemporal_store)
#define NS_NT_STORE 1
#endif
#endif
#if defined(NS_NT_STORE)
#if defined(STORE_F32)
typedef uint16 ns_words16;
#define ns_store_words16(v) as_uint16(v)
#elif defined(STORE_F16)
typedef ushort16 ns_words16;
#define ns_store_words16(v) ns_f16_words16(v)
#else
typedef ushort16 ns_words16;
#define ns_store_words16(v) convert_ushort16(as_uint16(ns_round_bf16_16(v)) >> 16)
#endif
#define st16_stream(p, i, v, stream)                                                 \
  do {                                                                               \
    __global store_t* const ns_q = (p) + (i);                                        \
    if ((stream) && (ulong)ns_q % sizeof(ns_words16) == 0)                           \
      __builtin_nontemporal_store(ns_store_words16(v), (__global ns_words16*)ns_q);  \
    else                                                                             \
      st16(p, i, v);                                                                 \
  } while (0)
#else
#define st16_stream(p, i, v, stream) st16(p, i, v)
#endif

// ns_prefetch_at(p): asks for the cache line at p; ns_prefetch(p): the one 512 bytes past p, for CPU kernels
// that stream through memory while they compute (x86-64 compilers with the builtin; nothing elsewhere). The hardware
// prefetchers follow a stream too, but not across a 4 KB page.
#if defined(__x86_64__) && defined(__has_builtin)
#if __has_builtin(__builtin_prefetch)
#define ns_prefetch_at(p) __builtin_prefetch((const __global char*)(p), 0, 0)
#endif
#endif
#ifndef ns_prefetch_at
#define ns_prefetch_at(p) ((void)0)
#endif
#define ns_prefetch(p) ns_prefetch_at((const __global char*)(p) + 512)

// Bit copies (shape ops): the storage word of one element.
#if defined(STORE_F32)
typedef uint word_t;
#else
typedef ushort word_t;
#endif

