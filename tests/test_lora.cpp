// LoRA files (models/lora.hpp, config/lora_list.hpp) against diffusers on the
// tiny random-weight SD 1.x pipeline (tests/oracles/pipeline_oracle.py): the
// oracle (tests/oracles/lora_oracle.py) writes one LoRA in each format —
// kohya (diffusers names), kohya with LDM UNet names, diffusers/PEFT written
// by diffusers' save_lora_weights — and loads each with diffusers' own
// load_lora_weights (PEFT layers), fused with fuse_lora for the merged mode and
// left unfused (set_adapters) for the unmerged one, then runs
// StableDiffusionPipeline from NaNscope's initial latent. Linear LoRA on both
// attentions and the feed-forward, a 1x1 conv (proj_in), a 3x3 conv (LoCon)
// and the text encoder.
//
// Tolerances: f32, merged or unmerged, vs diffusers in float32, 3 steps: the
// final latent's worst nmse observed 1.1e-11 merged (vs fuse_lora), 9.0e-12
// unmerged (vs PEFT's unfused layers); max abs error 3.5e-6 of max|want|,
// NANSCOPE_TOL_REPORT=1); bound 1e-8 and 1e-4,
// as tests/test_pipeline.cpp.
// Pixels (uint8) may differ by rounding at the 0.5 boundary: at most 2 levels.
// A LoRA that were ignored moves the latent by nmse ~0.5 here: the test would fail.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "config/a1111.hpp"
#include "config/lora_list.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "io/file_hash.hpp"
#include "io/safetensors.hpp"
#include "models/lora.hpp"
#include "models/weights.hpp"
#include "pipeline/session.hpp"
#include "support/compare.hpp"
#include "support/errors.hpp"
#include "support/ldm_writer.hpp"
#include "support/oracle.hpp"
#include "support/random.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using test::expect_contains;

struct Capture final : pipeline::RunObserver {
  std::vector<float> noise;
  Shape noise_shape;
  std::vector<pipeline::GeneratedImage> images;
  std::vector<pipeline::RunReport> reports;
  void on_initial_noise(int, const Shape& s, std::span<const float> v) override {
    noise.assign(v.begin(), v.end());
    noise_shape = s;
  }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
    images.push_back(img);
    reports.push_back(r);
  }
};

const fs::path& model_dir() { return test::tiny_sd_pipeline_dir(); }

std::string first_device() {
  for (const auto& d : enumerate_devices().devices)
    if (d.kind != DeviceKind::simulator) return d.id;
  return "reference";
}

// The oracle's three LoRA files, made once per process, and their A1111 hashes.
struct LoraFiles {
  fs::path dir;
  nlohmann::json hashes;
};
const LoraFiles& lora_files() {
  static test::TempDir dir;
  static LoraFiles files;
  if (files.dir.empty()) {
    const auto r = test::run_oracle("lora_oracle.py", {"make", model_dir().string(), dir.path().string()});
    files.hashes = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
    files.dir = dir.path();
  }
  return files;
}

RunConfig base_config() {
  RunConfig c;
  c.model = model_dir().string();
  c.prompt = "a red circle on a blue background";
  c.negative_prompt = "green";
  c.steps = 3;
  c.cfg_scale = 7.0;
  c.seed = 42;
  c.set("noise", "torch-cpu");
  c.device = first_device();
  return c;
}

Capture run(pipeline::Session& s, const RunConfig& c) {
  Capture cap;
  s.generate(c, &cap);
  EXPECT_EQ(cap.images.size(), 1u);
  return cap;
}

HostTensor latent_of(const Capture& c) {
  return HostTensor::from_f32(c.images.at(0).latent_shape, c.images.at(0).latent);
}

int worst_pixel(const io::RgbImage& img, const HostTensor& want) {
  const int h = img.height, w = img.width;
  int worst = 0;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < h * w; ++i) {
      const int ref = static_cast<int>(std::nearbyint(want.get(c * h * w + i) * 255.0f));
      worst = std::max(worst, std::abs(ref - img.pixels[static_cast<std::size_t>(i * 3 + c)]));
    }
  return worst;
}

