// The sampler / schedule split and the names other tools write
// (config/sampler_names.hpp): A1111's old and new infotext forms, ComfyUI's
// sampler_name + scheduler, the dpmpp_2m_karras alias in --set and presets, and
// the schedule and torch-cuda noise rows of the settings table.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "config/a1111.hpp"
#include "config/preset.hpp"
#include "config/run_config.hpp"
#include "config/sampler_names.hpp"
#include "core/error.hpp"
#include "pipeline/scheduler.hpp"

namespace nanscope {
namespace {

using S = SamplerId;
using K = ScheduleId;

TEST(SamplerNames, A1111OldAndNewForms) {
  struct Case {
    const char* sampler;
    const char* schedule_type;
    S want_sampler;
    K want_schedule;
  };
  const Case cases[] = {
      // Before 1.9: the schedule folded into the name; no suffix = k-diffusion's own spacing.
      {"DPM++ 2M Karras", "", S::dpmpp_2m, K::karras},
      {"DPM++ 2M", "", S::dpmpp_2m, K::normal},
      {"DPM++ SDE Karras", "", S::dpmpp_sde, K::karras},
      {"DPM++ 2M SDE Karras", "", S::dpmpp_2m_sde, K::karras},
      {"DPM++ 2M SDE Exponential", "", S::dpmpp_2m_sde, K::exponential},
      {"LMS Karras", "", S::lms, K::karras},
      {"LMS", "", S::lms, K::normal},
      {"Heun", "", S::heun, K::normal},
      {"Euler a", "", S::euler_a, K::normal},
      {"Euler", "", S::euler, K::normal},
      {"DDIM", "", S::ddim, K::class_default},
      {"UniPC", "", S::unipc, K::class_default},
      {"DDPM", "", S::ddpm, K::class_default},
      {"LCM", "", S::lcm, K::class_default},
      // 1.9 and later: "Schedule type", with Automatic meaning each sampler's own default.
      {"DPM++ 2M", "Karras", S::dpmpp_2m, K::karras},
      {"DPM++ 2M", "Automatic", S::dpmpp_2m, K::karras},
      {"DPM++ SDE", "Automatic", S::dpmpp_sde, K::karras},
      {"DPM++ 2M SDE", "Automatic", S::dpmpp_2m_sde, K::exponential},
      {"Euler a", "Automatic", S::euler_a, K::normal},
      {"Euler", "SGM Uniform", S::euler, K::sgm_uniform},
      {"Euler", "Simple", S::euler, K::simple},
      {"Euler", "Uniform", S::euler, K::normal},
      {"Euler", "Normal", S::euler, K::normal},
      {"Euler", "DDIM", S::euler, K::ddim_uniform},
      {"DPM++ 2M SDE", "Exponential", S::dpmpp_2m_sde, K::exponential},
      {"DPM++ 2M Karras", "Exponential", S::dpmpp_2m, K::exponential},  // the field wins over an old name
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.sampler) + " / " + c.schedule_type);
    const auto got = sampler_from_a1111(c.sampler, c.schedule_type);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->sampler, c.want_sampler);
    EXPECT_EQ(got->schedule, c.want_schedule);
  }
  // Unknown names: no guess.
  EXPECT_FALSE(sampler_from_a1111("DPM adaptive", ""));
  EXPECT_FALSE(sampler_from_a1111("DPM++ 2M Turbo", ""));
  EXPECT_FALSE(sampler_from_a1111("Euler", "Align Your Steps"));
  EXPECT_FALSE(sampler_from_a1111("euler", ""));  // A1111 names are case-sensitive labels
  EXPECT_FALSE(sampler_from_a1111("", "Karras"));
}

TEST(SamplerNames, ComfyUi) {
  struct Case {
    const char* name;
    const char* scheduler;
    S want_sampler;
    K want_schedule;
  };
  const Case cases[] = {
      {"euler", "normal", S::euler, K::normal},
      {"euler_ancestral", "karras", S::euler_a, K::karras},
      {"dpmpp_2m", "karras", S::dpmpp_2m, K::karras},
      {"dpmpp_2m_sde", "exponential", S::dpmpp_2m_sde, K::exponential},
      {"dpmpp_2m_sde_gpu", "karras", S::dpmpp_2m_sde, K::karras},
      {"dpmpp_sde", "sgm_uniform", S::dpmpp_sde, K::sgm_uniform},
      {"heun", "simple", S::heun, K::simple},
      {"lms", "ddim_uniform", S::lms, K::ddim_uniform},
      {"uni_pc", "normal", S::unipc, K::normal},
      {"ddpm", "normal", S::ddpm, K::normal},
      {"lcm", "sgm_uniform", S::lcm, K::sgm_uniform},
      {"ddim", "ddim_uniform", S::euler, K::ddim_uniform},  // ComfyUI's ddim is k-diffusion's Euler
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " / " + c.scheduler);
    const auto got = sampler_from_comfy(c.name, c.scheduler);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->sampler, c.want_sampler);
    EXPECT_EQ(got->schedule, c.want_schedule);
  }
  EXPECT_FALSE(sampler_from_comfy("dpmpp_3m_sde", "karras"));
  EXPECT_FALSE(sampler_from_comfy("euler", "beta"));
  EXPECT_FALSE(sampler_from_comfy("Euler", "normal"));
  EXPECT_FALSE(sampler_from_comfy("euler", ""));
}

