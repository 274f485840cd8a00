// SILU, GELU (erf and tanh), QUICK_GELU, GEGLU and SCALE: the precision matrix
// on odd and SD shapes, saturation and overflow at the edges of f16, and bad inputs.

#include <cmath>

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

}  // namespace
}  // namespace nanscope::test