double nmse(const HostTensor& a, const HostTensor& b) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    num += std::pow(a.get(i) - b.get(i), 2);
    den += std::pow(b.get(i), 2);
  }
  return num / den;
}

TEST(Lora, MergedAndUnmergedMatchDiffusersInEachFormat) {
  NANSCOPE_REQUIRE_PYTHON();
  const LoraFiles& files = lora_files();
  pipeline::Session session;
  RunConfig cfg = base_config();
  const Capture plain = run(session, cfg);
  ASSERT_FALSE(plain.noise.empty());

  test::TempDir io_dir;
  io::write_safetensors(io_dir / "in.safetensors", {{"noise", HostTensor::from_f32(plain.noise_shape, plain.noise)}});
  const std::string kohya = (files.dir / "kohya.safetensors").string();
  const std::string peft = (files.dir / "peft.safetensors").string();
  // Oracle job 2 * file + unmerged: each file loaded by diffusers and fused, or kept as PEFT adapter layers.
  test::run_oracle("lora_oracle.py",
                   {"run", model_dir().string(), (io_dir / "in.safetensors").string(),
                    (io_dir / "out.safetensors").string(), cfg.prompt, cfg.negative_prompt, "3", "7.0", "42",
                    kohya + ":0.8:merged", kohya + ":0.8:unmerged", peft + ":-0.5:merged", peft + ":-0.5:unmerged"});
  const auto out = io::SafetensorsFile::open(io_dir / "out.safetensors");

  struct Case {
    std::string file;
    double weight;
    int oracle;
    std::string format;
  };
  const Case cases[] = {{"kohya.safetensors", 0.8, 0, "kohya"},
                        {"kohya_ldm.safetensors", 0.8, 0, "kohya (LDM names)"},
                        {"peft.safetensors", -0.5, 1, "diffusers/PEFT"}};
  for (const Case& c : cases) {
    for (const bool unmerged : {false, true}) {
      SCOPED_TRACE(c.file + (unmerged ? " unmerged" : " merged"));
      RunConfig lc = cfg;
      lc.loras = {{(files.dir / c.file).string(), c.weight}};
      lc.lora_unmerged = unmerged;
      if (unmerged && c.oracle == 0) lc.set("inspect.trace", "always");
      const Capture got = run(session, lc);
      ASSERT_EQ(got.images.size(), 1u);
      EXPECT_EQ(got.noise, plain.noise);
      const std::string job = std::to_string(2 * c.oracle + (unmerged ? 1 : 0));
      const HostTensor want = out.read("latent_" + job, DType::f32);
      EXPECT_TRUE(
          test::tensors_close(latent_of(got), want, {1e-8, 1e-4}, false, unmerged ? "lora unmerged" : "lora merged"));
      EXPECT_GT(nmse(latent_of(plain), want), 1e-3) << "the LoRA must change the result";
      EXPECT_LE(worst_pixel(got.images[0].image, out.read("image_" + job, DType::f32)), 2);
      // The report names the LoRA, its hash (A1111's, as Python computes it) and what it patched.
      const auto& r = got.reports.at(0);
      ASSERT_EQ(r.loras.size(), 1u);
      EXPECT_EQ(r.loras[0].short_hash, files.hashes.at(c.file).get<std::string>());
      EXPECT_EQ(r.loras[0].modules, 10);  // 7 UNet + 3 text encoder modules
      EXPECT_EQ(r.loras[0].format, c.format);
      EXPECT_EQ(r.loras[0].weight, c.weight);
      EXPECT_EQ(r.lora_unmerged, unmerged);
      EXPECT_EQ(r.outcome, "clean");
      if (unmerged && c.oracle == 0) {
        // Unmerged, each patched module runs the LoRA as its own ops, traced under <module>.lora.
        std::set<std::string> paths;
        for (const auto& t : r.inspection.traces)
          for (const auto& op : t.ops) paths.insert(op.path);
        for (const char* p : {"down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora.down",
                              "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora.up",
                              "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora",
                              "up_blocks.1.resnets.0.conv1.lora.down", "down_blocks.0.attentions.0.proj_in.lora.up"})
          EXPECT_TRUE(paths.count(p)) << p;
      }
    }
  }
}

