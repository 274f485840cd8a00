// The inspector inside a run, on the tiny random-weight SD 1.x folder of
// tests/oracles/pipeline_oracle.py: step statistics reach the observer, the
// layer trace names the op a model was made to overflow at (VAE and UNet), the
// NaN policy's retry is reported as recovered, and the R0 fault emulation
// makes bands (bf16) or NaN (f16) only where it should, leaving real numerics
// untouched when off.

#include <gtest/gtest.h>

#include <filesystem>

#include "config/inspect_settings.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "inspect/fault_emulation.hpp"
#include "io/safetensors.hpp"
#include "pipeline/session.hpp"
#include "studies/report_json.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;

struct Capture final : pipeline::RunObserver {
  std::vector<pipeline::StepReport> steps;
  std::vector<pipeline::GeneratedImage> images;
  std::vector<pipeline::RunReport> reports;
  void on_step(const pipeline::StepReport& s) override { steps.push_back(s); }
  bool wants_latents() const override { return true; }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
    images.push_back(img);
    reports.push_back(r);
  }
};

const fs::path& model_dir() { return test::tiny_sd_pipeline_dir(); }

RunConfig base_config() {
  RunConfig c;
  c.model = model_dir().string();
  c.prompt = "a red circle on a blue background";
  c.steps = 3;
  c.cfg_scale = 5.0;
  c.seed = 7;
  c.device = "reference";
  return c;
}

// Runs as the front ends do: the fault emulation the config asks for is made here and handed in.
Capture run(pipeline::Session& s, const RunConfig& c) {
  Capture cap;
  const auto faults = inspect::make_fault_emulator(inspect_settings(c.inspect));
  s.generate(c, &cap, faults.get());
  return cap;
}

// A copy of a component folder with the weight and bias of one module
// multiplied by `factor` (representable in f16 for the tiny models' weights).
fs::path scaled_component(const fs::path& dir, const std::string& component, const std::string& module, float factor) {
  const fs::path src = model_dir() / component;
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  const auto file = io::SafetensorsFile::open(src / "diffusion_pytorch_model.safetensors");
  std::vector<std::pair<std::string, HostTensor>> tensors;
  bool found = false;
  for (const auto& e : file.entries()) {
    HostTensor t = file.read(e, DType::f32);
    if (e.name.starts_with(module + ".")) {
      found = true;
      for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, t.get(i) * factor);
    }
    tensors.emplace_back(e.name, std::move(t));
  }
  EXPECT_TRUE(found) << module;
  io::write_safetensors(dir / "diffusion_pytorch_model.safetensors", tensors);
  return dir;
}

TEST(InspectPipeline, EveryStepCarriesStatisticsAndACleanRunIsClean) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  const Capture cap = run(session, base_config());
  ASSERT_EQ(cap.steps.size(), 3u);
  for (const auto& s : cap.steps) {
    EXPECT_EQ(s.stats.latent.channels.size(), 4u);
    EXPECT_EQ(s.stats.latent.all.count, 4 * 8 * 8);
    ASSERT_TRUE(s.stats.noise_uncond.has_value());  // CFG on
    EXPECT_EQ(s.stats.noise_cond.all.count, 4 * 8 * 8);
    EXPECT_EQ(s.stats.preview.width, 8);  // SD 1.x factors
    EXPECT_EQ(s.stats.preview.rgb.size(), 8u * 8u * 3u);
    EXPECT_EQ(s.stats.verdict, inspect::Verdict::clean) << s.stats.latent.note;
    // The inspector's latent statistics agree with the summary.
    EXPECT_DOUBLE_EQ(s.stats.latent.all.max_abs, s.latent.max_abs);
  }
  EXPECT_DOUBLE_EQ(cap.steps.back().stats.sigma_after, 0.0);
  ASSERT_EQ(cap.reports.size(), 1u);
  const auto& ri = cap.reports[0].inspection;
  EXPECT_EQ(ri.verdict, inspect::Verdict::clean) << ri.summary;
  EXPECT_EQ(ri.first_bad_step, -1);
  EXPECT_TRUE(ri.origin.empty());
  EXPECT_TRUE(ri.traces.empty());  // auto: traced only on a fault
  ASSERT_TRUE(ri.image.has_value());
  EXPECT_EQ(ri.image->nonfinite_pixels, 0);
  EXPECT_FALSE(ri.emulation);
  EXPECT_EQ(ri.summary, "clean");
}

TEST(InspectPipeline, TraceNamesTheVaeConvMadeToOverflowInF16) {
  NANSCOPE_REQUIRE_PYTHON();
  test::TempDir tmp;
  RunConfig cfg = base_config();
  cfg.vae = scaled_component(tmp / "vae", "vae", "decoder.up_blocks.1.resnets.0.conv1", 65536.0f).string();
  cfg.set("vae.dtype", "f16");
  pipeline::Session session;
  const Capture broken = run(session, cfg);
  const auto& ri = broken.reports.at(0).inspection;
  EXPECT_EQ(ri.verdict, inspect::Verdict::non_finite) << ri.summary;
  EXPECT_EQ(ri.first_bad_step, -1);  // sampling was clean
  EXPECT_EQ(ri.origin, "vae.decoder.up_blocks.1.resnets.0.conv1");
  EXPECT_EQ(ri.origin_op, "CONV2D");
  EXPECT_EQ(ri.near_limit_origin, "vae.decoder.up_blocks.1.resnets.0.conv1");
  ASSERT_EQ(ri.traces.size(), 1u);
  const auto& t = ri.traces[0];
  EXPECT_EQ(t.call, "vae decode");
  ASSERT_NE(t.origin_op(), nullptr);
  EXPECT_EQ(t.origin_op()->dtype, DType::f16);
  EXPECT_GT(t.origin_op()->output.pos_inf + t.origin_op()->output.neg_inf, 0);
  // Every op before the origin was finite.
  for (int i = 0; i < t.origin; ++i) EXPECT_EQ(t.ops[static_cast<std::size_t>(i)].output.nonfinite(), 0) << i;
  EXPECT_NE(ri.summary.find("origin vae.decoder.up_blocks.1.resnets.0.conv1 (CONV2D)"), std::string::npos)
      << ri.summary;
  ASSERT_TRUE(ri.image.has_value());
  EXPECT_GT(ri.image->nonfinite_pixels, 0);

  // retry-vae-f32: the kept latent decodes clean; the run says it recovered and still names the origin.
  cfg.set("nan_policy", "retry-vae-f32");
  const Capture fixed = run(session, cfg);
  const auto& rf = fixed.reports.at(0).inspection;
  EXPECT_EQ(rf.verdict, inspect::Verdict::clean) << rf.summary;
  ASSERT_TRUE(rf.first_decode.has_value());
  EXPECT_EQ(rf.first_decode->map.verdict, inspect::Verdict::non_finite);
  EXPECT_EQ(rf.image->nonfinite_pixels, 0);
  EXPECT_NE(rf.summary.find("recovered"), std::string::npos) << rf.summary;
  EXPECT_EQ(rf.origin, "vae.decoder.up_blocks.1.resnets.0.conv1");
  EXPECT_EQ(fixed.images.at(0).latent, broken.images.at(0).latent);  // the latent was kept

  // trace=off: no trace, no origin, same verdict.
  cfg.set("nan_policy", "report");
  cfg.set("inspect.trace", "off");
  const Capture untraced = run(session, cfg);
  EXPECT_TRUE(untraced.reports.at(0).inspection.traces.empty());
  EXPECT_TRUE(untraced.reports.at(0).inspection.origin.empty());
  EXPECT_EQ(untraced.reports.at(0).inspection.verdict, inspect::Verdict::non_finite);
}

TEST(InspectPipeline, TraceNamesTheUnetConvMadeToOverflowAndTheFirstBadStep) {
  NANSCOPE_REQUIRE_PYTHON();
  test::TempDir tmp;
  const fs::path unet = scaled_component(tmp / "model" / "unet", "unet", "mid_block.resnets.0.conv1", 65536.0f);
  for (const char* part : {"model_index.json"}) fs::copy_file(model_dir() / part, tmp / "model" / part);
  for (const char* dir : {"vae", "text_encoder", "tokenizer", "scheduler"})
    fs::copy(model_dir() / dir, tmp / "model" / dir, fs::copy_options::recursive);
  RunConfig cfg = base_config();
  cfg.model = (tmp / "model").string();
  cfg.set("unet.dtype", "f16");
  pipeline::Session session;
  const Capture cap = run(session, cfg);
  const auto& ri = cap.reports.at(0).inspection;
  EXPECT_EQ(ri.verdict, inspect::Verdict::non_finite) << ri.summary;
  EXPECT_EQ(ri.first_bad_step, 0);
  EXPECT_EQ(ri.first_bad_branch, "noise_cond");
  EXPECT_EQ(ri.origin, "unet.mid_block.resnets.0.conv1");
  ASSERT_FALSE(ri.traces.empty());
  EXPECT_EQ(ri.traces[0].call, "unet step 1");
  EXPECT_EQ(cap.steps.at(0).stats.noise_cond.verdict, inspect::Verdict::non_finite);
  EXPECT_TRUE(cap.steps.at(0).stats.noise_cond.mask.any());
  // In f32 the same weights are finite: no trace, no origin.
  cfg.set("unet.dtype", "f32");
  const Capture f32 = run(session, cfg);
  EXPECT_TRUE(f32.reports.at(0).inspection.origin.empty());
  EXPECT_NE(f32.reports.at(0).inspection.verdict, inspect::Verdict::non_finite);
}

TEST(InspectPipeline, R0EmulationHitsOnlyFusedHalfAttentionAtPowerOfTwoSizesAndIsNamedInTheTrace) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  RunConfig cfg = base_config();
  cfg.width = cfg.height = 32;  // latent 16x16: the VAE's mid-block attention sees 256 tokens
  cfg.steps = 2;
  const Capture plain = run(session, cfg);

  RunConfig bf16 = cfg;
  bf16.set("vae.dtype", "bf16");
  const Capture bf16_plain = run(session, bf16);
  EXPECT_EQ(bf16_plain.reports.at(0).inspection.verdict, inspect::Verdict::clean)
      << bf16_plain.reports.at(0).inspection.summary;
  bf16.set("inspect.emulate", "r0");
  bf16.set("inspect.trace", "always");
  const Capture banded = run(session, bf16);
  const auto& rb = banded.reports.at(0).inspection;
  EXPECT_TRUE(rb.emulation);
  EXPECT_NE(rb.emulation_note.find("EMULATED"), std::string::npos);
  EXPECT_EQ(rb.summary.rfind("[EMULATION] ", 0), 0u) << rb.summary;
  // The corrupted attention changed the image, and the trace names it. (That
  // the embedded model's image then shows bands is tests/test_scenarios.cpp's R0.)
  EXPECT_NE(banded.images.at(0).image, bf16_plain.images.at(0).image);
  EXPECT_EQ(rb.origin.rfind("vae.decoder.mid_block.attentions.0", 0), 0u) << rb.origin;
  EXPECT_EQ(rb.origin_op, "ATTENTION");
  ASSERT_TRUE(rb.image.has_value());

  // f16: NaN, and the trace's origin is the emulated attention op.
  RunConfig f16 = bf16;
  f16.set("vae.dtype", "f16");
  const Capture nan = run(session, f16);
  const auto& rn = nan.reports.at(0).inspection;
  EXPECT_EQ(rn.verdict, inspect::Verdict::non_finite) << rn.summary;
  EXPECT_EQ(rn.origin_op, "ATTENTION");
  EXPECT_EQ(rn.origin.rfind("vae.decoder.mid_block.attentions.0", 0), 0u) << rn.origin;
  ASSERT_FALSE(rn.traces.empty());
  EXPECT_TRUE(rn.traces.back().origin_op()->emulated_fault);

  // Sliced attention (a fix users applied), and a size whose token count is not a power of two, are untouched.
  RunConfig sliced = bf16;
  sliced.set("vae.attention.impl", "sliced");
  sliced.set("vae.attention.slice_size", "1");
  const Capture s = run(session, sliced);
  EXPECT_EQ(s.reports.at(0).inspection.verdict, inspect::Verdict::clean) << s.reports.at(0).inspection.summary;
  RunConfig nearby = bf16;
  nearby.width = nearby.height = 40;  // 20x20 = 400 tokens
  const Capture n = run(session, nearby);
  EXPECT_EQ(n.reports.at(0).inspection.verdict, inspect::Verdict::clean) << n.reports.at(0).inspection.summary;

  // The pipeline never makes an emulator itself: asking for one without handing it in is an error.
  try {
    session.generate(f16);
    FAIL() << "inspect.emulate=r0 without an emulator must be an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("inspect.emulate=r0"), std::string::npos) << e.what();
  }

  // Off: bit-identical to a run that never heard of emulation.
  RunConfig off = cfg;
  off.set("inspect.emulate", "none");
  const Capture o = run(session, off);
  EXPECT_EQ(o.images.at(0).image, plain.images.at(0).image);
  EXPECT_FALSE(o.reports.at(0).inspection.emulation);
}

TEST(InspectPipeline, FullDecodePreviewEveryNStepsLeavesTheRunUnchanged) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  RunConfig cfg = base_config();
  cfg.steps = 4;
  const Capture plain = run(session, cfg);
  cfg.set("inspect.decode_every", "2");
  const Capture with = run(session, cfg);
  ASSERT_EQ(with.steps.size(), 4u);
  ASSERT_EQ(with.images.size(), 1u);
  const io::RgbImage& final_image = with.images[0].image;
  for (std::size_t i = 0; i < with.steps.size(); ++i) {
    const auto& s = with.steps[i];
    EXPECT_GT(s.inspect_seconds, 0.0);
    EXPECT_LE(s.inspect_seconds + s.decode_seconds, s.seconds);
    // Step 2 only: step 4 is the last (its decode is the image itself).
    const bool expected = i == 1;
    EXPECT_EQ(!s.stats.decoded.rgb.empty(), expected) << "step " << i + 1;
    EXPECT_EQ(s.decode_seconds > 0, expected) << "step " << i + 1;
    if (expected) {
      EXPECT_EQ(s.stats.decoded.width, final_image.width);
      EXPECT_EQ(s.stats.decoded.height, final_image.height);
      EXPECT_EQ(s.stats.decoded.rgb.size(), final_image.pixels.size());
      EXPECT_NE(s.stats.decoded.rgb, final_image.pixels);  // x0 predicted halfway is not the final image
    }
  }
  // Previews are read-only: the same latents and the same image as without them.
  ASSERT_EQ(plain.steps.size(), with.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i)
    EXPECT_EQ(plain.steps[i].latent_values, with.steps[i].latent_values);
  EXPECT_EQ(plain.images.at(0).image, final_image);
}

