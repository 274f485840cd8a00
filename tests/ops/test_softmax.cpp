// SOFTMAX: the precision matrix (storage x accumulate x softmax precision) on
// odd rows (13, 77) and SD score shapes, extreme logits, and bad inputs.

#include <cmath>

#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

OpCase softmax_case(const Shape& x, double stddev) {
  OpCase c;
  c.op = "softmax";
  c.family = "softmax";
  c.desc = "x" + shape_tag(x) + "_std" + std::to_string(static_cast<int>(stddev));
  c.uses_softmax = true;
  c.oracle = {{"op", "softmax"}};
  c.build = [=](Rng& rng, const Precision& p) {
    return std::vector<HostTensor>{random_normal(rng, x, p.dtype, 0.0, stddev)};
  };
  c.run = [](const OpContext& ctx, const std::vector<Tensor>& in) { return ops::softmax(ctx, in[0]); };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c) {
    for (auto& p : expand(c, precision_matrix(/*with_softmax=*/true))) all.push_back(std::move(p));
  };
  add(softmax_case({5, 77}, 3.0));
  add(softmax_case({3, 13}, 1.0));
  add(softmax_case({2, 8, 77}, 8.0));     // peaked rows
  add(softmax_case({16, 256, 77}, 3.0));  // SD cross-attention scores (heads x tokens x text), 16x16 latent
  add(softmax_case({2, 1024}, 3.0));      // SD self-attention score rows, 32x32 latent
  return all;
}

NANSCOPE_OP_TESTS(Softmax, cases());

// Huge logits (finite in f16), a row of equal values and a -Inf (masked) entry:
// softmax subtracts the row maximum, so every precision stays finite.
TEST(SoftmaxEdges, LargeEqualAndMaskedLogits) {
  const std::vector<float> x{60000.0f,  59000.0f, -60000.0f, 0.0f,  //
                             3.0f,      3.0f,     3.0f,      3.0f,  //
                             -INFINITY, 1.0f,     1.0f,      -INFINITY};
  for (Backend* be : all_backends()) {
    for (const Precision& p : precision_matrix(true)) {
      SCOPED_TRACE("device \"" + be->device().name + "\" " + p.describe());
      const OpContext ctx = make_context(*be, p);
      const auto y = be->download(ops::softmax(ctx, be->upload(HostTensor::from_f32({3, 4}, x, p.dtype))));
      const float want[] = {1, 0, 0, 0, 0.25f, 0.25f, 0.25f, 0.25f, 0, 0.5f, 0.5f, 0};
      for (int i = 0; i < 12; ++i) EXPECT_EQ(y.get(i), want[i]) << "index " << multi_index({3, 4}, i);
    }
  }
}

TEST(SoftmaxBadInput, DtypesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f32});
    const Tensor h = be->upload(HostTensor({4, 9}, DType::bf16));
    expect_op_error([&] { ops::softmax(ctx, h); }, {"SOFTMAX", "[4,9]", "bf16"});
    const Tensor empty = be->upload(HostTensor({4, 0}, DType::f32));
    expect_op_error([&] { ops::softmax(ctx, empty); }, {"SOFTMAX", "[4,0]"});
  }
}

// Hand-worked values on every backend, and the max subtraction that keeps
// huge logits finite.
TEST(SoftmaxKnownValues, ValuesAndStability) {
  const std::vector<float> want{0.09003057f, 0.24472847f, 0.66524096f};  // softmax(1, 2, 3)
  for_each_backend([&](Backend& be) {
    const Precision f32{DType::f32};
    EXPECT_TRUE(matches_known(be.download(ops::softmax(make_context(be, f32), upload_values(be, {1, 3}, {1, 2, 3}))),
                              want, "softmax", f32));
    EXPECT_EQ(
        download_values(be, ops::softmax(make_context(be, f32), upload_values(be, {2, 2}, {1000, 1000, -1e30f, 0}))),
        (std::vector<float>{0.5f, 0.5f, 0, 1}));
    // Native f16: every step rounded, still close to the exact distribution.
    const Precision native{DType::f16, Accumulate::f32, SoftmaxPrecision::native};
    EXPECT_TRUE(matches_known(
        be.download(ops::softmax(make_context(be, native), upload_values(be, {1, 3}, {1, 2, 3}, DType::f16))), want,
        "softmax", native));
  });
}
}  // namespace
}  // namespace nanscope::test