// Separate text-encoder and UNet weights (A1111's <lora:NAME:TE:UNET>, --lora FILE:TE:UNET) against the
// oracle fusing the text encoder's deltas at TE and the UNet's at UNET (diffusers' per-component adapter
// weights do the same); the prompt tag, its named form and the setting give the same latent.
TEST(Lora, TextEncoderAndUNetWeightsApartMatchDiffusers) {
  NANSCOPE_REQUIRE_PYTHON();
  const LoraFiles& files = lora_files();
  pipeline::Session session;
  RunConfig cfg = base_config();
  cfg.steps = 2;
  const Capture plain = run(session, cfg);
  test::TempDir io_dir;
  io::write_safetensors(io_dir / "in.safetensors", {{"noise", HostTensor::from_f32(plain.noise_shape, plain.noise)}});
  const std::string kohya = (files.dir / "kohya.safetensors").string();
  test::run_oracle("lora_oracle.py", {"run", model_dir().string(), (io_dir / "in.safetensors").string(),
                                      (io_dir / "out.safetensors").string(), cfg.prompt, cfg.negative_prompt, "2",
                                      "7.0", "42", kohya + ":0.8:-0.5"});
  const auto out = io::SafetensorsFile::open(io_dir / "out.safetensors");
  const HostTensor want = out.read("latent_0", DType::f32);
  for (const bool unmerged : {false, true}) {
    SCOPED_TRACE(unmerged ? "unmerged" : "merged");
    RunConfig lc = cfg;
    lc.set("lora", kohya + ":0.8:-0.5");
    lc.lora_unmerged = unmerged;
    const Capture got = run(session, lc);
    ASSERT_EQ(got.images.size(), 1u);
    // The same tolerance as the one-weight comparison above (the same arithmetic).
    EXPECT_TRUE(test::tensors_close(latent_of(got), want, {1e-8, 1e-4}, false, "lora te/unet"));
    const auto& r = got.reports.at(0);
    ASSERT_EQ(r.loras.size(), 1u);
    EXPECT_EQ(r.loras[0].weight, 0.8);
    EXPECT_EQ(r.loras[0].unet_weight, -0.5);
  }
  // One weight for both differs from the two apart (the test can tell them apart).
  RunConfig both = cfg;
  both.set("lora", kohya + ":0.8");
  EXPECT_GT(nmse(latent_of(run(session, both)), want), 1e-6);
  // The prompt's tag, positional and named, is the same LoRA with the same weights.
  test::TempDir dir;
  fs::copy_file(files.dir / "kohya.safetensors", dir / "k.safetensors");
  RunConfig merged = cfg;
  merged.set("lora", kohya + ":0.8:-0.5");
  const Capture ref = run(session, merged);
  for (const char* tag : {"<lora:k:0.8:-0.5>", "<lora:k:te=0.8:unet=-0.5>", "<lora:k:unet=-0.5:0.8>"}) {
    SCOPED_TRACE(tag);
    RunConfig tagged = cfg;
    tagged.prompt = cfg.prompt + tag;
    tagged.lora_dir = dir.path().string();
    EXPECT_EQ(run(session, tagged).images.at(0).latent, ref.images.at(0).latent);
  }
}

// A one-module LoRA on attn1.to_q whose delta (4 x 3e4) is past f16's 65504.
fs::path overflowing_lora(const fs::path& dir) {
  const fs::path p = dir / "overflow.safetensors";
  std::vector<float> down(4 * 32, 1.0f), up(32 * 4, 3.0e4f);
  const std::string k = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
  io::write_safetensors(p, {{k + ".lora_down.weight", HostTensor::from_f32({4, 32}, down)},
                            {k + ".lora_up.weight", HostTensor::from_f32({32, 4}, up)},
                            {k + ".alpha", HostTensor::from_f32({}, {4.0f})}});
  return p;
}