TEST(InspectPipeline, BadInspectorSettingsAreConfigErrorsNamingTheKey) {
  // --set refuses them at once, naming the key (the settings table's rows).
  RunConfig cfg;
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{{"inspect.emulate", "r9"},
                                                                                   {"inspect.tracing", "on"},
                                                                                   {"inspect.decode_every", "-1"},
                                                                                   {"inspect.stats_every", "-2"}}) {
    try {
      cfg.set(key, value);
      FAIL() << key << "=" << value << " must be an error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  // Settings that reach a run another way (JSON assigned by a front end) are
  // checked before any model is loaded.
  pipeline::Session session;
  for (const char* bad :
       {R"({"emulate": "r9"})", R"({"tracing": "on"})", R"({"decode_every": -1})", R"({"stats_every": -2})"}) {
    cfg.inspect = nlohmann::json::parse(bad);
    const std::string key = "inspect." + cfg.inspect.begin().key();
    try {
      session.generate(cfg);
      FAIL() << bad << " must be an error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

// The step statistics come from the device (the default device: OpenCL where there is one) as a
// few KB per step; the full latent comes back only to an observer that asks for it.
TEST(InspectPipeline, StepStatisticsAreReadBackAsAFewKilobytesAndLatentsOnlyOnRequest) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  RunConfig cfg = base_config();
  cfg.device = "";
  cfg.steps = 4;
  struct StatsOnly final : pipeline::RunObserver {
    std::vector<pipeline::StepReport> steps;
    void on_step(const pipeline::StepReport& s) override { steps.push_back(s); }
  } stats_only;
  session.generate(cfg, &stats_only);
  const Capture with_latents = run(session, cfg);
  ASSERT_EQ(stats_only.steps.size(), 4u);
  ASSERT_EQ(with_latents.steps.size(), 4u);
  const auto latent_n = static_cast<std::size_t>(shape_numel(stats_only.steps.at(0).latent_shape));
  ASSERT_GT(latent_n, 0u);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& s = stats_only.steps[i];
    EXPECT_TRUE(s.latent_values.empty()) << "step " << i + 1;
    // Latent, two guidance branches and the preview: less than the maps themselves (f32 here).
    EXPECT_GT(s.inspect_bytes, 0u);
    EXPECT_LT(s.inspect_bytes, 3 * latent_n * sizeof(float)) << "step " << i + 1;
    EXPECT_EQ(s.stats.latent.channels.size(), 4u);
    ASSERT_EQ(with_latents.steps[i].latent_values.size(), latent_n);
    // The statistics describe the latent that an observer asking for it receives.
    const inspect::Stats direct = inspect::compute_stats(with_latents.steps[i].latent_values, 0);
    EXPECT_NEAR(s.stats.latent.all.mean, direct.mean, 1e-5 * std::max(1.0, std::fabs(direct.mean)));
    EXPECT_NEAR(s.stats.latent.all.std, direct.std, 1e-5 * std::max(1.0, direct.std));
    EXPECT_EQ(s.stats.latent.all.max_abs, direct.max_abs);
  }
  EXPECT_EQ(with_latents.images.at(0).latent, with_latents.steps.back().latent_values);
}

TEST(InspectPipeline, StatisticsEveryNStepsAndTheLastLeaveTheRunUnchanged) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  RunConfig cfg = base_config();
  cfg.device = "";
  cfg.steps = 5;
  const Capture every = run(session, cfg);
  cfg.set("inspect.stats_every", "2");
  const Capture second = run(session, cfg);
  cfg.set("inspect.stats_every", "0");
  const Capture none = run(session, cfg);
  ASSERT_EQ(second.steps.size(), 5u);
  ASSERT_EQ(none.steps.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    const bool taken = (i + 1) % 2 == 0 || i == 4;
    EXPECT_EQ(!second.steps[i].stats.latent.channels.empty(), taken) << "step " << i + 1;
    EXPECT_EQ(second.steps[i].inspect_bytes > 0, taken) << "step " << i + 1;
    EXPECT_TRUE(none.steps[i].stats.latent.channels.empty()) << "step " << i + 1;
    EXPECT_EQ(second.steps[i].latent_values, every.steps[i].latent_values) << "step " << i + 1;
  }
  EXPECT_EQ(second.steps[1].stats.latent.all.std, every.steps[1].stats.latent.all.std);
  // The JSON step table says which steps have statistics and carries none for the others.
  cfg.set("inspect.stats_every", "2");
  const nlohmann::json report = studies::report_json(cfg, second.steps, second.reports.at(0));
  ASSERT_EQ(report["steps"].size(), 5u);
  EXPECT_FALSE(report["steps"][0]["statistics"].get<bool>());
  EXPECT_FALSE(report["steps"][0].contains("latent"));
  EXPECT_TRUE(report["steps"][1]["statistics"].get<bool>());
  EXPECT_TRUE(report["steps"][1].contains("latent"));
  // The report says which kernels ran (and any fallback taken).
  ASSERT_GE(report["kernels"].size(), 2u) << report["kernels"].dump();
  EXPECT_EQ(report["kernels"][0].get<std::string>().rfind("kernel family: ", 0), 0u) << report["kernels"].dump();
  EXPECT_EQ(none.images.at(0).image, every.images.at(0).image);
  // The decoded image is checked either way.
  EXPECT_EQ(none.reports.at(0).inspection.image->map.verdict, every.reports.at(0).inspection.image->map.verdict);
}

}  // namespace
}  // namespace nanscope
