// The rest of A1111's hires fix and LoRA syntax, without a model run (the runs
// against diffusers are in test_img2img.cpp and test_lora.cpp):
// - "Hires resize: WxH": the target size and the latent crop, against A1111's
//   formulas (modules/processing.py calculate_target_resolution and the crop
//   in sample_hr_pass), worked by hand for each case below;
// - the second pass's own settings (hires.sampler, .schedule, .prompt,
//   .negative_prompt, .cfg_scale): the settings table, the A1111 text we
//   write and read back, a foreign A1111 text with awkward quoting, and what
//   reproduce makes of them (Hires checkpoint named as not reproducible);
// - <lora:NAME:TE:UNET>, te=, unet=, dyn= and --lora FILE:TE:UNET;
// - the errors a bad hires setting gives before any step (the tiny model).

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/a1111.hpp"
#include "config/foreign_generation.hpp"
#include "config/lora_list.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "pipeline/img2img.hpp"
#include "pipeline/session.hpp"
#include "studies/reproduce.hpp"
#include "support/errors.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_contains;

struct TargetCase {
  const char* what;
  int width, height;
  double scale;
  int resize_x, resize_y;
  // Worked by hand from A1111's formulas (opt_f = 8).
  int upscale_w, upscale_h, truncate_x, truncate_y, out_w, out_h;
};

TEST(HiresTarget, FollowsA1111sFormulas) {
  const TargetCase cases[] = {
      // int(512 * 2)
      {"scale", 512, 512, 2.0, 0, 0, 1024, 1024, 0, 0, 1024, 1024},
      // int(512 * 1.5) = 768, int(768 * 1.5) = 1152
      {"scale 1.5, portrait", 512, 768, 1.5, 0, 0, 768, 1152, 0, 0, 768, 1152},
      // int(520 * 1.3) = int(676.0000000000001) = 676 -> latent 84 -> 672 (A1111 floors the latent too)
      {"scale not on the grid", 520, 520, 1.3, 0, 0, 676, 676, 0, 0, 672, 672},
      // the same aspect: src_ratio 2/3 == dst_ratio, so the else branch: 1536 * 512 // 768 = 1024
      {"same aspect", 512, 768, 0, 1024, 1536, 1024, 1536, 0, 0, 1024, 1536},
      // wider target: src 1 < dst 4/3 -> to_x 1024, to_y 1024 * 512 // 512 = 1024; ty = (1024 - 768) // 8 = 32
      {"wider", 512, 512, 0, 1024, 768, 1024, 1024, 0, 32, 1024, 768},
      // taller target: src 1.5 > dst 0.75 -> to_x 1024 * 768 // 512 = 1536, to_y 1024; tx = (1536 - 768) // 8 = 96
      {"taller", 768, 512, 0, 768, 1024, 1536, 1024, 96, 0, 768, 1024},
      // one side 0: to_y = 1000 * 768 // 512 = 1500 -> latent 187 -> 1496
      {"height 0", 512, 768, 0, 1000, 0, 1000, 1500, 0, 0, 1000, 1496},
      // one side 0: to_x = 1000 * 768 // 512 = 1500
      {"width 0", 768, 512, 0, 0, 1000, 1500, 1000, 0, 0, 1496, 1000},
      // to_x = 640 * 512 // 768 = 426 (426.67 rounded down) -> latent 53 -> 424
      {"width 0, rounding", 512, 768, 0, 0, 640, 426, 640, 0, 0, 424, 640},
      // an odd cut: src 1 < dst 1024/1016 -> to 1024x1024, ty = (1024 - 1016) // 8 = 1 (0 above, 1 below)
      {"odd cut", 512, 512, 0, 1024, 1016, 1024, 1024, 0, 1, 1024, 1016},
      // narrower: src 1 > dst 0.5 -> to_x = 512 * 512 // 512 = 512, to_y 512; tx = (512 - 256) // 8 = 32
      {"narrower", 512, 512, 0, 256, 512, 512, 512, 32, 0, 256, 512},
  };
  for (const TargetCase& c : cases) {
    SCOPED_TRACE(c.what);
    const pipeline::HiresTarget t = pipeline::hires_target(c.width, c.height, c.scale, c.resize_x, c.resize_y, 8);
    EXPECT_EQ(t.upscale_w, c.upscale_w);
    EXPECT_EQ(t.upscale_h, c.upscale_h);
    EXPECT_EQ(t.truncate_x, c.truncate_x);
    EXPECT_EQ(t.truncate_y, c.truncate_y);
    EXPECT_EQ(t.width, c.out_w);
    EXPECT_EQ(t.height, c.out_h);
  }
}