// The alias keeps old --set lines, presets and PNGs loading; new files name both.
TEST(SamplerNames, KarrasAliasAndScheduleRow) {
  RunConfig c;
  c.set("sampler", "dpmpp_2m_karras");
  EXPECT_EQ(c.sampler, S::dpmpp_2m);
  EXPECT_EQ(c.schedule, K::karras);
  c.set("schedule", "sgm_uniform");
  EXPECT_EQ(c.schedule, K::sgm_uniform);
  EXPECT_THROW(c.set("schedule", "beta"), ConfigError);
  c.set("noise", "torch_cuda");
  EXPECT_EQ(c.noise, NoiseKind::torch_cuda);

  const RunConfig old = run_config_from_json(nlohmann::json{{"nanscope_preset", 1}, {"sampler", "dpmpp_2m_karras"}});
  EXPECT_EQ(old.sampler, S::dpmpp_2m);
  EXPECT_EQ(old.schedule, K::karras);
  const nlohmann::json j = to_json(old);
  EXPECT_EQ(j.at("sampler"), "dpmpp_2m");
  EXPECT_EQ(j.at("schedule"), "karras");
  EXPECT_EQ(run_config_from_json(j), old);
}

// A1111's infotext as A1111 writes it, and back in both forms.
TEST(SamplerNames, InfotextWrittenAsA1111AndReadBack) {
  RunConfig c;
  c.prompt = "a cat";
  c.sampler = S::dpmpp_2m;
  c.schedule = K::karras;
  c.noise = NoiseKind::torch_cuda;
  const std::string text = a1111_parameters(c);
  EXPECT_NE(text.find("Sampler: DPM++ 2M, Schedule type: Karras, CFG scale"), std::string::npos) << text;
  EXPECT_NE(text.find("RNG: NV"), std::string::npos) << text;
  const RunConfig back = run_config_from_a1111(text);
  EXPECT_EQ(back.sampler, S::dpmpp_2m);
  EXPECT_EQ(back.schedule, K::karras);
  EXPECT_EQ(back.noise, NoiseKind::torch_cuda);

  // A plain name reads back as schedule=default (NaNscope writes default so).
  const RunConfig plain = run_config_from_a1111("a cat\nSteps: 20, Sampler: Euler a, CFG scale: 7, Seed: 5");
  EXPECT_EQ(plain.sampler, S::euler_a);
  EXPECT_EQ(plain.schedule, K::class_default);
  const RunConfig old = run_config_from_a1111("a cat\nSteps: 20, Sampler: DPM++ SDE Karras, CFG scale: 7, Seed: 5");
  EXPECT_EQ(old.sampler, S::dpmpp_sde);
  EXPECT_EQ(old.schedule, K::karras);
  const RunConfig gpu = run_config_from_a1111("a cat\nSteps: 20, Sampler: Heun, CFG scale: 7, Seed: 5, RNG: GPU");
  EXPECT_EQ(gpu.sampler, S::heun);
  EXPECT_EQ(gpu.noise, NoiseKind::torch_cuda);

  c.schedule = K::class_default;  // no A1111 name: the field is left out
  EXPECT_EQ(a1111_parameters(c).find("Schedule type"), std::string::npos);
  c.schedule = K::sgm_uniform;
  EXPECT_NE(a1111_parameters(c).find("Schedule type: SGM Uniform"), std::string::npos);
}

// Timestep samplers take only their class's schedule; the error says what to do.
TEST(SamplerNames, TimestepSamplersRefuseOtherSchedules) {
  for (S s : {S::ddim, S::ddpm, S::lcm}) {
    const auto cfg = pipeline::SchedulerConfig::defaults(s);
    EXPECT_NO_THROW((void)cfg.with_schedule(K::class_default));
    try {
      (void)cfg.with_schedule(K::karras);
      ADD_FAILURE() << "accepted karras for " << sampler_name(s);
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("schedule=default"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW((void)pipeline::SchedulerConfig::defaults(S::unipc).with_schedule(K::karras));
}

}  // namespace
}  // namespace nanscope
