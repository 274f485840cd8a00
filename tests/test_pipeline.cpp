// The whole txt2img pipeline against diffusers' StableDiffusionPipeline on a
// tiny random-weight SD 1.x folder (tests/oracles/pipeline_oracle.py), from the
// same initial latent; determinism; reference vs OpenCL; the NaN policy's
// decode retry on a VAE made to overflow in f16.
//
// Tolerances: the final latent in f32 on any backend vs diffusers in float32:
// observed nmse ~1e-12; bound 1e-8. Pixels (uint8) may differ by rounding at
// the 0.5 boundary: at most 2 levels.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/device.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/session.hpp"
#include "support/compare.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;

struct Capture final : pipeline::RunObserver {
  std::vector<float> noise;
  Shape noise_shape;
  std::vector<pipeline::GeneratedImage> images;
  std::vector<pipeline::RunReport> reports;
  int steps_seen = 0;
  std::vector<pipeline::StepReport> steps;
  void on_initial_noise(int, const Shape& s, std::span<const float> v) override {
    noise.assign(v.begin(), v.end());
    noise_shape = s;
  }
  void on_step(const pipeline::StepReport& r) override {
    ++steps_seen;
    pipeline::StepReport kept = r;
    kept.stats = {};
    steps.push_back(std::move(kept));
  }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
    images.push_back(img);
    reports.push_back(r);
  }
};

const fs::path& model_dir() { return test::tiny_sd_pipeline_dir(); }

RunConfig base_config(const std::string& device, const std::string& sampler) {
  RunConfig c;
  c.model = model_dir().string();
  c.prompt = "a red circle on a blue background";
  c.negative_prompt = "green";
  c.steps = 5;
  c.cfg_scale = 7.0;
  c.seed = 42;
  c.set("sampler", sampler);
  c.set("noise", "torch-cpu");
  c.device = device;
  return c;
}

std::vector<std::string> device_ids() {
  std::vector<std::string> ids;
  for (const auto& d : enumerate_devices().devices) {
    if (d.kind != DeviceKind::simulator) ids.push_back(d.id);  // Oclgrind: test_oclgrind
  }
  return ids;
}

Capture run(pipeline::Session& s, const RunConfig& c) {
  Capture cap;
  s.generate(c, &cap);
  return cap;
}

int max_pixel_diff(const io::RgbImage& a, const io::RgbImage& b) {
  int m = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) m = std::max(m, std::abs(a.pixels[i] - b.pixels[i]));
  return m;
}

// `calls`: model calls in 5 steps (Heun: 9, the last step being one Euler call).
// `devices`: where to run (default: every device).
void check_against_diffusers(const std::string& sampler, int calls = 5, std::vector<std::string> devices = {}) {
  NANSCOPE_REQUIRE_PYTHON();
  if (devices.empty()) devices = device_ids();
  for (const auto& dev : devices) {
    SCOPED_TRACE(sampler + " on " + dev);
    pipeline::Session session;
    const RunConfig cfg = base_config(dev, sampler);
    const Capture cap = run(session, cfg);
    ASSERT_EQ(cap.images.size(), 1u);
    EXPECT_EQ(cap.steps_seen, calls);
    // Every model call is reported (and inspected) with the sampler step it belongs to.
    for (std::size_t i = 0; i < cap.steps.size(); ++i) {
      const pipeline::StepReport& r = cap.steps[i];
      EXPECT_EQ(r.index, static_cast<int>(i));
      EXPECT_EQ(r.steps, calls);
      EXPECT_EQ(r.sampler_steps, 5);
      EXPECT_EQ(r.sampler_step, calls == 5 ? static_cast<int>(i) : static_cast<int>(i) / 2);
      EXPECT_EQ(r.call_in_step, calls == 5 ? 0 : static_cast<int>(i) % 2);
      EXPECT_GT(r.latent.count, 0) << "no inspector statistics at call " << i;
    }
    test::TempDir io_dir;
    io::write_safetensors(io_dir / "in.safetensors", {{"noise", HostTensor::from_f32(cap.noise_shape, cap.noise)}});
    test::run_oracle("pipeline_oracle.py", {"run", model_dir().string(), (io_dir / "in.safetensors").string(),
                                            (io_dir / "out.safetensors").string(), cfg.prompt, cfg.negative_prompt, "5",
                                            "7.0", sampler, "42"});
    const auto out = io::SafetensorsFile::open(io_dir / "out.safetensors");
    // The engine's torch-cpu noise is torch's randn for the seed, bit for bit.
    EXPECT_TRUE(
        test::bitwise_equal(HostTensor::from_f32(cap.noise_shape, cap.noise), out.read("noise_check", DType::f32)));
    const auto& img = cap.images[0];
    EXPECT_TRUE(test::tensors_close(HostTensor::from_f32(img.latent_shape, img.latent), out.read("latent", DType::f32),
                                    {1e-8, 1e-4}));
    const HostTensor want = out.read("image", DType::f32);
    const int h = img.image.height, w = img.image.width;
    ASSERT_EQ(want.shape, (Shape{1, 3, h, w}));
    int worst = 0;
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < h * w; ++i) {
        const int ref = static_cast<int>(std::nearbyint(want.get(c * h * w + i) * 255.0f));
        worst = std::max(worst, std::abs(ref - img.image.pixels[static_cast<std::size_t>(i * 3 + c)]));
      }
    EXPECT_LE(worst, 2);
    EXPECT_EQ(cap.reports[0].outcome, "clean");
  }
}

