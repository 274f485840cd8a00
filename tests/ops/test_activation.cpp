// SILU, GELU (erf and tanh), QUICK_GELU, GEGLU and SCALE: the precision matrix
// on odd and SD shapes, saturation and overflow at the edges of f16, and bad inputs.

#include <cmath>
#include <numbers>

#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

OpCase unary_case(const std::string& op, const Shape& x, const nlohmann::json& oracle,
                  std::function<Tensor(const OpContext&, const Tensor&)> fn, double stddev = 3.0) {
  OpCase c;
  c.op = op;
  c.family = "activation";
  c.desc = "x" + shape_tag(x);
  c.oracle = oracle;
  // A wide spread reaches the saturated tails of every activation.
  c.build = [=](Rng& rng, const Precision& p) {
    return std::vector<HostTensor>{random_normal(rng, x, p.dtype, 0.0, stddev)};
  };
  c.run = [fn](const OpContext& ctx, const std::vector<Tensor>& in) { return fn(ctx, in[0]); };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c) {
    for (auto& p : expand(c, precision_matrix())) all.push_back(std::move(p));
  };
  for (const Shape& s : {Shape{5, 7}, Shape{2, 13, 5, 7}, Shape{2, 320, 32, 32}}) {
    add(unary_case("silu", s, {{"op", "silu"}}, ops::silu));
    add(unary_case("gelu", s, {{"op", "gelu"}, {"approximate", "none"}},
                   [](const OpContext& ctx, const Tensor& x) { return ops::gelu(ctx, x, ops::GeluApprox::none); }));
    add(unary_case("gelu_tanh", s, {{"op", "gelu"}, {"approximate", "tanh"}},
                   [](const OpContext& ctx, const Tensor& x) { return ops::gelu(ctx, x, ops::GeluApprox::tanh); }));
    add(unary_case("scale", s, {{"op", "scale"}, {"factor", 0.18215f}},
                   [](const OpContext& ctx, const Tensor& x) { return ops::scale(ctx, x, 0.18215f); }));
  }
  add(unary_case("quick_gelu", {1, 77, 13}, {{"op", "quick_gelu"}}, ops::quick_gelu));
  add(unary_case("quick_gelu", {1, 77, 3072}, {{"op", "quick_gelu"}}, ops::quick_gelu));  // CLIP MLP
  add(unary_case("geglu", {3, 5, 26}, {{"op", "geglu"}}, ops::geglu));
  add(unary_case("geglu", {2, 9, 2086}, {{"op", "geglu"}}, ops::geglu));     // rows of 65 chunks and a tail of 3
  add(unary_case("geglu", {1, 1024, 2560}, {{"op", "geglu"}}, ops::geglu));  // SD ff at 32x32, inner 1280
  return all;
}

NANSCOPE_OP_TESTS(Activation, cases());

// At the edges of f16: silu of huge values is the value itself, scale can
// overflow to Inf with the right sign, and NaN propagates.
TEST(ActivationEdges, F16SaturationOverflowAndNaN) {
  const std::vector<float> x{65504.0f, -65504.0f, 30000.0f, -30000.0f, NAN, 0.0f};
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f16});
    const Tensor t = be->upload(HostTensor::from_f32({6}, x, DType::f16));
    const auto silu = be->download(ops::silu(ctx, t));
    EXPECT_EQ(silu.get(0), 65504.0f);
    EXPECT_EQ(silu.get(1), 0.0f);
    EXPECT_TRUE(std::isnan(silu.get(4)));
    EXPECT_EQ(silu.get(5), 0.0f);
    const auto scaled = be->download(ops::scale(ctx, t, 4.0f));
    EXPECT_EQ(scaled.get(2), INFINITY);
    EXPECT_EQ(scaled.get(3), -INFINITY);
    EXPECT_TRUE(std::isnan(scaled.get(4)));
    const auto gelu = be->download(ops::gelu(ctx, t));
    EXPECT_EQ(gelu.get(0), 65504.0f);
    EXPECT_EQ(gelu.get(1), 0.0f);
  }
}

TEST(ActivationBadInput, DtypesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f16});
    const Tensor x32 = be->upload(HostTensor({3, 5}, DType::f32));
    expect_op_error([&] { ops::silu(ctx, x32); }, {"SILU", "[3,5]", "f32"});
    const Tensor odd = be->upload(HostTensor({3, 5}, DType::f16));
    expect_op_error([&] { ops::geglu(ctx, odd); }, {"GEGLU", "[3,5]"});
    const Tensor empty = be->upload(HostTensor({3, 0}, DType::f16));
    expect_op_error([&] { ops::gelu(ctx, empty); }, {"GELU", "[3,0]"});
  }
}

