#pragma once
// Op test cases in the spirit of ggml's test-backend-ops: a case is a small
// value (op, shape description, precision, how to build its inputs, how to run
// it, what the PyTorch oracle should compute), and every case runs through the
// same checks:
//   BackendVsReference: every OpenCL device against the reference backend at
//     the same precision (or, for cases too slow for the reference, against
//     PyTorch);
//   ReferenceVsTorch:   the reference backend against tests/oracles/ops_oracle.py,
//     which computes the op in float64 from the same rounded inputs. All cases
//     of a test file go to one python process (start-up and the torch import
//     cost seconds), limited to the tests gtest will actually run.
// Failure-mode cases (expected Inf/NaN) and bad-input cases are plain TESTs in
// the op files, using the helpers below.
//
// Environment:
//   NANSCOPE_OP_FILTER=conv2d,softmax  only cases whose op contains one of these
//   NANSCOPE_OP_PERF=1                 also time each case on each OpenCL device
//   NANSCOPE_TOL_REPORT=1              print the worst error per tolerance cell at exit
// gtest's own --gtest_filter works on the names too: test names are
// "Ops/<Suite>.<Check>/<op>_<dtype>_<mode>_<shape>".

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ops/ops.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

namespace nanscope::test {

struct OpCase {
  std::string op;      // "conv2d": filtering and the test name
  std::string family;  // tolerance family: matmul, conv2d, norm, activation, softmax, attention, ...
  std::string desc;    // shape and parameters, e.g. "x1x13x5x7_o8_k3_s1_p1": names and seeds the case
  Precision precision;
  AttentionConfig attention;
  bool uses_softmax = false;    // the name and matrix include the softmax precision
  bool uses_attention = false;  // the name includes the attention impl and slice size
  bool on_reference = true;     // false: too slow for the reference; OpenCL is checked against PyTorch
  bool expect_nonfinite = false;
  // false when the op reduces over so many values that native accumulation is
  // expected to drift arbitrarily far from the exact result (f16 overflow,
  // bf16 swamping): the PyTorch check then covers the f32 modes only, and the
  // failure-mode tests pin down the native behaviour.
  bool native_close_to_exact = true;
  double flops = 0.0;  // for NANSCOPE_OP_PERF
  // What ops_oracle.py computes: {"op": ..., parameters}. Null: no PyTorch check.
  nlohmann::json oracle;
  // Inputs in their storage dtype, from the case's seeded generator.
  std::function<std::vector<HostTensor>(Rng&, const Precision&)> build;
  // Runs the op on ctx.backend with the uploaded inputs.
  std::function<Tensor(const OpContext&, const std::vector<Tensor>&)> run;

  std::string name() const;      // gtest-safe unique name
  std::uint64_t seed() const;    // from op and desc only: every precision sees the same values
  std::string describe() const;  // for traces: op, desc, precision, attention, seed
};

using OpCasePtr = std::shared_ptr<const OpCase>;

// The precisions of the matrix: f32; f16 and bf16 x accumulate {f32, native};
// with_softmax: x softmax {f32, native} for the 16-bit types.
std::vector<Precision> precision_matrix(bool with_softmax = false);
// One copy of base per precision.
std::vector<OpCasePtr> expand(const OpCase& base, const std::vector<Precision>& precisions);

// Keeps the cases NANSCOPE_OP_FILTER (and the case filter, if set) selects and
// registers them for the oracle batch.
std::vector<OpCasePtr> register_cases(std::vector<OpCasePtr> cases);
// A second filter on top of NANSCOPE_OP_FILTER, given each test file's cases
// at once, e.g. test_oclgrind's "small shapes, and every precision only on the
// smallest". Set it before gtest registers the tests (before InitGoogleTest).
using CaseFilter = std::function<std::vector<OpCasePtr>(std::vector<OpCasePtr>)>;
void set_case_filter(CaseFilter filter);

// Runs a case on a backend: builds and uploads its inputs, runs, downloads,
// then fails the test if the op wrote past the end of any buffer (guards:
// support/backends.hpp).
HostTensor run_case(Backend& backend, const OpCase& c);
// Fails the test for every guard violation the backend recorded so far.
void expect_no_guard_violations(Backend& backend);
// The reference backend's output (computed once per case).
const HostTensor& reference_output(const OpCase& c);
// PyTorch's output for the case (batched, computed once per process).
const HostTensor& torch_output(const OpCase& c);

void check_backends(const OpCase& c);
void check_torch(const OpCase& c);

// Runs f on every OpenCL backend (with a trace naming the device); skips (fails
// under $CI) when there is none.
void for_each_opencl(const std::function<void(Backend&)>& f);
// The reference backend followed by every OpenCL backend.
std::vector<Backend*> all_backends();
OpContext make_context(Backend& backend, const Precision& p, const AttentionConfig& a = {}, std::string path = "test");
// A tracer that records the name of every op it is shown, in order.
struct OpNameRecorder : OpTracer {
  std::vector<std::string> names;
  void on_op(const OpContext&, std::string_view op, std::span<const Tensor* const>, const Tensor&) override {
    names.emplace_back(op);
  }
};

// Known-value tests: small hand-worked cases, run on every backend.
// for_each_backend runs f on the reference backend and every OpenCL backend
// (each traced with its device name; the guards are checked after each).
void for_each_backend(const std::function<void(Backend&)>& f);
Tensor upload_values(Backend& backend, const Shape& shape, const std::vector<float>& values, DType t = DType::f32);
std::vector<float> download_values(Backend& backend, const Tensor& t);
// `got` against values worked out by hand (exact results, rounded once into
// got's dtype) at the tolerance table's PyTorch cell for the family and
// precision: the hand-worked values stand where the float64 oracle does.
::testing::AssertionResult matches_known(const HostTensor& got, const std::vector<float>& want, std::string_view family,
                                         const Precision& p);

// "1x13x5x7": shapes in case descriptions.
std::string shape_tag(const Shape& s);
// Runs f and expects an OpError whose message contains every fragment (the op's
// name, the shapes...). Anything else, or no exception, fails.
void expect_op_error(const std::function<void()>& f, std::initializer_list<std::string> fragments);

struct OpCaseName {
  std::string operator()(const ::testing::TestParamInfo<OpCasePtr>& info) const { return info.param->name(); }
};

// gtest prints the parameter with this (instead of the object's bytes).
inline void PrintTo(const OpCasePtr& c, std::ostream* os) { *os << c->describe(); }

class OpCaseTest : public ::testing::TestWithParam<OpCasePtr> {};

}  // namespace nanscope::test

// Defines the two checks for a list of cases (an expression giving std::vector<OpCasePtr>).
#define NANSCOPE_OP_TESTS(Suite, cases)                                                              \
  class Suite : public ::nanscope::test::OpCaseTest {};                                              \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Suite);                                              \
  TEST_P(Suite, BackendVsReference) { ::nanscope::test::check_backends(*GetParam()); }               \
  TEST_P(Suite, ReferenceVsTorch) { ::nanscope::test::check_torch(*GetParam()); }                    \
  INSTANTIATE_TEST_SUITE_P(Ops, Suite, ::testing::ValuesIn(::nanscope::test::register_cases(cases)), \
                           ::nanscope::test::OpCaseName{})
