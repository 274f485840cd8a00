// UniPC as A1111 and ComfyUI run it (pipeline/unipc_reference.hpp) against a
// reimplementation of the UniPC reference code they both use
// (tests/oracles/unipc_oracle.py: A1111's time steps and noise schedule,
// ComfyUI's sigmas), the unipc.* settings reaching diffusers'
// UniPCMultistepScheduler (scheduler_oracle.py), and the mapping of both
// tools' UniPC names and options.
//
// Tolerances: the model's timestep per call within 2e-6 of the largest (A1111's
// fractional (t - 1/1000) * 1000; ComfyUI's integers exactly); the final latent
// within 2e-5 of max|want| (the linear systems are solved in double here, in
// float32 by torch, and each update is one linear combination: observed ~1e-6).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/reference/reference_backend.hpp"
#include "config/foreign_generation.hpp"
#include "config/run_config.hpp"
#include "config/sampler_names.hpp"
#include "core/error.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/scheduler.hpp"
#include "pipeline/session.hpp"
#include "pipeline/unipc_reference.hpp"
#include "studies/reproduce.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

using nlohmann::json;
using pipeline::SchedulerConfig;

const json kSd15 = {{"beta_schedule", "scaled_linear"},
                    {"beta_start", 0.00085},
                    {"beta_end", 0.012},
                    {"steps_offset", 1},
                    {"clip_sample", false},
                    {"set_alpha_to_one", false}};

struct Oracle {
  json response;
  std::vector<float> blob;
  std::vector<float> values(const json& ref) const {
    const auto off = ref.at("offset").get<std::size_t>();
    const auto n = ref.at("size").get<std::size_t>();
    return {blob.begin() + static_cast<std::ptrdiff_t>(off), blob.begin() + static_cast<std::ptrdiff_t>(off + n)};
  }
};

Oracle run_oracle(const std::string& script, const json& cases) {
  test::TempDir dir;
  std::ofstream(dir / "request.json") << json{{"cases", cases}}.dump();
  test::run_oracle(script,
                   {(dir / "request.json").string(), (dir / "response.json").string(), (dir / "blob.f32").string()});
  Oracle o;
  o.response = json::parse(std::ifstream(dir / "response.json"));
  std::ifstream in(dir / "blob.f32", std::ios::binary | std::ios::ate);
  o.blob.resize(static_cast<std::size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(o.blob.data()), static_cast<std::streamsize>(o.blob.size() * sizeof(float)));
  return o;
}

// max|got - want| / max|want|.
double scaled_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    err = std::isnan(e) ? 1e30 : std::max(err, e);
  }
  return scale > 0 ? err / scale : err;
}

RunConfig unipc_run(const std::string& impl, const std::string& variant, int order, const std::string& lof,
                    const std::string& skip) {
  RunConfig r;
  r.set("sampler", "unipc");
  r.set("unipc.implementation", impl);
  r.set("unipc.variant", variant);
  r.set("unipc.order", std::to_string(order));
  r.set("unipc.lower_order_final", lof);
  r.set("unipc.skip_type", skip);
  return r;
}

struct Case {
  std::string impl;  // a1111 | comfyui
  int steps;
  std::string variant;
  int order;  // a1111
  bool lower_order_final;
  std::string skip_type;  // a1111
  std::string schedule;   // comfyui
};

