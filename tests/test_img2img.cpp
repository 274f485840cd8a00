// img2img and the hires fix on the tiny random-weight SD 1.x folder of
// tests/oracles/pipeline_oracle.py, against diffusers (one oracle process for
// every case: `pipeline_oracle.py cases`):
// - img2img vs StableDiffusionImg2ImgPipeline: same init image, seed, strength
//   and sampler (the VAE posterior sample and the add_noise noise are the
//   torch generator's first two draws, which torch-cpu noise reproduces);
// - the hires fix vs diffusers composed as A1111 runs it: txt2img at the base
//   size, torch.nn.functional.interpolate of the latent (or decode -> PIL
//   Lanczos -> the img2img pipeline's encode), then the img2img pipeline with
//   the generator seeded again and strength = hires.denoise;
// - our Lanczos against PIL's, bit for bit;
// - a NaN injected in pass 2 by the R0 fault emulation is reported as pass 2.
//
// Tolerance on the final latents: normalised MSE 1e-8 and max-abs 1e-3 of the
// largest value, the bound test_pipeline.cpp holds txt2img to. Observed for
// every case here (reference backend): nmse 3e-12 to 5e-12, max-abs at most
// 4.2e-5 (3e-6 of the largest value). The
// engine and torch run the same f32 arithmetic in a different order inside
// convolutions, attention and the VAE encoder (and std::exp vs torch's exp in
// the posterior's std), so they differ by a few ulps per op, far below the
// bound; any mistake in the structure moves the latent by O(1): while this
// test was written, DDIM with clip_sample on (which diffusers' SD pipelines
// turn off) gave nmse 0.65, and Lanczos with the wrong pass order 29 levels.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/a1111.hpp"
#include "config/inspect_settings.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "inspect/fault_emulation.hpp"
#include "io/png.hpp"
#include "io/safetensors.hpp"
#include "pipeline/img2img.hpp"
#include "pipeline/session.hpp"
#include "studies/report_json.hpp"
#include "support/compare.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Capture final : pipeline::RunObserver {
  std::vector<pipeline::StepReport> steps;
  std::vector<pipeline::GeneratedImage> images;
  std::vector<pipeline::RunReport> reports;
  void on_step(const pipeline::StepReport& s) override { steps.push_back(s); }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
    images.push_back(img);
    reports.push_back(r);
  }
};

Capture run(pipeline::Session& s, const RunConfig& c) {
  Capture cap;
  const auto faults = inspect::make_fault_emulator(inspect_settings(c.inspect));
  s.generate(c, &cap, faults.get());
  return cap;
}

const fs::path& model_dir() { return test::tiny_sd_pipeline_dir(); }

RunConfig base_config(const std::string& sampler) {
  RunConfig c;
  c.model = model_dir().string();
  c.prompt = "a red circle on a blue background";
  c.negative_prompt = "green";
  c.steps = 4;
  c.cfg_scale = 7.0;
  c.seed = 42;
  c.set("sampler", sampler);
  c.set("noise", "torch-cpu");
  c.device = "reference";
  return c;
}

// A smooth test picture with some structure: gradients and a disc.
io::RgbImage test_picture(int w, int h) {
  io::RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<std::size_t>(w * h * 3));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool disc = (x - w / 2) * (x - w / 2) + (y - h / 3) * (y - h / 3) < w * h / 10;
      const std::size_t i = static_cast<std::size_t>((y * w + x) * 3);
      img.pixels[i] = static_cast<std::uint8_t>(disc ? 230 : 255 * x / w);
      img.pixels[i + 1] = static_cast<std::uint8_t>(40 + 200 * y / h);
      img.pixels[i + 2] = static_cast<std::uint8_t>(disc ? 20 : 180);
    }
  }
  return img;
}

std::vector<std::string> device_ids() {
  std::vector<std::string> ids;
  for (const auto& d : enumerate_devices().devices) {
    if (d.kind != DeviceKind::simulator) ids.push_back(d.id);
  }
  return ids;
}

json oracle_case(const RunConfig& c, const std::string& name, const std::string& kind) {
  return {
      {"name", name},       {"kind", kind},   {"prompt", c.prompt}, {"negative", c.negative_prompt},
      {"cfg", c.cfg_scale}, {"seed", c.seed}, {"steps", c.steps},   {"sampler", std::string(sampler_name(c.sampler))}};
}