TEST(HiresTarget, TheCropKeepsTheMiddleAsA1111sSlice) {
  // 2 channels of a 3x5 latent numbered 0..29; tx = 3 cuts 1 column left and 2 right, ty = 1 cuts the last row
  // (samples[:, :, 0 : 3 - 1, 1 : 5 - 2]).
  std::vector<float> x(30);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const auto y = pipeline::truncate_latent(x, {1, 2, 3, 5}, 3, 1);
  const std::vector<float> want = {1, 2, 6, 7, 16, 17, 21, 22};
  EXPECT_EQ(y, want);
  EXPECT_THROW(pipeline::truncate_latent(x, {1, 2, 3, 5}, 5, 0), ConfigError);
}

// Every new setting through the table, our A1111 text and back.
TEST(HiresSettings, RoundTripThroughTheA1111Text) {
  RunConfig c;
  c.width = 512;
  c.height = 768;
  c.prompt = "a castle";
  c.negative_prompt = "blurry";
  c.set("hires.width", "1024");
  c.set("hires.height", "0");
  c.set("hires.steps", "10");
  c.set("hires.denoise", "0.5");
  c.set("hires.sampler", "dpmpp_2m");
  c.set("hires.schedule", "karras");
  c.set("hires.prompt", "a castle, \"sharp\": detailed,\nnight");
  c.set("hires.negative_prompt", "lowres, jpeg");
  c.set("hires.cfg_scale", "4.5");
  EXPECT_TRUE(c.hires());
  const std::string text = a1111_parameters(c);
  expect_contains(text, {"Hires resize: 1024x0", "Hires sampler: DPM++ 2M", "Hires schedule type: Karras",
                         "Hires CFG Scale: 4.5", "Hires negative prompt: \"lowres, jpeg\"", "Denoising strength: 0.5"});
  EXPECT_EQ(text.find("Hires upscale:"), std::string::npos) << text;  // A1111 writes one of the two
  const RunConfig back = run_config_from_a1111(text);
  EXPECT_EQ(back.hires_width, 1024);
  EXPECT_EQ(back.hires_height, 0);
  EXPECT_EQ(back.hires_denoise, 0.5);
  EXPECT_EQ(back.hires_sampler, SamplerId::dpmpp_2m);
  EXPECT_EQ(back.hires_schedule, ScheduleId::karras);
  EXPECT_EQ(back.hires_prompt, c.hires_prompt);
  EXPECT_EQ(back.hires_negative_prompt, "lowres, jpeg");
  EXPECT_EQ(back.hires_cfg_scale, 4.5);
  EXPECT_EQ(back.strength, 0.75);  // "Denoising strength" was the hires pass's

  // "Use same ..." and values equal to the first pass's are left out, as A1111 does.
  RunConfig same = c;
  same.hires_sampler = same.sampler;
  same.hires_prompt = same.prompt;
  same.hires_cfg_scale = 0;
  const std::string t2 = a1111_parameters(same);
  for (const char* k : {"Hires sampler", "Hires prompt", "Hires CFG Scale"})
    EXPECT_EQ(t2.find(k), std::string::npos) << k << " in " << t2;
  RunConfig unset;
  unset.set("hires.sampler", "");
  EXPECT_FALSE(unset.hires_sampler);
  EXPECT_FALSE(unset.hires());

  // Bad values name the key.
  expect_contains(error_of<ConfigError>([&] { unset.set("hires.width", "1001"); }), {"hires.width", "multiple of 8"});
  expect_contains(error_of<ConfigError>([&] { unset.set("hires.sampler", "dpmpp_3m"); }), {"hires.sampler"});
  expect_contains(error_of<ConfigError>([&] { unset.set("hires.cfg_scale", "-1"); }), {"hires.cfg_scale"});
}

// A foreign A1111 text with every hires key, quoted the awkward ways A1111's quote() writes them.
const char* kHires =
    "a castle <lora:detail:0.8:0.3>, night\n"
    "Negative prompt: blurry\n"
    "Steps: 20, Sampler: Euler a, Schedule type: Automatic, CFG scale: 7, Seed: 5, Size: 512x768, "
    "Model: v1-5, Denoising strength: 0.4, Hires resize: 1024x1024, Hires steps: 8, Hires upscaler: Latent, "
    "Hires sampler: DPM++ 2M, Hires schedule type: Karras, "
    "Hires prompt: \"a castle, \\\"sharp\\\": detailed\\nmoon <lora:detail:0.8:0.3>\", "
    "Hires negative prompt: \"lowres, \\\"jpeg\\\"\", Hires CFG Scale: 4.5, "
    "Hires checkpoint: \"other-model [0123456789]\", Version: v1.10.1";