// ~3 s: one python process (torch, diffusers, k-diffusion imports) for every case.
TEST(UniPcReference, A1111AndComfyUiMatchTheReferenceCode) {
  NANSCOPE_REQUIRE_PYTHON();
  const std::vector<Case> list = {
      {"a1111", 20, "bh1", 3, true, "time_uniform", ""},  // A1111's defaults
      {"a1111", 30, "bh1", 3, true, "time_uniform", ""},  // runs 31 steps, as A1111 does
      {"a1111", 8, "bh2", 2, true, "time_uniform", ""},    {"a1111", 10, "bh1", 3, false, "time_uniform", ""},
      {"a1111", 12, "bh2", 3, true, "time_quadratic", ""}, {"a1111", 10, "bh1", 3, true, "logSNR", ""},
      {"a1111", 3, "bh1", 3, true, "time_uniform", ""},    {"a1111", 5, "bh1", 1, true, "time_uniform", ""},
      {"comfyui", 10, "bh1", 0, true, "", "normal"},  // uni_pc
      {"comfyui", 8, "bh2", 0, true, "", "karras"},   // uni_pc_bh2
      {"comfyui", 2, "bh1", 0, true, "", "exponential"},   {"comfyui", 15, "bh2", 0, true, "", "simple"},
  };
  json cases = json::array();
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Case& k = list[i];
    cases.push_back({{"impl", k.impl},
                     {"config", kSd15},
                     {"steps", k.steps},
                     {"variant", k.variant},
                     {"order", k.order},
                     {"lower_order_final", k.lower_order_final},
                     {"skip_type", k.skip_type},
                     {"schedule", k.schedule},
                     {"shape", {1, 4, 5, 3}},
                     {"seed", 4000 + static_cast<int>(i)}});
  }
  const Oracle o = run_oracle("unipc_oracle.py", cases);
  double worst = 0, worst_t = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Case& k = list[i];
    const json& r = o.response["cases"][i];
    SCOPED_TRACE(cases[i].dump());
    RunConfig run = unipc_run(k.impl, k.variant, k.order, k.lower_order_final ? "on" : "off",
                              k.skip_type.empty() ? "time_uniform" : k.skip_type);
    if (!k.schedule.empty()) run.set("schedule", k.schedule);
    auto sampler = pipeline::make_sampler(
        SchedulerConfig::from_json(kSd15, SamplerId::unipc, "test config").with_schedule(run.schedule).with_unipc(run));
    sampler->set_timesteps(k.steps);
    ASSERT_EQ(sampler->num_steps(), r["calls"].get<int>()) << "model calls";
    if (k.impl == "a1111") {
      EXPECT_EQ(sampler->num_steps(), pipeline::a1111_unipc_steps(k.steps));
    }
    const std::vector<float> want_t = o.values(r["timesteps"]);
    const double t_err = scaled_error(sampler->timesteps(), want_t);
    worst_t = std::max(worst_t, t_err);
    EXPECT_LE(t_err, 2e-6) << "timesteps";
    if (k.impl == "comfyui") {
      EXPECT_EQ(sampler->timesteps(), want_t) << "ComfyUI's integer timesteps";
    }

    pipeline::TorchCpuNoise noise(cases[i]["seed"].get<std::uint64_t>());
    std::vector<float> latent(60);
    noise.randn(latent);
    for (float& v : latent) v = v * sampler->init_noise_sigma();
    std::vector<float> eps(latent.size());
    for (int call = 0; call < sampler->num_steps(); ++call) {
      std::vector<float> x_in = latent;
      sampler->scale_model_input(x_in, call);
      const float t = sampler->timesteps()[static_cast<std::size_t>(call)];
      const float shift = 0.05f * std::cos(0.01f * t);
      for (std::size_t e = 0; e < eps.size(); ++e) eps[e] = 0.8f * x_in[e] + shift;
      sampler->step(eps, latent, call);
    }
    const double err = scaled_error(latent, o.values(r["final"]));
    worst = std::max(worst, err);
    EXPECT_LE(err, 2e-5) << "final latent";
  }
  std::printf("%zu UniPC reference cases; worst: timesteps %.3g, final latents %.3g (of max|want|)\n", list.size(),
              worst_t, worst);
}

// A1111's img2img and hires pass (sd_samplers_timesteps.sample_img2img): the latent noised at
// timesteps[t_enc], t_enc steps from t_start, through Sampler::start_at as the pipeline calls it.
TEST(UniPcReference, A1111ImgToImgAndHiresPassMatchTheReferenceCode) {
  NANSCOPE_REQUIRE_PYTHON();
  struct Img {
    int steps, start;
    bool hires;
    std::string skip;
  };
  const std::vector<Img> list = {{20, 10, true, "time_uniform"},  // hires: 10 steps at denoise 0.5 -> 9 calls
                                 {14, 4, false, "time_uniform"},
                                 {16, 6, true, "logSNR"},
                                 {12, 3, false, "time_quadratic"}};
  json cases = json::array();
  for (std::size_t i = 0; i < list.size(); ++i) {
    cases.push_back({{"impl", "a1111"},
                     {"config", kSd15},
                     {"steps", list[i].steps},
                     {"start", list[i].start},
                     {"hires", list[i].hires},
                     {"variant", "bh1"},
                     {"order", 3},
                     {"lower_order_final", true},
                     {"skip_type", list[i].skip},
                     {"shape", {1, 4, 5, 3}},
                     {"seed", 4200 + static_cast<int>(i)}});
  }
  const Oracle o = run_oracle("unipc_oracle.py", cases);
  reference::ReferenceBackend be;
  for (std::size_t i = 0; i < list.size(); ++i) {
    SCOPED_TRACE(cases[i].dump());
    const json& r = o.response["cases"][i];
    RunConfig run = unipc_run("a1111", "bh1", 3, "on", list[i].skip);
    SchedulerConfig sc = SchedulerConfig::from_json(kSd15, SamplerId::unipc, "test config").with_unipc(run);
    sc.unipc_hires_pass = list[i].hires;
    auto sampler = pipeline::make_sampler(sc);
    sampler->set_timesteps(list[i].steps);
    const auto seed = cases[i]["seed"].get<std::uint64_t>();
    std::vector<float> noise(60), x0(60);
    pipeline::TorchCpuNoise(seed).randn(noise);
    pipeline::TorchCpuNoise(seed + 1).randn(x0);
    Tensor latent = be.upload(HostTensor::from_f32({60}, x0));
    sampler->start_at(be, latent, be.upload(HostTensor::from_f32({60}, noise)), list[i].start);
    ASSERT_EQ(sampler->num_steps() - sampler->first_step(), r["calls"].get<int>()) << "model calls";
    const std::vector<float> want_t = o.values(r["timesteps"]);
    const std::vector<float> got_t(sampler->timesteps().begin() + sampler->first_step(), sampler->timesteps().end());
    EXPECT_LE(scaled_error(got_t, want_t), 2e-6) << "timesteps";
    for (int call = sampler->first_step(); call < sampler->num_steps(); ++call) {
      const std::vector<float> x = be.download(latent).to_f32();
      const float shift = 0.05f * std::cos(0.01f * sampler->timesteps()[static_cast<std::size_t>(call)]);
      std::vector<float> eps(x.size());
      for (std::size_t e = 0; e < eps.size(); ++e) eps[e] = 0.8f * x[e] + shift;
      sampler->step(be, be.upload(HostTensor::from_f32({60}, eps)), latent, call);
    }
    EXPECT_LE(scaled_error(be.download(latent).to_f32(), o.values(r["final"])), 2e-5) << "final latent";
  }
}

