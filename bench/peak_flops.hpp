#pragma once
// The CPU's FP32 peak, measured: independent FMA chains on every hardware
// thread (bench_ops, bench_unet).

#include <immintrin.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace nanscope::bench {

// Peak FP32 FLOP/s: independent FMA chains on every hardware thread.
// Twelve named accumulators (not an array, which the compiler may keep in
// memory and so chain every FMA through a store and a load), each starting
// from its own value: chains that start equal are one chain to the compiler,
// which then runs one latency-bound chain and copies it (measured here: a
// "peak" of 530-620 GFLOP/s on a CPU whose real peak is 215).
#define NANSCOPE_FMA12(V, FMA, SET1)                                                                              \
  V a0 = SET1(1.00f), a1 = SET1(1.01f), a2 = SET1(1.02f), a3 = SET1(1.03f), a4 = SET1(1.04f), a5 = SET1(1.05f),   \
    a6 = SET1(1.06f), a7 = SET1(1.07f), a8 = SET1(1.08f), a9 = SET1(1.09f), a10 = SET1(1.10f), a11 = SET1(1.11f); \
  for (long i = 0; i < iters; ++i) {                                                                              \
    a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);                               \
    a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);                               \
    a8 = FMA(a8, m, c), a9 = FMA(a9, m, c), a10 = FMA(a10, m, c), a11 = FMA(a11, m, c);                           \
  }                                                                                                               \
  const V acc[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};

__attribute__((target("avx512f"))) inline double fma_chains_avx512(long iters) {
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  NANSCOPE_FMA12(__m512, _mm512_fmadd_ps, _mm512_set1_ps)
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps header trips -Wuninitialized.
  alignas(64) float out[16];
  float sink = 0;
  for (auto& a : acc) {
    _mm512_store_ps(out, a);
    for (float f : out) sink += f;
  }
  return sink;
}
__attribute__((target("avx2,fma"))) inline double fma_chains_avx2(long iters) {
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  NANSCOPE_FMA12(__m256, _mm256_fmadd_ps, _mm256_set1_ps)
  alignas(32) float out[8];
  float sink = 0;
  for (auto& a : acc) {
    _mm256_store_ps(out, a);
    for (float f : out) sink += f;
  }
  return sink;
}

// The best of five short measurements of `run` on every hardware thread at
// once, each thread doing `flops_per_thread`: another process that takes a
// core for a moment lowers one of them, never raises it. `run` returns a sink
// (its accumulators' sum) so the work cannot be dropped.
template <class Run>
double best_rate_on_every_thread(double flops_per_thread, const Run& run) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<std::thread> pool;
    std::vector<double> sinks(threads);
    const auto t0 = Clock::now();
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back([&, t] { sinks[t] = run(); });
    for (auto& th : pool) th.join();
    best = std::max(best, flops_per_thread * threads / seconds_since(t0));
  }
  return best;
}

inline double measure_peak_flops() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int lanes = avx512 ? 16 : 8;
  const long iters = 20'000'000;  // about 0.07 s on 2 Zen 4 cores
  return best_rate_on_every_thread(2.0 * lanes * 12.0 * static_cast<double>(iters),
                                   [&] { return avx512 ? fma_chains_avx512(iters) : fma_chains_avx2(iters); });
}

// The CPU GEMM's register block alone: MR rows x 16*NV columns of C in vector
// accumulators, each k step one broadcast A value per row against NV loaded B
// vectors, as kernels/matmul.cl's gemm_cpu_direct_a runs it with the tuning
// table's CPU blocks (8 x 32 where floats are 16 wide, 6 x 16 on AVX2). A (MR
// x 128) and B (128 x 16*NV) stay in L1, so the block moves no data through
// the caches: what it misses of the peak is the core's cost of the loads
// beside the FMAs, and what a GEMM misses of this rate is the memory
// hierarchy's. (Measured on a 2-core Xeon with AVX-512: 85-87% of the peak; the
// 8 x 48, 6 x 64, 12 x 32 and 16 x 16 blocks were no faster.)
#define NANSCOPE_GEMM_BLOCK(NAME, TARGET, V, LANES, MR, NV, LOAD, SET1, FMA, STORE)                     \
  __attribute__((target(TARGET))) inline double NAME(long reps) {                                       \
    constexpr int kc = 128, nr = (LANES) * (NV);                                                        \
    alignas(64) float a[(MR)*kc], b[kc * nr];                                                           \
    for (int i = 0; i < (MR)*kc; ++i) a[i] = 1e-3f * static_cast<float>(i % 5);                         \
    for (int i = 0; i < kc * nr; ++i) b[i] = 1e-3f * static_cast<float>(i % 7);                         \
    V acc[MR][NV];                                                                                      \
    for (auto& row : acc)                                                                               \
      for (auto& v : row) v = SET1(0.0f);                                                               \
    for (long r = 0; r < reps; ++r) {                                                                   \
      for (int k = 0; k < kc; ++k) {                                                                    \
        V bv[NV];                                                                                       \
        _Pragma("GCC unroll 4") for (int j = 0; j < (NV); ++j) bv[j] = LOAD(b + k * nr + (LANES)*j);    \
        _Pragma("GCC unroll 16") for (int i = 0; i < (MR); ++i) {                                       \
          const V av = SET1(a[i * kc + k]);                                                             \
          _Pragma("GCC unroll 4") for (int j = 0; j < (NV); ++j) acc[i][j] = FMA(av, bv[j], acc[i][j]); \
        }                                                                                               \
      }                                                                                                 \
    }                                                                                                   \
    alignas(64) float out[LANES];                                                                       \
    float sink = 0;                                                                                     \
    for (auto& row : acc)                                                                               \
      for (auto& v : row) {                                                                             \
        STORE(out, v);                                                                                  \
        for (float f : out) sink += f;                                                                  \
      }                                                                                                 \
    return sink;                                                                                        \
  }
NANSCOPE_GEMM_BLOCK(gemm_block_avx512, "avx512f", __m512, 16, 8, 2, _mm512_load_ps, _mm512_set1_ps, _mm512_fmadd_ps,
                    _mm512_store_ps)
NANSCOPE_GEMM_BLOCK(gemm_block_avx2, "avx2,fma", __m256, 8, 6, 2, _mm256_load_ps, _mm256_set1_ps, _mm256_fmadd_ps,
                    _mm256_store_ps)
#undef NANSCOPE_GEMM_BLOCK

// The FP32 rate of that block on every hardware thread.
inline double measure_gemm_block_flops() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const long reps = 150'000;  // 0.05-0.1 s a measurement
  return best_rate_on_every_thread((avx512 ? 2.0 * 8 * 32 * 128 : 2.0 * 6 * 16 * 128) * static_cast<double>(reps),
                                   [&] { return avx512 ? gemm_block_avx512(reps) : gemm_block_avx2(reps); });
}

}  // namespace nanscope::bench
