#include "support/tolerance.hpp"

#include <optional>
#include <stdexcept>

namespace nanscope::test {

namespace {

struct Row {
  std::string_view family;
  std::optional<DType> dtype;      // nullopt: any
  std::string_view mode;           // "f32", "native" or "*"
  Check check;
  Tolerance tol;
};

// CALIBRATION (provisional, being calibrated)
constexpr Row kTable[] = {
    {"exact", std::nullopt, "*", Check::backend, {0.0, 0.0}},
    {"exact", std::nullopt, "*", Check::torch, {0.0, 0.0}},
    {"*", DType::f32, "*", Check::backend, {1e-10, 1e-5}},
    {"*", DType::f32, "*", Check::torch, {1e-10, 1e-5}},
    {"*", DType::f16, "f32", Check::backend, {1e-6, 2e-3}},
    {"*", DType::f16, "f32", Check::torch, {1e-6, 2e-3}},
    {"*", DType::f16, "native", Check::backend, {1e-5, 1e-2}},
    {"*", DType::f16, "native", Check::torch, {1e-3, 5e-2}},
    {"*", DType::bf16, "f32", Check::backend, {1e-4, 2e-2}},
    {"*", DType::bf16, "f32", Check::torch, {1e-4, 2e-2}},
    {"*", DType::bf16, "native", Check::backend, {1e-3, 5e-2}},
    {"*", DType::bf16, "native", Check::torch, {1e-1, 3e-1}},
};

}  // namespace

std::string_view check_name(Check c) { return c == Check::backend ? "backend" : "torch"; }

std::string_view precision_mode(const Precision& p) {
  return p.native_accumulation() || p.native_softmax() ? "native" : "f32";
}

std::string tolerance_key(std::string_view family, const Precision& p, Check check) {
  return std::string(family) + " " + std::string(dtype_name(p.dtype)) + "/" + std::string(precision_mode(p)) + " " +
         std::string(check_name(check));
}

Tolerance tolerance(std::string_view family, const Precision& p, Check check) {
  const std::string_view mode = precision_mode(p);
  for (const Row& r : kTable) {
    if ((r.family == family || r.family == "*") && (!r.dtype || *r.dtype == p.dtype) &&
        (r.mode == "*" || r.mode == mode) && r.check == check) {
      return r.tol;
    }
  }
  throw std::runtime_error("no tolerance entry for " + tolerance_key(family, p, check) +
                           ": calibrate one in tests/support/tolerance.cpp");
}

}  // namespace nanscope::test
