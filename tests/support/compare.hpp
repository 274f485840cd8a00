#pragma once
// Comparing an output with a reference, in the spirit of ggml's test-backend-ops:
// normalised MSE, sum((got-want)^2) / sum(want^2), plus the largest absolute
// error in units of max|want| (so one table serves every output scale).
// A NaN anywhere fails; an Inf must match in position and sign. A case that
// expects non-finite output instead requires the non-finite pattern to match
// (NaN where the reference has NaN, the same infinities) and measures the error
// on the finite rest. Failures print the worst index (as a multi-index) and the
// values there; the caller adds the seed with SCOPED_TRACE.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace nanscope::test {

struct Tolerance {
  double nmse = 0.0;     // upper bound on sum((got-want)^2) / sum(want^2)
  double max_abs = 0.0;  // upper bound on max|got-want| / max|want|
};

struct CompareStats {
  double nmse = 0.0;
  double max_abs = 0.0;      // absolute
  double max_abs_rel = 0.0;  // in units of max|want|
  std::int64_t worst = -1;   // index of the largest absolute error among finite pairs
  std::int64_t finite = 0;   // pairs where both are finite
  std::int64_t nonfinite_mismatches = 0;
  std::int64_t first_mismatch = -1;  // first index where NaN/Inf patterns differ
  std::int64_t nan_got = 0, nan_want = 0, inf_got = 0, inf_want = 0;
};

CompareStats compare_stats(const HostTensor& got, const HostTensor& want);

// "[0,3,2,1]" for flat index i of shape.
std::string multi_index(const Shape& shape, std::int64_t i);

// Passes when shapes match, non-finite values follow the rules above and both
// error measures are within tol. `key` names the (op, precision, check) cell:
// with $NANSCOPE_TOL_REPORT set, the worst observed values per key are printed
// at exit — how the tolerance table was calibrated.
::testing::AssertionResult tensors_close(const HostTensor& got, const HostTensor& want, const Tolerance& tol,
                                         bool expect_nonfinite = false, std::string_view key = {});

// Passes when the two tensors have the same shape, dtype and bytes.
::testing::AssertionResult bitwise_equal(const HostTensor& got, const HostTensor& want);

// Count of NaN and +-Inf values.
std::int64_t count_nonfinite(const HostTensor& t);

// Records an observation for the calibration report (see tensors_close).
void record_observation(std::string_view key, const CompareStats& stats);

}  // namespace nanscope::test
