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

// The best of five short measurements: another process that takes a core for
// a moment lowers one of them, never raises it.
inline double measure_peak_flops() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int lanes = avx512 ? 16 : 8;
  const long iters = 20'000'000;  // about 0.07 s on 2 Zen 4 cores
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<std::thread> pool;
    std::vector<double> sinks(threads);
    const auto t0 = Clock::now();
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { sinks[t] = avx512 ? fma_chains_avx512(iters) : fma_chains_avx2(iters); });
    for (auto& th : pool) th.join();
    best = std::max(best, 2.0 * lanes * 12.0 * static_cast<double>(iters) * threads / seconds_since(t0));
  }
  return best;
}

}  // namespace nanscope::bench