TEST(HiresForeign, EveryHiresKeyIsReadAndMapped) {
  const ForeignGeneration g = foreign_from_a1111(kHires);
  EXPECT_EQ(g.hires_width, 1024);
  EXPECT_EQ(g.hires_height, 1024);
  EXPECT_EQ(g.hires_sampler, "DPM++ 2M");
  EXPECT_EQ(g.hires_schedule, "Karras");
  EXPECT_EQ(g.hires_prompt, "a castle, \"sharp\": detailed\nmoon <lora:detail:0.8:0.3>");
  EXPECT_EQ(g.hires_negative_prompt, "lowres, \"jpeg\"");
  EXPECT_EQ(g.hires_cfg_scale, 4.5);
  EXPECT_EQ(g.hires_checkpoint, "other-model [0123456789]");
  // SD.Next and an A1111 extension write "Hires CFG scale".
  EXPECT_EQ(foreign_from_a1111("x\nSteps: 2, Sampler: Euler, Hires upscale: 2, Hires CFG scale: 3").hires_cfg_scale, 3);
  EXPECT_EQ(g.hires_denoise, 0.4);
  EXPECT_TRUE(g.unknown_fields.empty());
  ASSERT_EQ(g.loras.size(), 1u);
  EXPECT_EQ(g.loras[0].clip_weight, 0.8);  // <lora:NAME:TE:UNET>
  EXPECT_EQ(g.loras[0].weight, 0.3);

  test::TempDir models;
  io::FileHashCache cache(models / "hashes.json");
  const studies::ReproducePlan plan = studies::plan_reproduction(g, models.path(), cache);
  const RunConfig& c = plan.config;
  EXPECT_EQ(c.hires_width, 1024);
  EXPECT_EQ(c.hires_height, 1024);
  EXPECT_EQ(c.hires_scale, 0);
  EXPECT_EQ(c.hires_steps, 8);
  EXPECT_EQ(c.hires_sampler, SamplerId::dpmpp_2m);
  EXPECT_EQ(c.hires_schedule, ScheduleId::karras);
  EXPECT_EQ(c.hires_prompt, "a castle, \"sharp\": detailed\nmoon ");  // the tag out, as for the prompt
  EXPECT_EQ(c.hires_negative_prompt, "lowres, \"jpeg\"");
  EXPECT_EQ(c.hires_cfg_scale, 4.5);
  std::string all;
  for (const auto& n : plan.not_reproducible) all += n.what + ": " + n.reason + "\n";
  expect_contains(all,
                  {"Hires checkpoint: Hires checkpoint 'other-model [0123456789]' not found", "cannot be reproduced"});
  EXPECT_EQ(all.find("Hires resize"), std::string::npos) << all;  // another aspect is reproduced now
  EXPECT_EQ(all.find("Hires prompt"), std::string::npos) << all;  // the same LoRA tags in both prompts

  // A hires checkpoint that is in the folder is found, and said plainly not to be supported.
  std::ofstream(models / "other-model.safetensors") << "not read";
  io::FileHashCache cache2(models / "hashes2.json");
  const studies::ReproducePlan found = studies::plan_reproduction(g, models.path(), cache2);
  EXPECT_EQ(found.hires_checkpoint.path, models / "other-model.safetensors");
  std::string all2;
  for (const auto& n : found.not_reproducible) all2 += n.reason + "\n";
  expect_contains(all2, {"other-model.safetensors", "second checkpoint for the hires pass is not supported"});

  // A hires sampler NaNscope lacks, and a hires prompt naming other LoRAs, are listed.
  const ForeignGeneration odd = foreign_from_a1111(
      "x <lora:a:1>\nSteps: 20, Sampler: Euler, Size: 512x512, Hires upscale: 2, Hires sampler: DPM++ 3M SDE, "
      "Hires prompt: \"x <lora:b:1>\"");
  studies::ReproducePlan p2;
  p2.generation = odd;
  studies::map_onto_run_config(p2);
  std::string all3;
  for (const auto& n : p2.not_reproducible) all3 += n.what + ": " + n.reason + "\n";
  expect_contains(all3, {"Hires sampler: hires sampler 'DPM++ 3M SDE'", "unknown",
                         "Hires prompt: the hires prompt's LoRA tags differ"});
  EXPECT_FALSE(p2.config.hires_sampler);
}