// End to end on the tiny random-weight pipeline (reference backend): A1111's UniPC
// through txt2img and the hires fix's second pass, each model call at the
// timestep the sampler gives. 7 steps run as 8 (A1111's timestep list); the
// hires pass (3 steps at denoise 0.5: a 6-step schedule) runs t_enc = 2 calls.
TEST(UniPcReference, A1111UniPcRunsTxt2ImgAndTheHiresPass) {
  NANSCOPE_REQUIRE_PYTHON();  // the tiny pipeline folder is made by an oracle
  struct Capture final : pipeline::RunObserver {
    std::vector<pipeline::StepReport> steps;
    std::vector<pipeline::RunReport> reports;
    void on_step(const pipeline::StepReport& r) override { steps.push_back(r); }
    void on_image(const pipeline::GeneratedImage&, const pipeline::RunReport& r) override { reports.push_back(r); }
  } cap;
  RunConfig c;
  c.model = test::tiny_sd_pipeline_dir().string();
  c.prompt = "a red circle on a blue background";
  c.steps = 7;
  c.seed = 5;
  c.device = "reference";
  c.set("sampler", "unipc");
  c.set("unipc.implementation", "a1111");
  c.set("unipc.order", "2");
  c.set("hires.scale", "2");
  c.set("hires.steps", "3");
  c.set("hires.denoise", "0.5");
  pipeline::Session session;
  session.generate(c, &cap);
  ASSERT_EQ(cap.reports.size(), 1u);
  EXPECT_EQ(cap.reports[0].outcome, "clean");
  int first = 0, second = 0;
  for (const auto& r : cap.steps) (r.pass == 1 ? first : second) += 1;
  EXPECT_EQ(first, 8);
  EXPECT_EQ(second, 2);
  ASSERT_FALSE(cap.steps.empty());
  EXPECT_FLOAT_EQ(cap.steps[0].timestep, 999.0f);
  // (t - 1/1000) * 1000 for t = linspace(1, 1/1000, 9)[1]: 874.125, not an integer.
  EXPECT_NEAR(cap.steps[1].timestep, 874.125f, 1e-3);
  // The hires pass starts at t = timesteps[t_enc - 1] / 1000 + 1/1000 of A1111's 6-step list: 167 + 1.
  EXPECT_NEAR(cap.steps[8].timestep, 167.0f, 1e-3);
}

// The variants differ, and so do A1111's steps from diffusers' (why the reference is needed).
TEST(UniPcReference, VariantsAndImplementationsGiveDifferentSchedulesOrResults) {
  auto make = [](const RunConfig& run) {
    auto s = pipeline::make_sampler(
        SchedulerConfig::from_json(kSd15, SamplerId::unipc, "test config").with_schedule(run.schedule).with_unipc(run));
    s->set_timesteps(10);
    return s;
  };
  const auto a1111 = make(unipc_run("a1111", "auto", 0, "auto", "time_uniform"));
  const auto diffusers = make(unipc_run("diffusers", "auto", 0, "auto", "time_uniform"));
  EXPECT_EQ(a1111->num_steps(), 10);
  EXPECT_FLOAT_EQ(a1111->timesteps()[0], 999.0f);
  EXPECT_NE(a1111->timesteps()[1], diffusers->timesteps()[1]);  // 899.1 vs 900: continuous time
  auto final_latent = [](pipeline::Sampler& s) {
    std::vector<float> x(12, 1.0f), m(12);
    for (int call = 0; call < s.num_steps(); ++call) {
      for (std::size_t e = 0; e < x.size(); ++e) m[e] = 0.8f * x[e] + 0.01f * static_cast<float>(e);
      s.step(m, x, call);
    }
    return x;
  };
  auto bh1 = make(unipc_run("a1111", "bh1", 3, "on", "time_uniform"));
  auto bh2 = make(unipc_run("a1111", "bh2", 3, "on", "time_uniform"));
  EXPECT_GT(scaled_error(final_latent(*bh1), final_latent(*bh2)), 1e-4);
  // Out of range, and what A1111 itself refuses.
  EXPECT_THROW(make(unipc_run("a1111", "bh1", 3, "on", "time_uniform"))->set_timesteps(2), ConfigError);
  EXPECT_THROW(make(unipc_run("comfyui", "bh1", 0, "auto", "time_uniform"))->set_timesteps(1), ConfigError);
  RunConfig bad;
  EXPECT_THROW(bad.set("unipc.order", "4"), ConfigError);
  EXPECT_THROW(bad.set("unipc.variant", "vary_coeff"), ConfigError);
  EXPECT_EQ(pipeline::a1111_unipc_steps(30), 31);
  EXPECT_EQ(pipeline::a1111_unipc_steps(7), 8);
  EXPECT_EQ(pipeline::a1111_unipc_steps(20), 20);
}