// Every case in one oracle process; the engine's runs are made first.
TEST(Img2Img, MatchesDiffusersImg2ImgAndTheHiresFixComposition) {
  NANSCOPE_REQUIRE_PYTHON();
  test::TempDir tmp;
  const fs::path init = tmp / "init.png";
  io::write_png(init, test_picture(16, 16));  // the tiny model's own size: diffusers' pipeline takes the image's
  const fs::path odd = tmp / "odd.png";
  io::write_png(odd, test_picture(23, 13));

  json cases = json::array();
  std::vector<std::pair<std::string, pipeline::GeneratedImage>> engine;
  pipeline::Session session;

  // img2img, the samplers with their own add_noise forms (sigma: euler, euler_a, lms, heun; alpha/sigma:
  // dpmpp_2m, unipc; alphas_cumprod: ddim, ddpm), a multistep history (lms, unipc) and two model calls per
  // step (heun): strength 0.5 of 4 steps runs steps 3 and 4.
  for (const std::string sampler : {"euler", "euler_a", "ddim", "dpmpp_2m", "heun", "lms", "unipc", "ddpm"}) {
    RunConfig c = base_config(sampler);
    c.init_image = init.string();
    c.strength = sampler == "ddim" ? 0.75 : 0.5;
    const Capture cap = run(session, c);
    ASSERT_EQ(cap.images.size(), 1u) << sampler;
    const auto& pr = cap.reports[0].passes;
    ASSERT_EQ(pr.size(), 1u);
    EXPECT_EQ(pr[0].kind, "img2img");
    EXPECT_EQ(pr[0].start_step, sampler == "ddim" ? 1 : 2);
    // Model calls: heun makes two per step but one in the last (diffusers' timesteps[t_start * order:]).
    const int calls = sampler == "heun" ? 2 * (4 - pr[0].start_step) - 1 : 4 - pr[0].start_step;
    EXPECT_EQ(static_cast<int>(cap.steps.size()), calls) << sampler;
    EXPECT_EQ(cap.reports[0].outcome, "clean");
    json j = oracle_case(c, "img2img_" + sampler, "img2img");
    j["init"] = init.string();
    j["strength"] = c.strength;
    cases.push_back(j);
    engine.emplace_back("img2img_" + sampler, cap.images[0]);
  }
  // Hires fix: 16x16 -> 32x32, 2 hires steps at denoise 0.5 (A1111: a 4-step schedule, its last 2 run; diffusers'
  // img2img with 4 steps and strength 0.5 runs the same 2).
  for (const std::string mode : {"latent", "latent-nearest", "lanczos"}) {
    RunConfig c = base_config("euler");
    c.set("hires.scale", "2");
    c.set("hires.steps", "2");
    c.set("hires.denoise", "0.5");
    c.set("hires.upscaler", mode);
    const Capture cap = run(session, c);
    ASSERT_EQ(cap.images.size(), 1u) << mode;
    const auto& pr = cap.reports[0].passes;
    ASSERT_EQ(pr.size(), 2u);
    EXPECT_EQ(pr[1].kind, "hires");
    EXPECT_EQ(pr[1].width, 32);
    EXPECT_EQ(pr[1].schedule_steps, 4);
    EXPECT_EQ(pr[1].start_step, 2);
    ASSERT_EQ(cap.steps.size(), 6u);
    EXPECT_EQ(cap.steps[3].pass, 1);
    EXPECT_EQ(cap.steps[4].pass, 2);
    EXPECT_EQ(cap.steps[4].index, 0);
    EXPECT_EQ(cap.steps[4].latent_shape, (Shape{1, 4, 16, 16}));
    EXPECT_EQ(cap.images[0].image.width, 32);
    json j = oracle_case(c, "hires_" + mode, "hires");
    j["scale"] = 2;
    j["hires_steps"] = 2;
    j["denoise"] = 0.5;
    j["mode"] = mode == "latent" ? "bilinear" : mode == "latent-nearest" ? "nearest" : "lanczos";
    cases.push_back(j);
    engine.emplace_back("hires_" + mode, cap.images[0]);
  }
  // Hires resize to another aspect with the second pass's own sampler, prompts and CFG (A1111's Hires resize,
  // Hires sampler, Hires prompt, Hires negative prompt, Hires CFG Scale): 24x16 -> 32x32 enlarges to 48x32 and
  // keeps the middle 32 columns (A1111: truncate_x = (48 - 32) // opt_f latent columns); the oracle computes the
  // target and the crop with its own transcription of A1111's code.
  {
    RunConfig c = base_config("euler");
    c.width = 24;
    c.height = 16;
    c.set("hires.width", "32");
    c.set("hires.height", "32");
    c.set("hires.steps", "2");
    c.set("hires.denoise", "0.5");
    c.set("hires.sampler", "dpmpp_2m");
    c.set("hires.prompt", "a blue square on a red background");
    c.set("hires.negative_prompt", "yellow");
    c.set("hires.cfg_scale", "4");
    const Capture cap = run(session, c);
    ASSERT_EQ(cap.images.size(), 1u);
    const auto& pr = cap.reports[0].passes;
    ASSERT_EQ(pr.size(), 2u);
    EXPECT_EQ(pr[0].width, 24);
    EXPECT_EQ(pr[0].sampler, "euler");
    EXPECT_EQ(pr[0].prompt, c.prompt);
    EXPECT_EQ(pr[0].cfg_scale, 7.0);
    EXPECT_EQ(pr[1].width, 32);
    EXPECT_EQ(pr[1].height, 32);
    EXPECT_EQ(pr[1].sampler, "dpmpp_2m");
    EXPECT_EQ(pr[1].prompt, "a blue square on a red background");
    EXPECT_EQ(pr[1].negative_prompt, "yellow");
    EXPECT_EQ(pr[1].cfg_scale, 4.0);
    EXPECT_NE(pr[1].note.find("enlarged to 48x32"), std::string::npos) << pr[1].note;
    EXPECT_NE(pr[1].note.find("sampler dpmpp_2m"), std::string::npos) << pr[1].note;
    EXPECT_EQ(cap.images[0].image.width, 32);
    EXPECT_EQ(cap.images[0].image.height, 32);
    const json rj = studies::report_json(c, cap.steps, cap.reports[0]);
    EXPECT_EQ(rj["passes"][1]["sampler"], "dpmpp_2m");
    EXPECT_EQ(rj["passes"][1]["prompt"], "a blue square on a red background");
    json j = oracle_case(c, "hires_aspect", "hires");
    j["width"] = 24;
    j["height"] = 16;
    j["scale"] = 0;
    j["resize_x"] = 32;
    j["resize_y"] = 32;
    j["hires_steps"] = 2;
    j["denoise"] = 0.5;
    j["mode"] = "bilinear";
    j["hires_sampler"] = "dpmpp_2m";
    j["hires_prompt"] = c.hires_prompt;
    j["hires_negative"] = c.hires_negative_prompt;
    j["hires_cfg"] = 4.0;
    cases.push_back(j);
    engine.emplace_back("hires_aspect", cap.images[0]);
  }
  // Lanczos resizes (enlarging and shrinking on each axis) vs PIL.
  const io::RgbImage odd_img = io::read_png(odd).image;
  const std::vector<std::pair<int, int>> sizes = {{16, 16}, {40, 9}, {7, 29}};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    cases.push_back({{"name", "lanczos" + std::to_string(i)},
                     {"kind", "lanczos"},
                     {"image", odd.string()},
                     {"width", sizes[i].first},
                     {"height", sizes[i].second}});
  }

  std::ofstream(tmp / "cases.json") << cases.dump();
  test::run_oracle("pipeline_oracle.py",
                   {"cases", model_dir().string(), (tmp / "cases.json").string(), (tmp / "out.safetensors").string()});
  const auto out = io::SafetensorsFile::open(tmp / "out.safetensors");
  for (const auto& [name, img] : engine) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(test::tensors_close(HostTensor::from_f32(img.latent_shape, img.latent),
                                    out.read(name + ".latent", DType::f32), {1e-8, 1e-3}));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("lanczos to " + std::to_string(sizes[i].first) + "x" + std::to_string(sizes[i].second));
    const io::RgbImage ours = pipeline::resize_lanczos(odd_img, sizes[i].first, sizes[i].second);
    const std::vector<float> want = out.read("lanczos" + std::to_string(i) + ".rgb", DType::f32).to_f32();
    ASSERT_EQ(want.size(), ours.pixels.size());
    int worst = 0;
    for (std::size_t k = 0; k < want.size(); ++k)
      worst = std::max(worst, std::abs(static_cast<int>(want[k]) - static_cast<int>(ours.pixels[k])));
    EXPECT_EQ(worst, 0);  // Pillow's fixed-point arithmetic, reproduced exactly
  }
}

