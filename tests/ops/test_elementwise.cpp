// ADD, SUB, MUL with numpy broadcasting: one rounding of an exact sum or product,
// so every backend must agree bit for bit with the reference and PyTorch.

#include <cmath>

#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

OpCase binary_case(const std::string& op, const Shape& a, const Shape& b) {
  OpCase c;
  c.op = op;
  c.family = "exact";
  c.desc = "a" + shape_tag(a) + "_b" + shape_tag(b);
  c.oracle = {{"op", op}};
  c.build = [=](Rng& rng, const Precision& p) {
    // Different magnitudes on both sides exercise the rounding of the sum.
    return std::vector<HostTensor>{random_normal(rng, a, p.dtype, 0.0, 100.0),
                                   random_normal(rng, b, p.dtype, 0.0, 0.3)};
  };
  c.run = [op](const OpContext& ctx, const std::vector<Tensor>& in) {
    return op == "add"   ? ops::add(ctx, in[0], in[1])
           : op == "sub" ? ops::sub(ctx, in[0], in[1])
                         : ops::mul(ctx, in[0], in[1]);
  };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c) {
    for (auto& p : expand(c, precision_matrix())) all.push_back(std::move(p));
  };
  add(binary_case("add", {2, 13, 5, 7}, {13, 1, 1}));    // per-channel bias
  add(binary_case("add", {2, 77, 768}, {768}));          // per-feature bias
  add(binary_case("sub", {3, 5}, {3, 5}));               // same shape
  add(binary_case("sub", {2, 13, 5, 7}, {2, 1, 5, 1}));  // mixed broadcast
  add(binary_case("mul", {2, 13, 5, 7}, {2, 13, 1, 1}));
  add(binary_case("mul", {2, 3, 4, 5}, {1, 3, 1, 5}));        // alternating broadcast
  add(binary_case("add", {2, 320, 32, 32}, {2, 320, 1, 1}));  // SD resnet: time embedding added per channel
  add(binary_case("mul", {1, 4096, 320}, {1, 4096, 320}));    // SD residual-size elementwise at 64x64
  return all;
}

NANSCOPE_OP_TESTS(Elementwise, cases());

TEST(ElementwiseEdges, F16OverflowAndSpecialValues) {
  const std::vector<float> a{65504.0f, -65504.0f, INFINITY, NAN, 1.0f, 0.0f};
  const std::vector<float> b{32.0f, -32.0f, -INFINITY, 1.0f, -1.0f, -0.0f};
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f16});
    const Tensor ta = be->upload(HostTensor::from_f32({6}, a, DType::f16));
    const Tensor tb = be->upload(HostTensor::from_f32({6}, b, DType::f16));
    const auto sum = be->download(ops::add(ctx, ta, tb));
    EXPECT_EQ(sum.get(0), INFINITY);  // 65536 rounds past the f16 maximum
    EXPECT_EQ(sum.get(1), -INFINITY);
    EXPECT_TRUE(std::isnan(sum.get(2)));  // Inf - Inf
    EXPECT_TRUE(std::isnan(sum.get(3)));
    EXPECT_EQ(sum.get(4), 0.0f);
    EXPECT_FALSE(std::signbit(sum.get(5)));  // 0 + -0 = +0
    const auto prod = be->download(ops::mul(ctx, ta, tb));
    EXPECT_EQ(prod.get(0), INFINITY);
    EXPECT_TRUE(std::signbit(prod.get(5)));  // 0 * -0 = -0
  }
}

TEST(ElementwiseBadInput, ShapesDtypesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f32});
    const Tensor a = be->upload(HostTensor({2, 13, 5}, DType::f32));
    const Tensor b = be->upload(HostTensor({12, 5}, DType::f32));
    expect_op_error([&] { ops::add(ctx, a, b); }, {"ADD", "[2,13,5]", "[12,5]", "broadcast"});
    const Tensor longer = be->upload(HostTensor({1, 2, 13, 5}, DType::f32));
    expect_op_error([&] { ops::mul(ctx, a, longer); }, {"MUL", "[1,2,13,5]"});
    const Tensor h = be->upload(HostTensor({13, 5}, DType::f16));
    expect_op_error([&] { ops::sub(ctx, a, h); }, {"SUB", "f16", "f32"});
    const Tensor empty = be->upload(HostTensor({2, 0, 5}, DType::f32));
    expect_op_error([&] { ops::add(ctx, empty, empty); }, {"ADD", "[2,0,5]"});
  }
}

// Broadcast patterns worked out by hand on every backend, and f16's rounding
// of an exact sum at the top of its range.
TEST(ElementwiseKnownValues, BroadcastPatternsAndF16Ties) {
  std::vector<float> av(24);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i);
  Rng rng(seed_from("elementwise rank 5"));
  const HostTensor a5 = random_normal(rng, {2, 1, 2, 2, 3}, DType::f32);
  for_each_backend([&](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const Tensor a = upload_values(be, {2, 3, 4}, av);
    // b [3, 1]: one value per middle row.
    const auto s = download_values(be, ops::add(c, a, upload_values(be, {3, 1}, {100, 200, 300})));
    for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(s[i], av[i] + 100.0f * static_cast<float>(1 + (i / 4) % 3));
    // b [4]: one value per column; b [2, 1, 4]: broadcast over the middle.
    const auto d = download_values(be, ops::sub(c, a, upload_values(be, {4}, {0, 1, 2, 3})));
    for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(d[i], av[i] - static_cast<float>(i % 4));
    const auto m = download_values(be, ops::mul(c, a, upload_values(be, {2, 1, 4}, {1, 1, 1, 1, 2, 2, 2, 2})));
    for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(m[i], av[i] * (i < 12 ? 1.0f : 2.0f));
    // A rank-5 shape whose broadcast pattern collapses to rank 4.
    const auto a5v = a5.to_f32();
    const auto r5 = download_values(be, ops::add(c, be.upload(a5), upload_values(be, {2, 1, 3}, {1, 2, 3, 4, 5, 6})));
    for (std::size_t i = 0; i < 24; ++i) {
      const std::size_t k = i % 3, j = (i / 6) % 2;
      EXPECT_EQ(r5[i], a5v[i] + static_cast<float>(j * 3 + k + 1));
    }
    // f16: the exact sum rounds once: 65520 is the tie that goes to Inf, 65512 rounds down.
    const OpContext h = make_context(be, {DType::f16});
    const Tensor top = upload_values(be, {1}, {65504}, DType::f16);
    EXPECT_EQ(download_values(be, ops::add(h, top, upload_values(be, {1}, {16}, DType::f16)))[0], INFINITY);
    EXPECT_EQ(download_values(be, ops::add(h, top, upload_values(be, {1}, {8}, DType::f16)))[0], 65504.0f);
  });
}
}  // namespace
}  // namespace nanscope::test