// unipc.variant / unipc.order reach diffusers' UniPCMultistepScheduler (solver_type,
// solver_order): the same runs as scheduler_oracle.py's, within its 1e-5.
TEST(UniPcReference, SettingsReachDiffusersUniPc) {
  NANSCOPE_REQUIRE_PYTHON();
  json cases = json::array();
  std::vector<RunConfig> runs;
  for (const std::string variant : {"bh1", "bh2"}) {
    json config = kSd15;
    config["solver_type"] = variant;
    config["solver_order"] = 3;
    // bh1 with a final sigma of 0 is NaN in diffusers 0.31 (test_schedulers.cpp); compare at sigma_min.
    config["final_sigmas_type"] = "sigma_min";
    cases.push_back({{"kind", "unipc"},
                     {"config", config},
                     {"steps", 9},
                     {"run_steps", 1000},
                     {"shape", {1, 4, 3, 3}},
                     {"seed", 4100 + static_cast<int>(cases.size())}});
    runs.push_back(unipc_run("diffusers", variant, 3, "auto", "time_uniform"));
  }
  const Oracle o = run_oracle("scheduler_oracle.py", cases);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(cases[i].dump());
    json plain = kSd15;
    plain["final_sigmas_type"] = "sigma_min";
    const SchedulerConfig sc = SchedulerConfig::from_json(plain, SamplerId::unipc, "test config").with_unipc(runs[i]);
    EXPECT_EQ(sc.solver_order, 3);
    EXPECT_EQ(sc.solver_type, i == 0 ? pipeline::DpmSolverType::bh1 : pipeline::DpmSolverType::bh2);
    auto s = pipeline::make_sampler(sc);
    s->set_timesteps(9);
    const json& r = o.response["cases"][i];
    ASSERT_EQ(s->num_steps(), static_cast<int>(r["latents"].size()));
    pipeline::TorchCpuNoise noise(cases[i]["seed"].get<std::uint64_t>());
    std::vector<float> latent(36);
    noise.randn(latent);
    for (int step = 0; step < s->num_steps(); ++step) {
      s->step(o.values(r["model_outputs"][step]), latent, step);
      ASSERT_LE(scaled_error(latent, o.values(r["latents"][step])), 1e-5) << "step " << step;
    }
  }
}

TEST(UniPcNames, A1111AndComfyUiOptionsMapOntoSettings) {
  auto sets_of = [](const UniPcMapping& m) {
    RunConfig c;
    for (const auto& [k, v] : m.sets) c.set(k, v);
    return c;
  };
  const RunConfig a = sets_of(unipc_settings_from_a1111("", "", "", ""));
  EXPECT_EQ(a.unipc_implementation, "a1111");
  EXPECT_EQ(a.unipc_variant, "auto");
  const RunConfig b = sets_of(unipc_settings_from_a1111("bh2", "logSNR", "2", "False"));
  EXPECT_EQ(b.unipc_variant, "bh2");
  EXPECT_EQ(b.unipc_skip_type, "logSNR");
  EXPECT_EQ(b.unipc_order, 2);
  EXPECT_EQ(b.unipc_lower_order_final, "off");
  const UniPcMapping v = unipc_settings_from_a1111("vary_coeff", "", "7", "");
  ASSERT_EQ(v.not_reproducible.size(), 2u);
  EXPECT_NE(v.not_reproducible[0].find("vary_coeff"), std::string::npos);
  EXPECT_NE(v.not_reproducible[1].find("order 7"), std::string::npos);
  EXPECT_EQ(sets_of(unipc_settings_from_comfy("uni_pc_bh2")).unipc_variant, "bh2");
  EXPECT_EQ(sets_of(unipc_settings_from_comfy("uni_pc")).unipc_variant, "bh1");
  EXPECT_EQ(sets_of(unipc_settings_from_comfy("uni_pc")).unipc_implementation, "comfyui");
  const auto choice = sampler_from_comfy("uni_pc_bh2", "karras");
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->sampler, SamplerId::unipc);
  EXPECT_EQ(choice->schedule, ScheduleId::karras);
}