// The same img2img run on every backend: the reference and OpenCL agree.
TEST(Img2Img, BackendsAgreeAndAnInitImageOfAnotherSizeIsResized) {
  NANSCOPE_REQUIRE_PYTHON();
  test::TempDir tmp;
  const fs::path odd = tmp / "odd.png";
  io::write_png(odd, test_picture(23, 13));
  std::vector<std::vector<float>> latents;
  for (const auto& dev : device_ids()) {
    pipeline::Session session;
    RunConfig c = base_config("euler");
    c.steps = 2;
    c.device = dev;
    c.init_image = odd.string();
    c.width = c.height = 16;
    const Capture cap = run(session, c);
    ASSERT_EQ(cap.images.size(), 1u) << dev;
    EXPECT_NE(cap.reports[0].passes.at(0).note.find("resized to the run's 16x16"), std::string::npos)
        << cap.reports[0].passes.at(0).note;
    latents.push_back(cap.images[0].latent);
  }
  // f32 on both; the OpenCL convolutions sum in another order: a few ulps.
  for (std::size_t i = 1; i < latents.size(); ++i) {
    EXPECT_TRUE(test::tensors_close(HostTensor::from_f32({static_cast<std::int64_t>(latents[0].size())}, latents[0]),
                                    HostTensor::from_f32({static_cast<std::int64_t>(latents[i].size())}, latents[i]),
                                    {1e-8, 1e-3}));
  }
}

