// A/B divergence: the relative L2 on its own, and whole runs of the embedded
// model (skipped with a message when it is absent): the same config twice does
// not diverge at all, f16 against f32 diverges a little, a NaN on one side
// is infinitely divergent from its step on.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "pipeline/sd_model.hpp"
#include "studies/ab.hpp"

namespace nanscope::studies {
namespace {

using namespace inspect;

TEST(Ab, RelativeL2) {
  const std::vector<float> b = {3.0f, 4.0f}, a = {3.0f, 4.5f};
  double mx = 0;
  EXPECT_NEAR(relative_l2(a, b, &mx), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(mx, 0.5);
  EXPECT_EQ(relative_l2(b, b), 0.0);
  const std::vector<float> nan = {3.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isinf(relative_l2(nan, b)));
  EXPECT_EQ(relative_l2(nan, nan), 0.0);  // the same NaN on both sides is no divergence
  EXPECT_TRUE(std::isinf(relative_l2(std::vector<float>{1.0f}, std::vector<float>{0.0f})));
}

TEST(Ab, SameConfigDoesNotDivergeAndF16DivergesALittle) {
  try {
    pipeline::embedded_model_dir();
  } catch (const FileError& e) {
    GTEST_SKIP() << "the embedded model is absent (set NANSCOPE_MODEL_DIR): " << e.what();
  }
  RunConfig base;
  base.prompt = "a small red square at the top left on a blue background";
  base.steps = 4;
  base.seed = 9;
  const AbResult same = run_ab(base, base);
  ASSERT_EQ(same.steps.size(), 4u);
  for (const auto& s : same.steps) EXPECT_EQ(s.latent_rel_l2, 0.0) << s.step;
  EXPECT_EQ(same.first_divergent_step, -1);
  EXPECT_EQ(same.image_max_diff, 0);

  RunConfig f16 = base;
  f16.set("unet.dtype", "f16");
  const AbResult half = run_ab(f16, base, 1e-1);
  ASSERT_EQ(half.steps.size(), 4u);
  EXPECT_GT(half.steps.back().latent_rel_l2, 0.0);
  EXPECT_LT(half.steps.back().latent_rel_l2, 0.1);
  EXPECT_EQ(half.report["steps"].size(), 4u);
  EXPECT_EQ(half.report["b"]["verdict"], "clean");
}

}  // namespace
}  // namespace nanscope::studies