TEST(UniPcNames, ReproduceRunsEachToolsUniPcAndEnsd) {
  studies::ReproducePlan plan;
  plan.generation = foreign_from_a1111(
      "a cat\nSteps: 20, Sampler: UniPC, CFG scale: 7, Seed: 3, Size: 64x64, UniPC variant: bh2, UniPC skip type: "
      "logSNR, UniPC order: 2, UniPC lower order final: False, ENSD: 31337, RNG: CPU");
  EXPECT_EQ(plan.generation.unipc_variant, "bh2");
  EXPECT_TRUE(plan.generation.unknown_fields.empty());
  studies::map_onto_run_config(plan);
  const RunConfig& c = plan.config;
  EXPECT_EQ(c.sampler, SamplerId::unipc);
  EXPECT_EQ(c.unipc_implementation, "a1111");
  EXPECT_EQ(c.unipc_variant, "bh2");
  EXPECT_EQ(c.unipc_skip_type, "logSNR");
  EXPECT_EQ(c.unipc_order, 2);
  EXPECT_EQ(c.unipc_lower_order_final, "off");
  EXPECT_EQ(c.eta_seed_delta, 31337);
  for (const auto& n : plan.not_reproducible) {
    EXPECT_NE(n.what, "ENSD") << n.reason;
    EXPECT_NE(n.what, "UniPC") << n.reason;
  }

  // A vary_coeff image says what it cannot run.
  studies::ReproducePlan vary;
  vary.generation = foreign_from_a1111("a cat\nSteps: 20, Sampler: UniPC, Seed: 3, UniPC variant: vary_coeff");
  studies::map_onto_run_config(vary);
  bool said = false;
  for (const auto& n : vary.not_reproducible)
    said = said || (n.what == "UniPC" && n.reason.find("vary_coeff") != std::string::npos);
  EXPECT_TRUE(said);
  EXPECT_EQ(vary.config.unipc_implementation, "a1111");

  const json graph = {
      {"3",
       {{"class_type", "KSampler"},
        {"inputs",
         {{"seed", 5},
          {"steps", 12},
          {"cfg", 6.0},
          {"sampler_name", "uni_pc_bh2"},
          {"scheduler", "karras"},
          {"denoise", 1.0},
          {"model", json::array({"4", 0})},
          {"positive", json::array({"6", 0})},
          {"negative", json::array({"7", 0})},
          {"latent_image", json::array({"5", 0})}}}}},
      {"4", {{"class_type", "CheckpointLoaderSimple"}, {"inputs", {{"ckpt_name", "m.safetensors"}}}}},
      {"5", {{"class_type", "EmptyLatentImage"}, {"inputs", {{"width", 64}, {"height", 64}, {"batch_size", 1}}}}},
      {"6", {{"class_type", "CLIPTextEncode"}, {"inputs", {{"text", "a"}, {"clip", json::array({"4", 1})}}}}},
      {"7", {{"class_type", "CLIPTextEncode"}, {"inputs", {{"text", ""}, {"clip", json::array({"4", 1})}}}}}};
  studies::ReproducePlan comfy;
  comfy.generation = foreign_from_comfyui(graph.dump());
  studies::map_onto_run_config(comfy);
  EXPECT_EQ(comfy.config.sampler, SamplerId::unipc);
  EXPECT_EQ(comfy.config.schedule, ScheduleId::karras);
  EXPECT_EQ(comfy.config.unipc_implementation, "comfyui");
  EXPECT_EQ(comfy.config.unipc_variant, "bh2");
}

}  // namespace
}  // namespace nanscope