TEST(LoraSyntax, TextEncoderAndUNetWeightsAsA1111ReadsThem) {
  // extra_networks_lora.py: te = positional[1] or 1, then te=; unet = positional[2] or te, then unet=.
  const auto tags = prompt_loras(
      "<lora:a> <lora:b:0.5> <lora:c:0.5:1.5> <lora:d:te=0.25> <lora:e:unet=2> <lora:f:0.5:unet=0> "
      "<lora:g:0.7:0.1:te=0.2>");
  ASSERT_EQ(tags.size(), 7u);
  const double te[] = {1, 0.5, 0.5, 0.25, 1, 0.5, 0.2};
  const double unet[] = {1, 0.5, 1.5, 0.25, 2, 0, 0.1};
  for (std::size_t i = 0; i < tags.size(); ++i) {
    SCOPED_TRACE(tags[i].tag);
    EXPECT_EQ(tags[i].weight, te[i]);
    EXPECT_EQ(tags[i].unet(), unet[i]);
  }
  EXPECT_EQ(strip_lora_tags("x <lora:c:0.5:1.5> y"), "x  y");
  expect_contains(error_of<ConfigError>([] { prompt_loras("<lora:a:1:1:8>"); }), {"<lora:a:1:1:8>", "dynamic rank"});
  expect_contains(error_of<ConfigError>([] { prompt_loras("<lora:a:dyn=8>"); }), {"dyn=8", "not supported"});
  expect_contains(error_of<ConfigError>([] { prompt_loras("<lora:a:1:x>"); }), {"UNet weight", "\"x\""});
  expect_contains(error_of<ConfigError>([] { prompt_loras("<lora:a:foo=1>"); }), {"foo=1"});

  // The foreign reader: the same rules, dyn kept as what cannot be honoured.
  const auto f = a1111_prompt_loras("<lora:a:0.5:unet=1.5:dyn=4> <lyco:b:te=0.3>");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].clip_weight, 0.5);
  EXPECT_EQ(f[0].weight, 1.5);
  EXPECT_EQ(f[0].unsupported, "dyn=4 (dynamic rank)");
  EXPECT_EQ(f[1].clip_weight, 0.3);
  EXPECT_EQ(f[1].weight, 0.3);

  // The setting and --lora: FILE:TE:UNET next to FILE:WEIGHT; a Windows drive is no weight.
  const auto l = parse_lora_list("a.safetensors:0.5:1.5, C:\\l\\b.safetensors:0.8, c.safetensors:-1:0");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0], (LoraRef{"a.safetensors", 0.5, 1.5}));
  EXPECT_EQ(l[1], (LoraRef{"C:\\l\\b.safetensors", 0.8, std::nullopt}));
  EXPECT_EQ(l[2], (LoraRef{"c.safetensors", -1, 0.0}));
  EXPECT_EQ(format_lora_list(l), "a.safetensors:0.5:1.5,C:\\l\\b.safetensors:0.8,c.safetensors:-1:0");
  EXPECT_EQ(parse_lora_list(format_lora_list(l)), l);
  expect_contains(error_of<ConfigError>([] { parse_lora_list("a.safetensors:0.5:500"); }), {"-100 to 100"});
}

// Bad hires settings are refused before any step, naming the key.
TEST(HiresRun, BadHiresSettingsAreRefusedBeforeAnyStep) {
  NANSCOPE_REQUIRE_PYTHON();
  pipeline::Session session;
  RunConfig base;
  base.model = test::tiny_sd_pipeline_dir().string();
  base.prompt = "a red circle";
  base.steps = 2;
  base.device = "reference";
  base.width = 24;
  base.height = 16;
  struct Capture final : pipeline::RunObserver {
    int steps = 0;
    void on_step(const pipeline::StepReport&) override { ++steps; }
  };
  auto refused = [&](const RunConfig& c) {
    Capture cap;
    std::string msg = error_of<ConfigError>([&] { session.generate(c, &cap); });
    EXPECT_EQ(cap.steps, 0) << msg;
    return msg;
  };
  RunConfig oneside = base;
  oneside.set("hires.width", "40");  // height 40 * 16 // 24 = 26: not a multiple of the tiny model's 4
  expect_contains(refused(oneside), {"hires.width 40, hires.height 0 from 24x16", "40x26", "multiples of 4"});
  RunConfig pair = base;
  pair.set("hires.sampler", "ddim");
  pair.set("hires.schedule", "karras");
  pair.set("hires.scale", "2");
  expect_contains(refused(pair), {"hires.sampler ddim with hires.schedule karras", "schedule=default"});
  RunConfig tags = base;
  tags.set("hires.scale", "2");
  tags.set("hires.prompt", "a red circle <lora:x:1>");
  expect_contains(refused(tags), {"hires.prompt", "<lora:...>"});
}

}  // namespace
}  // namespace nanscope