TEST(Pipeline, EulerMatchesDiffusers) { check_against_diffusers("euler"); }
TEST(Pipeline, EulerAncestralMatchesDiffusers) { check_against_diffusers("euler_a"); }
// Two model calls per step through the whole pipeline (CFG, scaling, reports);
// on the reference device only (the samplers' arithmetic is the same LATENT_STEP
// ops on every backend, which the Euler tests above cover).
TEST(Pipeline, HeunMatchesDiffusers) { check_against_diffusers("heun", 9, {"reference"}); }

// noise.torch_cpu_kernel picks which of torch's transforms the initial noise
// reproduces; auto is the one torch takes on this CPU (test_noise checks each
// against torch bit for bit).
TEST(Pipeline, TorchCpuKernelSettingPicksTorchsTransform) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  std::vector<float> seen[3];
  const char* names[3] = {"avx2", "default", "auto"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    RunConfig cfg = base_config(device_ids().front(), "euler");
    cfg.steps = 1;
    cfg.set("noise.torch_cpu_kernel", names[i]);
    const Capture cap = run(session, cfg);
    ASSERT_FALSE(cap.noise.empty());
    seen[i] = cap.noise;
  }
  for (int i = 0; i < 3; ++i) {
    const auto kernel = i == 0   ? pipeline::TorchCpuNoise::Kernel::avx2
                        : i == 1 ? pipeline::TorchCpuNoise::Kernel::scalar
                                 : pipeline::torch_cpu_kernel_of_this_cpu();
    std::vector<float> want(seen[i].size());
    pipeline::TorchCpuNoise(42, kernel).randn(want);
    EXPECT_EQ(seen[i], want) << names[i];
  }
  EXPECT_NE(seen[0], seen[1]);
}

TEST(Pipeline, SameSeedSameImageTwiceAndAcrossBackends) {
  NANSCOPE_REQUIRE_PYTHON();
  std::vector<io::RgbImage> firsts;
  for (const auto& dev : device_ids()) {
    pipeline::Session session;
    RunConfig cfg = base_config(dev, "dpmpp_2m");
    cfg.set("noise", "nanscope");
    const Capture a = run(session, cfg);
    const Capture b = run(session, cfg);
    ASSERT_EQ(a.images.size(), 1u);
    EXPECT_EQ(a.images[0].image, b.images[0].image) << dev;
    firsts.push_back(a.images[0].image);
  }
  for (std::size_t i = 1; i < firsts.size(); ++i) EXPECT_LE(max_pixel_diff(firsts[0], firsts[i]), 2);
}

// A VAE with one conv scaled by 2^16 ahead of a GroupNorm: the same function
// in f32, but its activations pass 65504, so an f16 decode overflows (report R2).
fs::path overflowing_vae(const fs::path& dir) {
  const fs::path src = model_dir() / "vae";
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  const auto file = io::SafetensorsFile::open(src / "diffusion_pytorch_model.safetensors");
  std::vector<std::pair<std::string, HostTensor>> tensors;
  for (const auto& e : file.entries()) {
    HostTensor t = file.read(e, DType::f32);
    if (e.name.starts_with("decoder.up_blocks.1.resnets.0.conv1.")) {
      for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, t.get(i) * 65536.0f);
    }
    tensors.emplace_back(e.name, std::move(t));
  }
  io::write_safetensors(dir / "diffusion_pytorch_model.safetensors", tensors);
  return dir;
}

TEST(Pipeline, NanPolicyRetriesTheDecodeInF32WithoutResampling) {
  NANSCOPE_REQUIRE_PYTHON();
  test::TempDir tmp;
  const fs::path vae = overflowing_vae(tmp / "vae-overflow");
  for (const auto& dev : device_ids()) {
    SCOPED_TRACE(dev);
    pipeline::Session session;
    RunConfig cfg = base_config(dev, "euler");
    cfg.vae = vae.string();
    // f32: the re-parameterised VAE decodes as the original one.
    const Capture clean = run(session, cfg);
    ASSERT_EQ(clean.images.size(), 1u);
    EXPECT_EQ(clean.images[0].nonfinite_pixels, 0);

    cfg.set("vae.dtype", "f16");
    cfg.set("nan_policy", "report");
    const Capture broken = run(session, cfg);
    EXPECT_GT(broken.images[0].nonfinite_pixels, 0);
    EXPECT_NE(broken.reports[0].outcome.find("non-finite"), std::string::npos) << broken.reports[0].outcome;

    cfg.set("nan_policy", "retry-vae-f32");
    const Capture fixed = run(session, cfg);
    EXPECT_EQ(fixed.images[0].nonfinite_pixels, 0);
    ASSERT_EQ(fixed.reports[0].decodes.size(), 2u);
    EXPECT_GT(fixed.reports[0].decodes[0].nonfinite, 0);
    EXPECT_EQ(fixed.reports[0].decodes[1].nonfinite, 0);
    EXPECT_EQ(fixed.reports[0].decodes[1].dtype, DType::f32);
    // The latent was kept, not re-sampled: the same latent as the f32 run.
    EXPECT_EQ(fixed.images[0].latent, clean.images[0].latent);
    EXPECT_LE(max_pixel_diff(fixed.images[0].image, clean.images[0].image), 0);
  }
}

TEST(Pipeline, MissingPinnedDeviceIsAnErrorListingDevices) {
  pipeline::Session session;
  RunConfig cfg;
  cfg.device = "no-such-device";
  try {
    session.generate(cfg);
    FAIL() << "a missing pinned device must be an error";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanscope
