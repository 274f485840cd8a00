#pragma once
// The machine's memory bandwidth, measured (bench_ops): STREAM's "scale"
// kernel, b[i] = s * a[i], on every hardware thread over its own arrays, far
// larger than the caches. Counted as STREAM counts it: 8 bytes per element
// (one read, one write; the write-allocate read a store miss causes is not
// counted), which is also how the memory-bound ops' rows count their bytes.
//
// A VM's bandwidth drifts by tens of percent within minutes (the memory-bound
// shares of one bench_ops run swung from 53% to 114% when the bandwidth was
// measured once for all rows), so bench_ops measures it right before and
// right after each memory-bound op and divides by the better of the two.

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "bench_util.hpp"

namespace nanscope::bench {

class BandwidthMeter {
 public:
  BandwidthMeter() : threads_(std::max(1u, std::thread::hardware_concurrency())), a_(threads_), b_(threads_) {
    // First touch on the thread that streams the arrays (their pages land on its node).
    each([&](unsigned t) {
      a_[t].reset(new float[kElems]);
      b_[t].reset(new float[kElems]);
      std::fill_n(a_[t].get(), kElems, 1.0f);
      std::fill_n(b_[t].get(), kElems, 0.0f);
    });
  }

  // Bytes per second: the best of `passes` (another process that takes a core
  // or the memory bus for a moment lowers one of them, never raises it).
  double measure(int passes = 5) {
    double best = 0;
    for (int rep = 0; rep < passes; ++rep) {
      const auto t0 = Clock::now();
      each([&](unsigned t) {
        const float* __restrict src = a_[t].get();
        float* __restrict dst = b_[t].get();
        for (std::size_t i = 0; i < kElems; ++i) dst[i] = 1.0001f * src[i];
      });
      best = std::max(best, 8.0 * kElems * threads_ / seconds_since(t0));
    }
    return best;
  }

 private:
  static constexpr std::size_t kElems = std::size_t{32} << 20;  // 128 MiB per array and thread

  template <class Fn>
  void each(Fn&& fn) {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads_; ++t) pool.emplace_back([&, t] { fn(t); });
    for (auto& th : pool) th.join();
  }

  unsigned threads_;
  std::vector<std::unique_ptr<float[]>> a_, b_;
};

}  // namespace nanscope::bench