// Hand-worked values on every backend (erf/tanh values from their series).
TEST(ActivationKnownValues, EveryActivation) {
  const Precision p{DType::f32};
  const double qg = 1.0 / (1.0 + std::exp(-1.702));
  for_each_backend([&](Backend& be) {
    const OpContext c = make_context(be, p);
    const Tensor x = upload_values(be, {3}, {-1, 0, 1});
    EXPECT_TRUE(matches_known(be.download(ops::silu(c, x)), {-0.26894142f, 0, 0.73105858f}, "activation", p));
    EXPECT_TRUE(matches_known(be.download(ops::gelu(c, x)), {-0.15865525f, 0, 0.84134475f}, "activation", p));
    EXPECT_TRUE(matches_known(be.download(ops::gelu(c, x, ops::GeluApprox::tanh)), {-0.15880801f, 0, 0.84119199f},
                              "activation", p));
    EXPECT_TRUE(matches_known(be.download(ops::quick_gelu(c, x)), {float(-(1 - qg)), 0, float(qg)}, "activation", p));
    EXPECT_EQ(download_values(be, ops::scale(c, x, 0.18215f)), (std::vector<float>{-0.18215f, 0, 0.18215f}));
    // GEGLU: values [1, 2], gate [0, 1] -> [1 * gelu(0), 2 * gelu(1)].
    EXPECT_TRUE(matches_known(be.download(ops::geglu(c, upload_values(be, {1, 4}, {1, 2, 0, 1}))), {0, 1.6826895f},
                              "activation", p));
    // Large inputs stay finite and exact: silu(x) = x for big x.
    EXPECT_EQ(
        download_values(be, ops::silu(make_context(be, {DType::f16}), upload_values(be, {1}, {60000}, DType::f16)))[0],
        60000.0f);
  });
}

// GELU's erf over its whole range, in f32, against the formula in double: the
// OpenCL kernels evaluate erf with their own polynomials (activation.cl
// NS_ERF), whose branches meet at |x| = 0.927734375; a wrong coefficient puts
// some value 1e-4 or more off. Grid of 3073 values over [-12, 12] (the 16-wide
// vector path and, with the extra values, the scalar tail), both sides of the
// branch point, tiny and denormal values, large ones, the infinities and NaN;
// GELU and GEGLU (gate x, value 1) both.
TEST(ActivationErf, GeluWithinAFewUlpOfDoubleOverTheWholeRange) {
  std::vector<float> x;
  for (int i = -1536; i <= 1536; ++i) x.push_back(static_cast<float>(i) / 128.0f);
  const float branch = 0.927734375f;
  for (const float v : {branch, -branch, std::nextafter(branch, 0.0f), std::nextafter(branch, 1.0f), 1e-30f, -1e-30f,
                        1e-40f, -0.0f, 3.0e4f, -3.0e4f, 1.0e-3f, -6.0f * 0.70710678f})
    x.push_back(v);
  const std::size_t finite = x.size();
  x.insert(x.end(), {INFINITY, -INFINITY, NAN});
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> geglu_in(x.size(), 1.0f);  // [1, 2n]: values 1, then the gates
  geglu_in.insert(geglu_in.end(), x.begin(), x.end());
  for_each_backend([&](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const std::vector<float> gelu = download_values(be, ops::gelu(c, upload_values(be, {n}, x)));
    const std::vector<float> geglu = download_values(be, ops::geglu(c, upload_values(be, {1, 2 * n}, geglu_in)));
    for (const auto* got : {&gelu, &geglu}) {
      for (std::size_t i = 0; i < finite; ++i) {
        const double xi = x[i];
        const double want = 0.5 * xi * (1.0 + std::erf(xi / std::numbers::sqrt2));
        // f32 arithmetic: x / sqrt(2) and 1 + erf round at 2^-24 relative (x times that, absolute, at the end),
        // and erf itself within about 1 ulp.
        const double tol = std::abs(xi) * std::ldexp(1.0, -22) + 4.0 * std::ldexp(1.0, std::ilogb(want) - 23) + 1e-45;
        EXPECT_NEAR((*got)[i], want, tol) << "x = " << x[i] << (got == &gelu ? " (GELU)" : " (GEGLU)");
      }
      EXPECT_EQ((*got)[finite], INFINITY);
      EXPECT_TRUE(std::isnan((*got)[finite + 1])) << "-inf * (1 + erf(-inf)) = -inf * 0";
      EXPECT_TRUE(std::isnan((*got)[finite + 2]));
    }
  });
}

}  // namespace
}  // namespace nanscope::test
