// A1111's "Eta noise seed delta" (ENSD, setting noise.eta_seed_delta,
// pipeline/step_noise.hpp): the step noise of an Euler a run comes from a new
// generator seeded seed + ENSD, for the torch-cpu source (checked through
// diffusers' StableDiffusionPipeline with a CPU generator so seeded) and the
// torch-cuda (A1111 NV) source (checked with noise_oracle.py's numpy Philox
// at offsets 0, 1, ... of seed + ENSD), on the tiny random-weight pipeline of
// test_pipeline.cpp, reference backend. Tolerance as test_pipeline.cpp: the
// final latent within nmse 1e-8 / max-abs 1e-4 of diffusers (observed ~1e-12).

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "config/a1111.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/session.hpp"
#include "pipeline/step_noise.hpp"
#include "support/compare.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

struct Capture final : pipeline::RunObserver {
  std::vector<float> noise;
  Shape noise_shape;
  std::vector<pipeline::GeneratedImage> images;
  void on_initial_noise(int, const Shape& s, std::span<const float> v) override {
    noise.assign(v.begin(), v.end());
    noise_shape = s;
  }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport&) override { images.push_back(img); }
};

RunConfig ensd_config(const std::string& noise, std::int64_t delta) {
  RunConfig c;
  c.model = test::tiny_sd_pipeline_dir().string();
  c.prompt = "a red circle on a blue background";
  c.negative_prompt = "green";
  c.steps = 5;
  c.cfg_scale = 7.0;
  c.seed = 42;
  c.set("sampler", "euler_a");
  c.set("noise", noise);
  c.set("noise.eta_seed_delta", std::to_string(delta));
  c.device = "reference";
  return c;
}

Capture run(pipeline::Session& s, const RunConfig& c) {
  Capture cap;
  s.generate(c, &cap);
  EXPECT_EQ(cap.images.size(), 1u);
  return cap;
}

// The run with ENSD 31337 against diffusers given A1111's step-noise generator for `source`.
void check_against_a1111_rule(const std::string& noise, const std::string& source) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  const RunConfig with = ensd_config(noise, 31337);
  const Capture cap = run(session, with);
  ASSERT_EQ(cap.images.size(), 1u);
  test::TempDir io_dir;
  io::write_safetensors(io_dir / "in.safetensors", {{"noise", HostTensor::from_f32(cap.noise_shape, cap.noise)}});
  test::run_oracle("pipeline_oracle.py",
                   {"run", with.model, (io_dir / "in.safetensors").string(), (io_dir / "out.safetensors").string(),
                    with.prompt, with.negative_prompt, "5", "7.0", "euler_a", "42", "31337", source});
  const auto out = io::SafetensorsFile::open(io_dir / "out.safetensors");
  // The initial noise is the seed's, untouched by ENSD.
  EXPECT_TRUE(
      test::bitwise_equal(HostTensor::from_f32(cap.noise_shape, cap.noise), out.read("noise_check", DType::f32)));
  const auto& img = cap.images[0];
  EXPECT_TRUE(test::tensors_close(HostTensor::from_f32(img.latent_shape, img.latent), out.read("latent", DType::f32),
                                  {1e-8, 1e-4}));

  // ENSD 0 keeps the seed's stream: the same initial noise, another image.
  const Capture without = run(session, ensd_config(noise, 0));
  ASSERT_EQ(without.images.size(), 1u);
  EXPECT_EQ(without.noise, cap.noise);
  double diff = 0;
  for (std::size_t i = 0; i < img.latent.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(img.latent[i] - without.images[0].latent[i])));
  EXPECT_GT(diff, 1e-2) << "ENSD changed nothing";
}

TEST(Ensd, TorchCpuStepNoiseIsSeedPlusDelta) { check_against_a1111_rule("torch-cpu", "cpu"); }

TEST(Ensd, TorchCudaStepNoiseIsNvGeneratorOfSeedPlusDelta) { check_against_a1111_rule("torch-cuda", "cuda"); }

TEST(Ensd, SeedRuleSettingAndInfotext) {
  EXPECT_EQ(pipeline::step_noise_seed(42, 31337), 31379u);
  EXPECT_EQ(pipeline::step_noise_seed(0, -1), 0xffffffffffffffffull);  // torch reads a negative seed mod 2^64
  RunConfig c;
  EXPECT_EQ(c.eta_seed_delta, 0);
  c.set("noise.eta_seed_delta", "31337");
  EXPECT_EQ(c.eta_seed_delta, 31337);
  EXPECT_THROW(c.set("noise.eta_seed_delta", "1e99"), ConfigError);
  // A1111's infotext carries it as "ENSD" and reads back.
  const std::string text = a1111_parameters(c);
  EXPECT_NE(text.find("ENSD: 31337"), std::string::npos) << text;
  EXPECT_EQ(run_config_from_a1111(text, RunConfig{}).eta_seed_delta, 31337);
  EXPECT_EQ(a1111_parameters(RunConfig{}).find("ENSD"), std::string::npos);
}

}  // namespace
}  // namespace nanscope