// R0's emulated fault hits fused f16 attention at 256 tokens: the tiny UNet's
// first level has 64 at 16x16 (pass 1, clean) and 256 at 32x32 (pass 2).
TEST(Img2Img, ANanInTheHiresPassIsReportedAsPassTwo) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  RunConfig c = base_config("euler");
  c.steps = 2;
  c.set("hires.scale", "2");
  c.set("hires.denoise", "0.5");  // a 4-step schedule, its last 2 run
  c.set("unet.dtype", "f16");
  c.set("inspect.emulate", "r0");
  const Capture cap = run(session, c);
  ASSERT_EQ(cap.reports.size(), 1u);
  const auto& r = cap.reports[0];
  ASSERT_EQ(cap.steps.size(), 4u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(cap.steps[static_cast<std::size_t>(i)].pass, 1);
    EXPECT_EQ(cap.steps[static_cast<std::size_t>(i)].latent.nonfinite(), 0) << "pass 1 is clean";
  }
  EXPECT_EQ(cap.steps[2].pass, 2);
  EXPECT_EQ(cap.steps[2].passes, 2);
  EXPECT_GT(cap.steps[2].noise_cond.nonfinite(), 0);
  const auto& ri = r.inspection;
  EXPECT_EQ(ri.verdict, inspect::Verdict::non_finite) << ri.summary;
  EXPECT_EQ(ri.first_bad_pass, 2);
  EXPECT_EQ(ri.first_bad_step, 0);
  EXPECT_EQ(r.first_nonfinite_pass, 2);
  EXPECT_NE(ri.summary.find("pass 2 step 1"), std::string::npos) << ri.summary;
  EXPECT_EQ(ri.origin_op, "ATTENTION") << ri.summary;
  ASSERT_FALSE(ri.traces.empty());
  EXPECT_EQ(ri.traces.front().call, "unet pass 2 step 1");
  const json j = studies::report_json(c, cap.steps, r);
  EXPECT_EQ(j["first_bad_pass"], 2);
  EXPECT_EQ(j["passes"].size(), 2u);
  EXPECT_EQ(j["steps"][2]["pass"], 2);
}

// The memory plan checks the hires pass's size before any work (the embedded
// model; 1024x1024 cannot fit 96 MiB, as test_sizes.cpp's plan shows).
TEST(Img2Img, AHiresSizeTheDeviceCannotHoldIsRefusedBeforeAnyStep) {
  BackendOptions options;
  options.memory_limit_bytes = std::uint64_t{96} << 20;
  pipeline::Session session(options);
  RunConfig c;
  c.steps = 1;
  c.width = c.height = 128;
  c.set("hires.scale", "8");
  Capture cap;
  try {
    session.generate(c, &cap);
    FAIL() << "a 1024x1024 hires pass cannot fit 96 MiB";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("hires fix, pass 2 at 1024x1024"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Lower hires.scale"), std::string::npos) << msg;
  }
  EXPECT_TRUE(cap.steps.empty());
  c.set("hires.scale", "1.5");  // 192x192 fits
  const auto images = session.generate(c);
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0].image.width, 192);
}

TEST(Img2Img, SchedulesFollowDiffusersAndA1111) {
  // diffusers' get_timesteps
  EXPECT_EQ(pipeline::img2img_schedule(20, 0.75).start, 5);
  EXPECT_EQ(pipeline::img2img_schedule(20, 1.0).start, 0);
  EXPECT_EQ(pipeline::img2img_schedule(3, 0.5).start, 2);  // int(1.5) = 1 step
  EXPECT_THROW(pipeline::img2img_schedule(4, 0.2), ConfigError);
  // A1111's setup_img2img_steps: int(steps / min(denoise, 0.999)), the last `steps` run
  EXPECT_EQ(pipeline::hires_schedule(10, 0.7).schedule_steps, 14);
  EXPECT_EQ(pipeline::hires_schedule(10, 0.7).start, 4);
  EXPECT_EQ(pipeline::hires_schedule(10, 1.0).schedule_steps, 10);
}

