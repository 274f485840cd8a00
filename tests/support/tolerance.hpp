#pragma once
// The one tolerance table for op tests, looked up per (op family, storage
// dtype, accumulation mode, check). See tolerance.cpp for how each entry was
// calibrated.

#include <string>
#include <string_view>

#include "core/precision.hpp"
#include "support/compare.hpp"

namespace nanscope::test {

enum class Check : std::uint8_t {
  // An OpenCL device against the reference backend at the same precision. Both
  // implement the documented semantics (op_args.hpp), so the differences come
  // only from f32 vs f64 sums (acc=f32) and from libm-level function accuracy.
  backend,
  // The reference backend against PyTorch computing in float64 from the same
  // rounded inputs (the f32-accumulate semantics). For native precisions this
  // bounds how far native accumulation drifts from the exact result on benign
  // (unit-scale) inputs: the documented property, since PyTorch has no native mode.
  torch,
};
std::string_view check_name(Check c);

// "native" when the precision accumulates or runs softmax in a 16-bit type, else "f32".
std::string_view precision_mode(const Precision& p);

// The table entry; throws std::runtime_error when there is none (a new family
// or precision must be calibrated, not guessed).
Tolerance tolerance(std::string_view family, const Precision& p, Check check);
// "matmul f16/native torch": the cell name used in failures and the calibration report.
std::string tolerance_key(std::string_view family, const Precision& p, Check check);

}  // namespace nanscope::test
