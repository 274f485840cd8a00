// The reference backend's fast rounding helpers (backend/reference/host_access.hpp)
// against core's tested definition of rounding a double into each dtype. The
// ops that use them are checked through tests/ops on every backend.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/reference/host_access.hpp"
#include "core/dtype.hpp"

namespace nanscope {
namespace {

TEST(ReferenceRounding, FastRoundingMatchesCoreBitForBit) {
  // round_d works on the double's bits (it runs once per native partial sum);
  // core's round_to_from_double is the tested definition. Random doubles over
  // every exponent that matters, plus exact ties of each narrow type.
  std::mt19937_64 rng(7);
  std::vector<double> values{0.0,
                             -0.0,
                             65504.0,
                             65519.999,
                             65520.0,
                             -65520.0,
                             0x1p-24,
                             0x1p-25,
                             0x1.8p-25,
                             0x1p-26,
                             0x1.fep127,
                             0x1.fdp127,
                             0x1p-133,
                             0x1p-134,
                             1e300,
                             -1e-300,
                             std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  std::uniform_int_distribution<int> exp_dist(-140, 130);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    const double m = std::ldexp(mant(rng), exp_dist(rng)) * (i % 2 ? -1.0 : 1.0);
    values.push_back(m);
    // Ties: an f16 / bf16 value plus half its quantum, nudged or not.
    const float h = round_to(DType::f16, static_cast<float>(m));
    const float b = round_to(DType::bf16, static_cast<float>(m));
    if (std::isfinite(h) && h != 0.0f) {
      const double q = std::ldexp(1.0, std::ilogb(h) - 11);
      values.insert(values.end(), {h + q, h - q, std::nextafter(h + q, 0.0), std::nextafter(h + q, 1e300)});
    }
    if (std::isfinite(b) && b != 0.0f) {
      const double q = std::ldexp(1.0, std::ilogb(b) - 8);
      values.insert(values.end(), {b + q, b - q, std::nextafter(b + q, 0.0), std::nextafter(b + q, 1e300)});
    }
  }
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    int mismatches = 0;
    for (double v : values) {
      const float want = round_to_from_double(t, v);
      const auto got = static_cast<float>(reference::detail::round_d(t, v));
      const bool same = std::memcmp(&want, &got, sizeof(float)) == 0 || (std::isnan(want) && std::isnan(got));
      if (!same && ++mismatches < 5)
        ADD_FAILURE() << dtype_name(t) << " " << std::hexfloat << v << ": " << got << " vs " << want;
    }
    EXPECT_EQ(mismatches, 0) << dtype_name(t);
  }
}

TEST(ReferenceRounding, RoundSumBreaksTiesWithTheExactRemainder) {
  using reference::detail::round_sum;
  // 1 + 2^-8 is a bf16 tie; 2^-80 is lost in the double sum but decides it.
  EXPECT_EQ(round_sum(DType::bf16, 1.0 + 0x1p-8, 0x1p-80), 1.0 + 0x1p-7);
  EXPECT_EQ(round_sum(DType::bf16, 1.0 + 0x1p-8, -0x1p-80), 1.0);
  EXPECT_EQ(round_sum(DType::bf16, 1.0 + 0x1p-8, 0.0), 1.0);  // a true tie goes to even
  EXPECT_EQ(round_sum(DType::f16, 2048.0 + 1.0, 0x1p-60), 2050.0);
  EXPECT_EQ(round_sum(DType::f16, 65504.0, 16.0), std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace nanscope