TEST(Img2Img, LatentInterpolationIsTorchs) {
  // 1 channel 2x2 -> 4x4 (hand-computed from torch's rules: bilinear with
  // align_corners False clamps the source index at 0; nearest takes o >> 1 at 2x).
  const std::vector<float> x = {0, 1, 2, 3};
  const auto bi = pipeline::interpolate_latent(x, {1, 1, 2, 2}, 4, 4, HiresUpscaler::latent);
  const std::vector<float> want_bi = {0, 0.25, 0.75, 1, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2, 2.25, 2.75, 3};
  EXPECT_EQ(bi, want_bi);
  const auto nn = pipeline::interpolate_latent(x, {1, 1, 2, 2}, 4, 4, HiresUpscaler::latent_nearest);
  const std::vector<float> want_nn = {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3};
  EXPECT_EQ(nn, want_nn);
  EXPECT_THROW(pipeline::interpolate_latent(x, {1, 1, 2, 2}, 4, 4, HiresUpscaler::lanczos), ConfigError);
}

TEST(Img2Img, SettingsAndA1111Text) {
  RunConfig c;
  c.set("hires.scale", "2");
  c.set("hires.steps", "10");
  c.set("hires.denoise", "0.55");
  c.set("hires.upscaler", "latent-nearest");
  c.width = c.height = 512;
  const std::string text = a1111_parameters(c);
  EXPECT_NE(text.find("Denoising strength: 0.55"), std::string::npos) << text;
  EXPECT_NE(text.find("Hires upscale: 2"), std::string::npos) << text;
  EXPECT_NE(text.find("Hires steps: 10"), std::string::npos) << text;
  EXPECT_NE(text.find("Hires upscaler: Latent (nearest)"), std::string::npos) << text;
  const RunConfig back = run_config_from_a1111(text);
  EXPECT_EQ(back.hires_scale, 2);
  EXPECT_EQ(back.hires_steps, 10);
  EXPECT_EQ(back.hires_denoise, 0.55);
  EXPECT_EQ(back.hires_upscaler, HiresUpscaler::latent_nearest);
  EXPECT_EQ(back.strength, 0.75);  // untouched: the text's strength was the hires pass's

  // An A1111 img2img image: "Denoising strength" without hires fields is img2img's strength.
  const RunConfig i2i = run_config_from_a1111("a cat\nSteps: 20, Sampler: Euler, Denoising strength: 0.4, Size: 64x64");
  EXPECT_EQ(i2i.strength, 0.4);
  EXPECT_FALSE(i2i.hires());
  RunConfig plain;
  EXPECT_EQ(a1111_parameters(plain).find("Denoising"), std::string::npos);
  plain.init_image = "/tmp/x.png";
  EXPECT_NE(a1111_parameters(plain).find("Denoising strength: 0.75"), std::string::npos);

  // Bad values name the key.
  RunConfig bad;
  EXPECT_THROW(bad.set("strength", "1.5"), ConfigError);
  EXPECT_THROW(bad.set("hires.upscaler", "esrgan"), ConfigError);
}

// Bad input is an error naming the file or key, before any sampling.
TEST(Img2Img, BadInputIsAnErrorNamingTheFileOrKey) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  auto error_of = [&](const RunConfig& c) -> std::string {
    try {
      run(session, c);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  RunConfig missing = base_config("euler");
  missing.init_image = "/no/such/init.png";
  EXPECT_NE(error_of(missing).find("/no/such/init.png"), std::string::npos) << error_of(missing);
  RunConfig shrink = base_config("euler");
  shrink.set("hires.scale", "0.5");
  EXPECT_NE(error_of(shrink).find("hires.scale"), std::string::npos) << error_of(shrink);
  test::TempDir tmp;
  io::write_png(tmp / "i.png", test_picture(16, 16));
  RunConfig both = base_config("euler");
  both.init_image = (tmp / "i.png").string();
  both.set("hires.scale", "2");
  EXPECT_NE(error_of(both).find("init_image"), std::string::npos) << error_of(both);
  RunConfig weak = base_config("euler");
  weak.init_image = (tmp / "i.png").string();
  weak.strength = 0.1;  // int(4 * 0.1) = 0 steps
  EXPECT_NE(error_of(weak).find("\"strength\""), std::string::npos) << error_of(weak);
}

}  // namespace
}  // namespace nanscope