TEST(Lora, F16OverflowIsTheModulesFaultMergedAndTheBranchsUnmerged) {
  NANSCOPE_REQUIRE_PYTHON();
  test::TempDir dir;
  pipeline::Session session;
  RunConfig cfg = base_config();
  cfg.steps = 1;
  cfg.set("unet.dtype", "f16");
  cfg.loras = {{overflowing_lora(dir.path()).string(), 1.0}};
  const Capture merged = run(session, cfg);
  const auto& rm = merged.reports.at(0);
  EXPECT_EQ(rm.inspection.origin, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q")
      << rm.inspection.summary;
  ASSERT_EQ(rm.loras.size(), 1u);
  ASSERT_EQ(rm.loras[0].overflows.size(), 1u);
  expect_contains(rm.loras[0].overflows[0], {"attn1.to_q", "f16"});

  cfg.lora_unmerged = true;
  const Capture branch = run(session, cfg);
  const auto& ru = branch.reports.at(0);
  EXPECT_EQ(ru.inspection.origin, "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora.up")
      << ru.inspection.summary;
  EXPECT_TRUE(ru.loras.at(0).overflows.empty());
}

// Writes a small kohya-form file with the given tensors.
fs::path write_lora(const fs::path& dir, const std::string& name,
                    const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::vector<std::pair<std::string, HostTensor>> t;
  for (const auto& [k, s] : tensors) {
    std::vector<float> v(static_cast<std::size_t>(shape_numel(s)), 0.01f);
    t.emplace_back(k, HostTensor::from_f32(s, v));
  }
  io::write_safetensors(dir / name, t);
  return dir / name;
}

std::string load_error(pipeline::Session& s, const fs::path& lora) {
  RunConfig cfg = base_config();
  cfg.steps = 1;
  cfg.loras = {{lora.string(), 1.0}};
  return test::error_of<FileError>([&] { s.generate(cfg); });
}

TEST(Lora, BadFilesAreRefusedNamingTheFileAndKey) {
  NANSCOPE_REQUIRE_PYTHON();
  test::TempDir dir;
  pipeline::Session session;
  const std::string q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
  const std::string k2 = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k";
  // A down weight that does not take the module's 32 inputs.
  expect_contains(
      load_error(session, write_lora(dir.path(), "shape.safetensors",
                                     {{q + ".lora_down.weight", {4, 33}}, {q + ".lora_up.weight", {32, 4}}})),
      {"shape.safetensors", q + ".lora_down.weight", "[4,33]", "attn1.to_q", "[32,32]"});
  // SDXL's text embeddings are 2048 wide: its attn2.to_k LoRA names the family.
  expect_contains(
      load_error(session, write_lora(dir.path(), "xl_k.safetensors",
                                     {{k2 + ".lora_down.weight", {4, 2048}}, {k2 + ".lora_up.weight", {32, 4}}})),
      {"xl_k.safetensors", "2048 wide (SDXL)", "SD 1.x"});
  // SDXL's second text encoder.
  expect_contains(
      load_error(session,
                 write_lora(dir.path(), "xl_te2.safetensors",
                            {{"lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", {4, 1280}},
                             {"lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", {1280, 4}}})),
      {"xl_te2.safetensors", "an SDXL LoRA", "text_encoder_2", "SD 1.x"});
  // Modules the model does not have: counted, with examples.
  expect_contains(
      load_error(session, write_lora(dir.path(), "unknown.safetensors",
                                     {{q + ".lora_down.weight", {4, 32}},
                                      {q + ".lora_up.weight", {32, 4}},
                                      {"lora_unet_down_blocks_7_attentions_0_proj_in.lora_down.weight", {4, 32}},
                                      {"lora_unet_down_blocks_7_attentions_0_proj_in.lora_up.weight", {32, 4}}})),
      {"unknown.safetensors", "1 of its 2 modules", "lora_unet_down_blocks_7_attentions_0_proj_in.lora_down.weight",
       "another model family"});
  // Keys of no LoRA form, a missing partner, LyCORIS: refused when read.
  const auto read_error = [&](const fs::path& p) {
    return test::error_of<FileError>([&] { models::read_lora_file({p, 1.0, std::nullopt, "test"}); });
  };
  expect_contains(read_error(write_lora(dir.path(), "keys.safetensors",
                                        {{q + ".lora_down.weight", {4, 32}},
                                         {q + ".lora_up.weight", {32, 4}},
                                         {"model.diffusion_model.out.0.weight", {4}}})),
                  {"keys.safetensors", "1 of 3 keys", "model.diffusion_model.out.0.weight"});
  expect_contains(read_error(write_lora(dir.path(), "half.safetensors", {{q + ".lora_down.weight", {4, 32}}})),
                  {"half.safetensors", q + ".lora_down.weight", "no up"});
  expect_contains(read_error(write_lora(dir.path(), "loha.safetensors", {{q + ".hada_w1_a", {4, 32}}})),
                  {"loha.safetensors", "LoHa"});
  // A truncated file: the safetensors reader names it before any byte is used.
  const fs::path whole = write_lora(dir.path(), "whole.safetensors",
                                    {{q + ".lora_down.weight", {4, 32}}, {q + ".lora_up.weight", {32, 4}}});
  fs::copy_file(whole, dir / "cut.safetensors");
  fs::resize_file(dir / "cut.safetensors", fs::file_size(whole) - 100);
  expect_contains(read_error(dir / "cut.safetensors"), {"cut.safetensors"});
  expect_contains(read_error(dir / "missing.safetensors"), {"missing.safetensors", "does not exist"});
}

TEST(Lora, PromptTagsAreFoundInLoraDirAndLeftOutOfTheText) {
  NANSCOPE_REQUIRE_PYTHON();
  const LoraFiles& files = lora_files();
  test::TempDir dir;
  fs::create_directories(dir / "styles");
  fs::copy_file(files.dir / "kohya.safetensors", dir / "styles" / "circle.safetensors");
  pipeline::Session session;
  RunConfig tagged = base_config();
  tagged.steps = 2;
  tagged.prompt = "a red circle <lora:circle:0.8>on a blue background";
  // Without a folder to look in: the setting is named.
  expect_contains(test::error_of<ConfigError>([&] { session.generate(tagged); }), {"lora_dir", "<lora:circle:0.8>"});
  tagged.lora_dir = dir.path().string();
  const Capture a = run(session, tagged);
  RunConfig given = base_config();
  given.steps = 2;
  given.prompt = "a red circle on a blue background";
  given.loras = {{(files.dir / "kohya.safetensors").string(), 0.8}};
  const Capture b = run(session, given);
  EXPECT_EQ(a.images.at(0).latent, b.images.at(0).latent);  // same LoRA, same text for the tokenizer
  ASSERT_EQ(a.reports.at(0).loras.size(), 1u);
  EXPECT_EQ(a.reports[0].loras[0].name, "circle");
  expect_contains(a.reports[0].loras[0].origin, {"<lora:circle:0.8>"});
  // A1111's "Lora hashes" names it with its hash; the prompt keeps the tag, as A1111's does.
  const std::string text = a1111_parameters(tagged);
  expect_contains(text, {"<lora:circle:0.8>",
                         "Lora hashes: \"circle: " + files.hashes.at("kohya.safetensors").get<std::string>() + "\""});
}

// A LoRA change in one session re-patches only the modules a LoRA touches: the
// weights of the modules merged before or now are read again (10 here: 7 UNet
// and 3 text encoder modules, the same in both files), an unmerged LoRA
// leaves the base weights on the device, and nothing else is read. Each run is
// bit for bit the run of a fresh session given the same list. A reload would
// read every tensor of the model (over 100), a stale delta would change the
// latent: either fails.
TEST(Lora, ChangingLorasInASessionRepatchesOnlyTheirModules) {
  NANSCOPE_REQUIRE_PYTHON();
  const LoraFiles& files = lora_files();
  const std::string kohya = (files.dir / "kohya.safetensors").string();
  const std::string peft = (files.dir / "peft.safetensors").string();
  struct Step {
    std::vector<LoraRef> loras;
    bool unmerged;
    std::int64_t reads;  // tensors read from the model files for this change
  };
  const Step steps[] = {
      {{}, false, -1},                            // the first load
      {{{kohya, 0.8}}, false, 10},                // add: the 10 modules read and merged
      {{{kohya, -0.3}, {peft, 0.5}}, false, 10},  // weight and add: the same 10 modules again
      {{{peft, 0.5}}, true, 10},                  // unmerged: the merged weights restored from the file
      {{{peft, 0.5}, {kohya, 0.25}}, true, 0},    // add, unmerged: only branches, no weight read
      {{}, false, 0},                             // remove: the base weights were never changed
      {{{kohya, 1.0}}, false, 10},
  };
  pipeline::Session session;
  RunConfig cfg = base_config();
  cfg.steps = 1;
  for (std::size_t i = 0; i < std::size(steps); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    RunConfig c = cfg;
    c.loras = steps[i].loras;
    c.lora_unmerged = steps[i].unmerged;
    const std::int64_t before = models::WeightSource::tensors_read();
    const Capture got = run(session, c);
    const std::int64_t reads = models::WeightSource::tensors_read() - before;
    if (steps[i].reads >= 0) {
      EXPECT_EQ(reads, steps[i].reads);
    } else {
      EXPECT_GT(reads, 100);
    }
    pipeline::Session fresh;
    const Capture want = run(fresh, c);
    ASSERT_EQ(got.images.size(), 1u);
    ASSERT_EQ(want.images.size(), 1u);
    EXPECT_EQ(got.images[0].latent, want.images[0].latent);
    EXPECT_EQ(got.images[0].image.pixels, want.images[0].image.pixels);
    ASSERT_EQ(got.reports.at(0).loras.size(), steps[i].loras.size());
    for (std::size_t l = 0; l < steps[i].loras.size(); ++l) {
      EXPECT_EQ(got.reports[0].loras[l].weight, steps[i].loras[l].weight);
      EXPECT_EQ(got.reports[0].loras[l].modules, 10);
    }
  }
  // A bad LoRA on the kept model is refused, and the next run is right again (the model is loaded anew).
  test::TempDir dir;
  RunConfig bad = cfg;
  const std::string q = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
  bad.loras = {{write_lora(dir.path(), "shape.safetensors",
                           {{q + ".lora_down.weight", {4, 33}}, {q + ".lora_up.weight", {32, 4}}})
                    .string(),
                1.0}};
  EXPECT_THROW(session.generate(bad), FileError);
  RunConfig again = cfg;
  again.loras = {{kohya, 0.8}};
  pipeline::Session fresh;
  EXPECT_EQ(run(session, again).images.at(0).latent, run(fresh, again).images.at(0).latent);
}

// A kohya LoRA on a single-file (LDM) checkpoint patches the same modules with
// the same numbers as on the diffusers folder of the same weights, merged and
// unmerged, in both kohya namings: the text encoder(s) and the UNet give the
// same bits. SD 1.x, and SDXL, whose single file stores its second text
// encoder's q/k/v fused (OpenCLIP in_proj) and names its LoRA lora_te2_.
// The LDM names of the second file come from the single-file table here; the
// hand-written LDM names of lora_oracle.py check that table against kohya's.
class LoraSingleFile : public ::testing::TestWithParam<models::ModelFamily> {};

TEST_P(LoraSingleFile, SameLoraOnTheSingleFileAsOnItsFolder) {
  NANSCOPE_REQUIRE_PYTHON();
  const models::ModelFamily f = GetParam();
  const bool xl = f == models::ModelFamily::sdxl;
  const std::string family = xl ? "sdxl" : "sd1";
  test::TempDir dir;
  const fs::path folder = dir / (family + "-diffusers");
  test::run_oracle("single_file_oracle.py", {"make", family, folder.string()});
  const fs::path file = dir / "single" / ("tiny-" + family + ".safetensors");
  test::write_ldm_copy(folder, f, file);

  // A LoRA on linear and conv modules of the UNet and on the text encoder(s), with random numbers.
  const auto weight_shape = [&](const std::string& comp, const std::string& module) {
    const fs::path d = folder / comp;
    const auto st = io::SafetensorsFile::open(
        fs::exists(d / "model.safetensors") ? d / "model.safetensors" : d / "diffusion_pytorch_model.safetensors");
    for (const auto& e : st.entries())
      if (e.name == module + ".weight") return e.shape;
    ADD_FAILURE() << "no " << comp << "." << module;
    return Shape{};
  };
  const std::string attn = xl ? "down_blocks.1.attentions.0." : "down_blocks.0.attentions.0.";
  std::vector<std::pair<std::string, std::string>> modules = {
      {"unet", attn + "transformer_blocks.0.attn1.to_q"},
      {"unet", attn + "transformer_blocks.0.attn2.to_k"},
      {"unet", attn + "transformer_blocks.0.ff.net.0.proj"},
      {"unet", attn + "proj_in"},
      {"unet", "up_blocks.0.resnets.0.conv1"},
      {"text_encoder", "text_model.encoder.layers.0.self_attn.q_proj"},
      {"text_encoder", "text_model.encoder.layers.1.mlp.fc1"}};
  if (xl) {
    modules.emplace_back("text_encoder_2", "text_model.encoder.layers.0.self_attn.k_proj");
    modules.emplace_back("text_encoder_2", "text_model.encoder.layers.1.self_attn.out_proj");
  }
  const models::LdmNameMap names(test::folder_structure(folder, f));
  test::Rng rng(test::seed_from("lora-single-file-" + family));
  std::vector<std::pair<std::string, HostTensor>> plain, ldm;
  for (const auto& [comp, module] : modules) {
    const Shape w = weight_shape(comp, module);
    const std::int64_t r = 2;
    const Shape down = w.size() == 2 ? Shape{r, w[1]} : Shape{r, w[1], w[2], w[3]};
    const Shape up = w.size() == 2 ? Shape{w[0], r} : Shape{w[0], r, 1, 1};
    const HostTensor d = test::random_normal(rng, down, DType::f32, 0.0, 0.3);
    const HostTensor u = test::random_normal(rng, up, DType::f32, 0.0, 0.3);
    const std::string prefix = comp == "unet"           ? "lora_unet_"
                               : comp == "text_encoder" ? (xl ? "lora_te1_" : "lora_te_")
                                                        : "lora_te2_";
    std::string ldm_name = module;
    if (comp == "unet") {
      const auto ref = names.to_ldm("unet." + module + ".weight");
      ASSERT_TRUE(ref.has_value()) << module;
      ldm_name = ref->key.substr(std::string("model.diffusion_model.").size());
      ldm_name = ldm_name.substr(0, ldm_name.size() - std::string(".weight").size());
    }
    for (auto [target, name] : {std::pair{&plain, module}, std::pair{&ldm, ldm_name}}) {
      std::replace(name.begin(), name.end(), '.', '_');
      target->emplace_back(prefix + name + ".lora_down.weight", d);
      target->emplace_back(prefix + name + ".lora_up.weight", u);
      target->emplace_back(prefix + name + ".alpha", HostTensor::from_f32({}, {1.5f}));
    }
  }
  io::write_safetensors(dir / "kohya.safetensors", plain);
  io::write_safetensors(dir / "kohya_ldm.safetensors", ldm);

  auto be = make_backend(select_device(enumerate_devices(), "reference"));
  OpContext ctx;
  ctx.backend = be.get();
  ctx.precision.dtype = DType::f32;
  const pipeline::ComponentDTypes dt;
  const auto outputs = [&](pipeline::SdModel& m) {
    std::vector<HostTensor> out;
    const auto ids = std::vector<std::vector<int>>{m.tokenizer.encode("a red circle").ids};
    const auto t = m.text_encoder->forward(ctx, ids, 0);
    out.push_back(be->download(t.prompt_embeds));
    models::AddedConditions added;
    if (xl) {
      const auto t2 = m.text_encoder_2->forward(ctx, {m.tokenizer_2->encode("a red circle").ids}, 0);
      out.push_back(be->download(t2.penultimate));
      added.text_embeds = t2.pooled;
      added.time_ids = {64, 64, 0, 0, 64, 64};
    }
    test::Rng r(test::seed_from("lora-single-file-unet"));
    const auto& uc = m.unet->config();
    const Tensor x = be->upload(test::random_normal(r, {1, 4, 8, 8}, DType::f32));
    const Tensor c = be->upload(test::random_normal(r, {1, 77, uc.cross_attention_dim.front()}, DType::f32));
    const std::vector<float> timesteps{500.0f};
    out.push_back(be->download(m.unet->forward(ctx, x, timesteps, c, xl ? &added : nullptr)));
    return out;
  };
  const auto load = [&](const fs::path& model, const fs::path& lora, bool unmerged) {
    models::LoraSet set({{lora, 0.7, std::nullopt, "test"}}, unmerged);
    auto m = pipeline::SdModel::load(model, "", *be, dt, &set);
    EXPECT_EQ(m->loras().at(0).modules, static_cast<int>(modules.size()));
    return outputs(*m);
  };
  const auto base = outputs(*pipeline::SdModel::load(folder, "", *be, dt));
  for (const bool unmerged : {false, true}) {
    const auto want = load(folder, dir / "kohya.safetensors", unmerged);
    for (const char* lora : {"kohya.safetensors", "kohya_ldm.safetensors"}) {
      SCOPED_TRACE(std::string(lora) + (unmerged ? " unmerged" : " merged"));
      const auto got = load(file, dir / lora, unmerged);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(test::bitwise_equal(got[i], want[i])) << "output " << i;
        EXPECT_FALSE(test::bitwise_equal(got[i], base[i])) << "output " << i << ": the LoRA must change it";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LoraSingleFile,
                         ::testing::Values(models::ModelFamily::sd1, models::ModelFamily::sdxl),
                         [](const auto& p) { return p.param == models::ModelFamily::sdxl ? "sdxl" : "sd1"; });

TEST(LoraList, SettingAndPromptSyntax) {
  const auto l = parse_lora_list(" a.safetensors:0.8, C:\\l\\b.safetensors ,/x/c.safetensors:-1.5");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0], (LoraRef{"a.safetensors", 0.8}));
  EXPECT_EQ(l[1], (LoraRef{"C:\\l\\b.safetensors", 1.0}));
  EXPECT_EQ(l[2], (LoraRef{"/x/c.safetensors", -1.5}));
  EXPECT_EQ(parse_lora_list(format_lora_list(l)), l);
  RunConfig c;
  c.set("lora", "a.safetensors:0.5");
  c.set("lora.mode", "unmerged");
  EXPECT_EQ(c.loras, (std::vector<LoraRef>{{"a.safetensors", 0.5}}));
  EXPECT_TRUE(c.lora_unmerged);
  expect_contains(test::error_of<ConfigError>([&] { c.set("lora", "a.safetensors:1000"); }),
                  {"\"lora\"", "-100 to 100"});
  expect_contains(test::error_of<ConfigError>([&] { c.set("lora", ":0.5"); }), {"\"lora\"", "FILE:WEIGHT"});
  expect_contains(test::error_of<ConfigError>([&] { c.set("lora.mode", "fused"); }), {"lora.mode", "unmerged"});
  add_loras(c, "b.safetensors", "--lora");
  EXPECT_EQ(c.loras.size(), 2u);

  const auto tags = prompt_loras("x <lora:one> y <lora:two:0.25>");
  ASSERT_EQ(tags.size(), 2u);
  EXPECT_EQ(tags[0].name, "one");
  EXPECT_EQ(tags[0].weight, 1.0);
  EXPECT_EQ(tags[1].weight, 0.25);
  EXPECT_EQ(strip_lora_tags("x <lora:one> y <lora:two:0.25>"), "x  y ");
  EXPECT_EQ(prompt_loras("<lora:a:1:0.5>").at(0).unet(), 0.5);  // <lora:NAME:TE:UNET> (test_hires_pass.cpp)
  expect_contains(test::error_of<ConfigError>([&] { prompt_loras("<lora:a:x>"); }), {"\"x\"", "not a number"});
}

}  // namespace
}  // namespace nanscope
