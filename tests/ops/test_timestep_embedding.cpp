// TIMESTEP_EMBEDDING against diffusers' get_timestep_embedding (the function
// the UNet was trained with), in every storage precision.

#include <cmath>

#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

OpCase embedding_case(std::vector<float> timesteps, int dim, bool flip, float shift, float max_period = 10000.0f) {
  OpCase c;
  c.op = "timestep_embedding";
  c.family = "timestep";
  c.desc = "n" + std::to_string(timesteps.size()) + "_dim" + std::to_string(dim) + (flip ? "_flip" : "") + "_shift" +
           std::to_string(static_cast<int>(shift)) + "_period" + std::to_string(static_cast<int>(max_period));
  c.oracle = {{"op", "timestep_embedding"}, {"timesteps", timesteps}, {"dim", dim},
              {"flip_sin_to_cos", flip},    {"shift", shift},         {"max_period", max_period}};
  c.build = [](Rng&, const Precision&) { return std::vector<HostTensor>{}; };
  c.run = [=](const OpContext& ctx, const std::vector<Tensor>&) {
    return ops::timestep_embedding(ctx, timesteps, dim, flip, shift, max_period);
  };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c) {
    for (auto& p : expand(c, precision_matrix())) all.push_back(std::move(p));
  };
  add(embedding_case({999.0f, 999.0f}, 320, true, 0.0f));  // SD 1.x UNet, CFG batch 2
  add(embedding_case({0.0f, 1.0f, 500.5f, 981.0f, 20.0f}, 320, true, 0.0f));
  add(embedding_case({0.0f, 7.0f, 999.0f}, 13, false, 1.0f));  // odd dim: zero pad column
  add(embedding_case({3.0f, 250.0f}, 64, false, 1.0f, 100.0f));
  return all;
}

NANSCOPE_OP_TESTS(TimestepEmbedding, cases());

TEST(TimestepEmbeddingBadInput, Parameters) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f32});
    const std::vector<float> none, one{5.0f}, nan{NAN};
    expect_op_error([&] { ops::timestep_embedding(ctx, none, 320, true, 0.0f); },
                    {"TIMESTEP_EMBEDDING", "no timesteps"});
    expect_op_error([&] { ops::timestep_embedding(ctx, one, 1, true, 0.0f); }, {"TIMESTEP_EMBEDDING", "dim"});
    expect_op_error([&] { ops::timestep_embedding(ctx, nan, 320, true, 0.0f); }, {"TIMESTEP_EMBEDDING", "not finite"});
  }
}

// dim 4, shift 1: half = 2, freq = exp(-ln(10000) * i / (2 - 1)) = {1, 1e-4};
// odd dim 5 with flip: cos first, then sin, then the zero pad column.
TEST(TimestepEmbeddingKnownValues, FrequenciesFlipAndPadding) {
  const std::vector<float> ts{0.0f, 1.0f};
  const Precision p{DType::f32};
  const float s1 = float(std::sin(1.0)), s4 = float(std::sin(1e-4)), c1 = float(std::cos(1.0)),
              c4 = float(std::cos(1e-4));
  for_each_backend([&](Backend& be) {
    const OpContext c = make_context(be, p);
    EXPECT_TRUE(matches_known(be.download(ops::timestep_embedding(c, ts, 4, false, 1.0f)), {0, 0, 1, 1, s1, s4, c1, c4},
                              "timestep", p));
    EXPECT_TRUE(matches_known(be.download(ops::timestep_embedding(c, ts, 5, true, 1.0f)),
                              {1, 1, 0, 0, 0, c1, c4, s1, s4, 0}, "timestep", p));
  });
}
}  // namespace
}  // namespace nanscope::test
