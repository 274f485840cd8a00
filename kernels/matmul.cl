// matmul.cl: C = alpha * A.B + bias for every storage dtype, in three families.
//
// CPU style (gemm_pack_a, gemm_pack_b, gemm_cpu, gemm_native): A and B are
// first packed into f32 panels of MR rows of A / NR columns of B, zero-padded
// at the edges, so the compute kernel reads both contiguously and never
// converts dtypes in its inner loop. Each work-item owns MR x NR blocks of C
// in float16 registers and walks k with fma(), broadcasting one A value
// against a row of B: no local memory, no barriers (on PoCL, GPU-style tiles
// with barriers run ~5x slower). Packing B once per weight is the hook for
// pre-packed weights (engine/backend/opencl/gemm.hpp).
// With f32 accumulation gemm_cpu_direct_a reads A where it lies instead of
// from panels (any storage dtype), so weights are not packed on every call.
//
// Panel layout, blocked along k (as GotoBLAS packs): k runs in blocks of kc
// rows (a multiple of 16; the last block may be shorter; kc = K when one block
// does); block kb holds every panel's rows [kb*kc, kb*kc + kcb) back to back,
// panel p at (kb*kc*panels + p*kcb)*W floats (W = MR or NR). One compute pass
// per k-block then reads contiguous memory that fits the caches.
//
// Native accumulation (gemm_native): same panels; every partial sum is
// rounded exactly to the storage dtype, k ascending, alpha and bias last with
// one rounding (op_args.hpp).
//
// GPU style (gemm_tiled): local-memory tiles of TS_M x TS_K and TS_K x TS_N,
// each work-item WPT_M x WPT_N outputs, reading the stored dtype directly.
//
// NVIDIA tensor cores (gemm_mma, conv_implicit_mma; only with -DGEMM_MMA, which
// gemm.cpp passes on sm_80+ for f16 storage with f32 accumulation): the same
// arguments as gemm_tiled / conv_implicit_gemm, mma.sync through inline PTX.
//
// Block sizes come from the host's tuning table as -D constants; the defaults
// here are the table's CPU (AVX2) entry.

#ifndef GEMM_MR
#define GEMM_MR 6
#endif
#ifndef GEMM_NV
#define GEMM_NV 1
#endif
#define GEMM_NR (16 * GEMM_NV)

#if GEMM_MR == 4
#define GEMM_ROWS(X) X(0) X(1) X(2) X(3)
#elif GEMM_MR == 6
#define GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#elif GEMM_MR == 8
#define GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#else
#error "GEMM_MR must be 4, 6 or 8"
#endif
#if GEMM_NV < 1 || GEMM_NV > 3
#error "GEMM_NV must be 1, 2 or 3"
#endif

// Bias modes: none, one value per column of C (matmul), one per row (conv).
#define BIAS_NONE 0
#define BIAS_COL 1
#define BIAS_ROW 2

// Up to 16 elements src[base + i * step] for i < count, zeros after.
static inline float16 ld16_masked(__global const store_t* src, ulong base, ulong step, uint count) {
  float v[16];
  for (uint i = 0; i < 16u; ++i) v[i] = i < count ? ld(src, base + i * step) : 0.0f;
  return vload16(0, v);
}

// The kernels by family, in kernels/matmul/ (spliced in at build time): packing
// (gemm_pack_a, gemm_pack_b); gemm_cpu (the panel epilogue, gemm_cpu,
// gemm_cpu_direct_a and its GEGLU store); conv_cpu (conv_cpu, winograd_fused_cpu);
// here after them, the direct-A kernels on converted f32 rows; gemm_native;
// gemm_tiled (GPU style, conv_implicit_gemm); gemm_mma (tensor cores).
#include "matmul/packing.cl"
#include "matmul/gemm_cpu.cl"
#include "matmul/conv_cpu.cl"

#if !defined(GPU_KERNELS) && !defined(GEMM_PACKED_A) && !defined(STORE_F32)
// Half-precision A converted to f32 rows once per call (gemm_a_rows_to_f32)
// instead of in the GEMM's inner loop, once per column panel: on a 2-core Zen 5
// the f16 linears took 1.2-1.3x the f32 ones' time that way (bench_ops --shapes
// sd15 --dtype f16). The conversion is exact: the same sums, bit for bit.
// dst[(b*M + m)*K + k] = A element (m, k) of batch b, at src[off + b*bs + m*rs + k].
// Grid: (M, batch), a row per work-item.
__kernel void gemm_a_rows_to_f32(__global const store_t* src, ulong off, ulong bs, ulong rs, __global float* dst,
                                 uint M, uint K) {
  const uint m = (uint)get_global_id(0);
  const ulong b = get_global_id(1);
  const __global store_t* s = src + off + b * bs + (ulong)m * rs;
  __global float* d = dst + (b * M + m) * (ulong)K;
  uint k = 0;
  for (; k + 16u <= K; k += 16u) vstore16(ld16(s, k), 0, d + k);
  for (; k < K; ++k) d[k] = ld(s, k);
}
// Here, after conv_cpu and gemm_cpu_direct_a, which read A in the storage dtype: A becomes f32 rows.
#undef GEMM_A_T
#undef GEMM_LD_A
#undef GEMM_A_STEPS
#define GEMM_A_T float
#define GEMM_LD_A(p, i) ((p)[(i)])
#define GEMM_A_STEPS GEMM_DIRECT_K4
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_f32a, GEMM_ROWS(GEMM_STORE), n0)
#if GEMM_NV <= 2
GEMM_DIRECT_A_KERNEL(gemm_cpu_direct_f32a_geglu, GEMM_GEGLU_BLOCK, nb *(GEMM_NR / 2u))
#endif
#endif  // !GPU_KERNELS && !GEMM_PACKED_A && !STORE_F32

#include "matmul/gemm_native.cl"
#include "matmul/gemm_tiled.cl"
#if defined(GEMM_MMA)
#include "matmul/gemm_mma.cl"
#endif
