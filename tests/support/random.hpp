#pragma once
// Seeded input generation. std::normal_distribution is implementation-defined
// (libstdc++ and libc++ give different numbers for one seed), so the normal
// generator is written out here: Box-Muller on 53-bit uniforms drawn from
// std::mt19937_64, whose output sequence the C++ standard fixes. A seed
// therefore reproduces the same inputs on every platform (up to libm's last
// bit in log/cos), and tests print it on failure.

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace nanscope::test {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed), seed_(seed) {}

  std::uint64_t seed() const { return seed_; }
  std::uint64_t next_u64() { return engine_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(engine_() >> 11) * 0x1p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform01(); }
  // Standard normal: Box-Muller, u1 in (0, 1] so log never sees 0; the
  // second value of each pair is kept for the next call.
  double normal();

 private:
  std::mt19937_64 engine_;
  std::uint64_t seed_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// A stable 64-bit seed from a text (FNV-1a): cases derive their seed from their
// shape description so the same shape gets the same inputs in every precision.
std::uint64_t seed_from(std::string_view text);

// n values ~ N(mean, stddev^2).
std::vector<float> normal_values(Rng& rng, std::int64_t n, double mean = 0.0, double stddev = 1.0);
std::vector<float> uniform_values(Rng& rng, std::int64_t n, double lo, double hi);

// A host tensor of normal values, rounded (RNE) into dtype.
HostTensor random_normal(Rng& rng, const Shape& shape, DType dtype, double mean = 0.0, double stddev = 1.0);
HostTensor random_uniform(Rng& rng, const Shape& shape, DType dtype, double lo, double hi);

}  // namespace nanscope::test
