#pragma once
// The machine's memory bandwidth, measured (bench_ops): STREAM's "scale"
// kernel, b[i] = s * a[i], on every hardware thread over its own arrays, far
// larger than the caches. Counted as STREAM counts it: 8 bytes per element
// (one read, one write; the write-allocate read a store miss causes is not
// counted), which is also how the memory-bound ops' rows count their bytes.

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace nanscope::bench {

// Bytes per second: the best of five passes (another process that takes a core
// or the memory bus for a moment lowers one of them, never raises it).
inline double measure_bandwidth() {
  constexpr std::size_t kElems = std::size_t{32} << 20;  // 128 MiB per array and thread
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::unique_ptr<float[]>> a(threads), b(threads);
  const auto each = [&](auto&& fn) {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back([&, t] { fn(t); });
    for (auto& th : pool) th.join();
  };
  // First touch on the thread that streams the arrays (their pages land on its node).
  each([&](unsigned t) {
    a[t].reset(new float[kElems]);
    b[t].reset(new float[kElems]);
    std::fill_n(a[t].get(), kElems, 1.0f);
    std::fill_n(b[t].get(), kElems, 0.0f);
  });
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    each([&](unsigned t) {
      const float* __restrict src = a[t].get();
      float* __restrict dst = b[t].get();
      for (std::size_t i = 0; i < kElems; ++i) dst[i] = 1.0001f * src[i];
    });
    best = std::max(best, 8.0 * kElems * threads / seconds_since(t0));
  }
  return best;
}

}  // namespace nanscope::bench
