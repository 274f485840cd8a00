// Samplers against the installed diffusers 0.31 schedulers (tests/oracles/
// scheduler_oracle.py, one python process for the whole matrix):
//  - timesteps, sigmas and init_noise_sigma for every sampler x beta schedule x
//    spacing x zero-SNR rescale x Karras x step count, within 1e-6 relative;
//  - whole sampling runs on the same random model outputs, the initial latent drawn
//    by TorchCpuNoise from the seed diffusers' generator gets (bit-exact) and the
//    latents after every step within 1e-5 of max|latent|, Euler ancestral drawing its
//    per-step noise from the same generator;
//  - config parsing: class defaults, errors that name the key.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/scheduler.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

using nlohmann::json;

using pipeline::SchedulerConfig;

// ---- the oracle round trip ----

struct Oracle {
  json response;
  std::vector<float> blob;

  std::vector<float> values(const json& ref) const {
    const auto off = ref.at("offset").get<std::size_t>();
    const auto n = ref.at("size").get<std::size_t>();
    return {blob.begin() + static_cast<std::ptrdiff_t>(off), blob.begin() + static_cast<std::ptrdiff_t>(off + n)};
  }
};

Oracle run_oracle(const json& cases) {
  test::TempDir dir;
  std::ofstream(dir / "request.json") << json{{"cases", cases}}.dump();
  test::run_oracle("scheduler_oracle.py",
                   {(dir / "request.json").string(), (dir / "response.json").string(), (dir / "blob.f32").string()});
  Oracle o;
  o.response = json::parse(std::ifstream(dir / "response.json"));
  std::ifstream in(dir / "blob.f32", std::ios::binary | std::ios::ate);
  o.blob.resize(static_cast<std::size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(o.blob.data()), static_cast<std::streamsize>(o.blob.size() * sizeof(float)));
  return o;
}

std::string describe(const json& c) { return c.at("kind").get<std::string>() + " " + c.dump(); }

// |got - want| <= tol * |want| elementwise, NaN and Inf matching exactly.
::testing::AssertionResult close_rel(const std::vector<float>& got, const std::vector<float>& want, double tol,
                                     double* worst = nullptr) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (!std::isfinite(w) || !std::isfinite(g)) {
      if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]) &&
          !(std::isnan(g) && std::isnan(w))) {
        return ::testing::AssertionFailure() << "[" << i << "] " << g << " vs " << w;
      }
      continue;
    }
    const double err = std::fabs(g - w) / std::max(std::fabs(w), 1e-30);
    if (worst) *worst = std::max(*worst, w == 0 && g == 0 ? 0.0 : err);
    if (std::fabs(g - w) > tol * std::fabs(w)) {
      return ::testing::AssertionFailure() << "[" << i << "] " << g << " vs " << w << " (rel " << err << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// max|got - want| <= tol * max|want|, NaN where want has NaN.
::testing::AssertionResult close_scaled(const std::vector<float>& got, const std::vector<float>& want, double tol,
                                        double* worst) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  double scale = 0, max_err = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i])) {
      return ::testing::AssertionFailure() << "[" << i << "] " << got[i] << " vs " << want[i];
    }
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(want[i])) continue;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= max_err)) {
      max_err = err;
      at = i;
    }
  }
  const double rel = scale > 0 ? max_err / scale : max_err;
  *worst = std::max(*worst, rel);
  if (!(rel <= tol)) {
    return ::testing::AssertionFailure() << "max error " << max_err << " at [" << at << "] (" << got[at] << " vs "
                                         << want[at] << "), " << rel << " of max|want| " << scale;
  }
  return ::testing::AssertionSuccess();
}

std::unique_ptr<pipeline::Sampler> make(const json& c) {
  const SamplerId kind = pipeline::sampler_from_name(c.at("kind").get<std::string>());
  return pipeline::make_sampler(SchedulerConfig::from_json(c.at("config"), kind, "test config"));
}

// One whole sampling run against the oracle's: the initial latent from
// TorchCpuNoise (the generator diffusers uses), every model call's input, the
// latent after it and the x0 prediction. Returns false after a failure.
bool check_run(pipeline::Sampler& sampler, const Oracle& o, const json& c, const json& r, double& worst,
               double& worst_x0, double& worst_in) {
  EXPECT_EQ(sampler.num_steps(), static_cast<int>(r["latents"].size()));
  if (sampler.num_steps() != static_cast<int>(r["latents"].size())) return false;
  pipeline::TorchCpuNoise noise(c["seed"].get<std::uint64_t>());
  std::vector<float> latent(o.values(r["initial"]).size());
  noise.randn(latent);
  for (float& v : latent) v = v * sampler.init_noise_sigma();
  EXPECT_TRUE(close_rel(latent, o.values(r["initial"]), 0.0)) << "initial latent";
  std::vector<float> denoised(latent.size());
  for (int step = 0; step < sampler.num_steps(); ++step) {
    SCOPED_TRACE("model call " + std::to_string(step));
    std::vector<float> model_input = latent;
    sampler.scale_model_input(model_input, step);
    const bool in_ok = close_scaled(model_input, o.values(r["model_inputs"][step]), 1e-6, &worst_in);
    EXPECT_TRUE(in_ok) << "model input";
    sampler.step(o.values(r["model_outputs"][step]), latent, step, &noise, denoised);
    const auto ok = close_scaled(latent, o.values(r["latents"][step]), 1e-5, &worst);
    EXPECT_TRUE(ok) << "latent";
    if (!in_ok || !ok) return false;
    if (!r["denoised"][step].is_null()) {
      const auto x0_ok = close_scaled(denoised, o.values(r["denoised"][step]), 1e-5, &worst_x0);
      EXPECT_TRUE(x0_ok) << "denoised";
      if (!x0_ok) return false;
    }
  }
  return true;
}

// ---- the case matrix ----

json beta_config(const std::string& schedule) {
  if (schedule == "linear") return {{"beta_schedule", "linear"}, {"beta_start", 0.0001}, {"beta_end", 0.02}};
  if (schedule == "scaled_linear") {
    return {{"beta_schedule", "scaled_linear"}, {"beta_start", 0.00085}, {"beta_end", 0.012}};
  }
  return {{"beta_schedule", "squaredcos_cap_v2"}};
}

json schedule_cases() {
  json cases = json::array();
  const std::vector<int> step_counts = {1, 2, 3, 7, 20, 25, 50, 61, 1000};
  for (std::string kind : {"euler", "euler_a", "ddim", "dpmpp_2m"}) {
    const bool has_karras = kind == "euler" || kind == "dpmpp_2m";
    for (std::string beta : {"linear", "scaled_linear", "squaredcos_cap_v2"}) {
      for (std::string spacing : {"linspace", "leading", "trailing"}) {
        for (bool rescale : {false, true}) {
          for (bool karras : {false, true}) {
            if (karras && !has_karras) continue;
            json config = beta_config(beta);
            config["timestep_spacing"] = spacing;
            config["steps_offset"] = spacing == "leading" ? 1 : 0;
            config["rescale_betas_zero_snr"] = rescale;
            config["prediction_type"] = rescale ? "v_prediction" : "epsilon";
            config["use_karras_sigmas"] = karras;
            for (int steps : step_counts) cases.push_back({{"kind", kind}, {"config", config}, {"steps", steps}});
          }
        }
      }
    }
  }
  // Options beyond the grid.
  const json sd15 = {{"beta_schedule", "scaled_linear"},
                     {"beta_start", 0.00085},
                     {"beta_end", 0.012},
                     {"steps_offset", 1},
                     {"clip_sample", false},
                     {"set_alpha_to_one", false},
                     {"skip_prk_steps", true},
                     {"_class_name", "PNDMScheduler"},
                     {"trained_betas", nullptr}};
  for (int steps : {1, 20, 50}) {
    for (std::string kind : {"euler", "euler_a", "ddim", "dpmpp_2m"}) {
      cases.push_back({{"kind", kind}, {"config", sd15}, {"steps", steps}});
    }
    json c = sd15;
    c["final_sigmas_type"] = "sigma_min";
    cases.push_back({{"kind", "euler"}, {"config", c}, {"steps", steps}});
    cases.push_back({{"kind", "dpmpp_2m"}, {"config", c}, {"steps", steps}});
    c["use_karras_sigmas"] = true;
    c["sigma_min"] = 0.1;
    c["sigma_max"] = 10.0;
    cases.push_back({{"kind", "euler"}, {"config", c}, {"steps", steps}});
    cases.push_back({{"kind", "dpmpp_2m"}, {"config", c}, {"steps", steps}});
    json d = sd15;
    d["lambda_min_clipped"] = -5.1;
    for (std::string spacing : {"linspace", "leading", "trailing"}) {
      d["timestep_spacing"] = spacing;
      cases.push_back({{"kind", "dpmpp_2m"}, {"config", d}, {"steps", steps}});
    }
    json e = sd15;
    e["prediction_type"] = "v_prediction";
    e["timestep_type"] = "continuous";
    cases.push_back({{"kind", "euler"}, {"config", e}, {"steps", steps}});
    json f = sd15;
    f["set_alpha_to_one"] = true;
    f["timestep_spacing"] = "linspace";
    cases.push_back({{"kind", "ddim"}, {"config", f}, {"steps", steps}});
  }
  return cases;
}

json run_cases() {
  json cases = json::array();
  auto add = [&](const std::string& kind, json config, int steps, std::vector<int> shape = {1, 4, 16, 16}) {
    cases.push_back({{"kind", kind},
                     {"config", std::move(config)},
                     {"steps", steps},
                     {"run_steps", 1000},
                     {"shape", shape},
                     {"seed", 1000 + static_cast<int>(cases.size())}});
  };
  const json sd15 = {{"beta_schedule", "scaled_linear"},
                     {"beta_start", 0.00085},
                     {"beta_end", 0.012},
                     {"steps_offset", 1},
                     {"clip_sample", false},
                     {"set_alpha_to_one", false}};
  // The shipped embedded model's setting: v-prediction, zero terminal SNR, trailing.
  json zsnr = {{"beta_schedule", "scaled_linear"},
               {"beta_start", 0.00085},
               {"beta_end", 0.012},
               {"prediction_type", "v_prediction"},
               {"rescale_betas_zero_snr", true},
               {"timestep_spacing", "trailing"},
               {"clip_sample", false}};
  for (std::string kind : {"euler", "euler_a", "ddim", "dpmpp_2m"}) {
    add(kind, sd15, 20);
    add(kind, zsnr, 20);
    add(kind, zsnr, 7);
    add(kind, zsnr, 1);
    add(kind, {{"beta_schedule", "linear"}}, 25);
    add(kind, {{"beta_schedule", "squaredcos_cap_v2"}, {"timestep_spacing", "trailing"}}, 2);
    add(kind, sd15, 10, {2, 4, 8, 8});
    if (kind != "euler_a") {
      json s = sd15;
      s["prediction_type"] = "sample";
      add(kind, s, 5);
    }
  }
  for (std::string kind : {"euler", "dpmpp_2m"}) {
    json k = sd15;
    k["use_karras_sigmas"] = true;
    add(kind, k, 20);
    k["prediction_type"] = "v_prediction";
    add(kind, k, 12);
  }
  json dpm = sd15;
  add("dpmpp_2m", dpm, 14);  // lower-order second-to-last and last steps (< 15 steps)
  add("dpmpp_2m", dpm, 30);
  dpm["solver_order"] = 3;
  add("dpmpp_2m", dpm, 20);
  dpm["solver_order"] = 2;
  dpm["solver_type"] = "heun";
  add("dpmpp_2m", dpm, 20);
  dpm["solver_type"] = "midpoint";
  dpm["final_sigmas_type"] = "sigma_min";
  add("dpmpp_2m", dpm, 10);
  dpm["euler_at_final"] = true;
  add("dpmpp_2m", dpm, 20);
  json ddim = sd15;
  ddim["clip_sample"] = true;
  ddim["set_alpha_to_one"] = true;
  add("ddim", ddim, 10);
  json eul = zsnr;
  eul["timestep_type"] = "continuous";
  add("euler", eul, 8);
  return cases;
}

// ---- tests ----

TEST(Schedulers, TimestepsAndSigmasMatchDiffusers) {
  NANSCOPE_REQUIRE_PYTHON();
  const json cases = schedule_cases();
  const Oracle o = run_oracle(cases);
  log::set_level("error");  // the 61-step cases warn about diffusers' extra step, 24 times
  double worst_t = 0, worst_s = 0;
  int extra_step_cases = 0, refused = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const json& r = o.response["cases"][i];
    SCOPED_TRACE(describe(c));
    auto sampler = make(c);
    if (r.contains("error")) {  // a schedule diffusers cannot step through: we refuse it up front
      EXPECT_THROW(sampler->set_timesteps(c["steps"].get<int>()), ConfigError) << r["error"];
      ++refused;
      continue;
    }
    sampler->set_timesteps(c["steps"].get<int>());
    EXPECT_EQ(sampler->num_steps(), r["num_inference_steps"].get<int>());
    extra_step_cases += sampler->num_steps() != c["steps"].get<int>();
    EXPECT_TRUE(close_rel(sampler->timesteps(), o.values(r["timesteps"]), 1e-6, &worst_t)) << "timesteps";
    EXPECT_TRUE(close_rel(sampler->sigmas(), o.values(r["sigmas"]), 1e-6, &worst_s)) << "sigmas";
    const auto want_init = r["init_noise_sigma"].get<double>();
    EXPECT_NEAR(sampler->init_noise_sigma(), want_init, 1e-6 * want_init) << "init_noise_sigma";
    if (::testing::Test::HasFailure()) break;  // one case's detail is enough
  }
  EXPECT_GT(extra_step_cases, 0) << "the grid should include diffusers' trailing-spacing extra step (61 steps)";
  std::printf(
      "%zu schedule cases (%d refused like diffusers' step would fail); worst relative error: timesteps "
      "%.3g, sigmas %.3g\n",
      cases.size(), refused, worst_t, worst_s);
}

TEST(Schedulers, SamplingRunsMatchDiffusers) {
  NANSCOPE_REQUIRE_PYTHON();
  const json cases = run_cases();
  const Oracle o = run_oracle(cases);
  double worst = 0, worst_x0 = 0, worst_in = 0;
  std::map<std::string, double> worst_by_kind;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const json& r = o.response["cases"][i];
    SCOPED_TRACE(describe(c));
    auto sampler = make(c);
    sampler->set_timesteps(c["steps"].get<int>());
    ASSERT_EQ(sampler->num_steps(), static_cast<int>(r["latents"].size()));

    // The initial latent: the same generator stream diffusers uses, times init_noise_sigma.
    pipeline::TorchCpuNoise noise(c["seed"].get<std::uint64_t>());
    std::vector<float> latent(o.values(r["initial"]).size());
    noise.randn(latent);
    for (float& v : latent) v = v * sampler->init_noise_sigma();
    const std::vector<float> want_initial = o.values(r["initial"]);
    ASSERT_TRUE(close_rel(latent, want_initial, 0.0)) << "initial latent";

    std::vector<float> denoised(latent.size());
    for (int step = 0; step < sampler->num_steps(); ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      std::vector<float> model_input = latent;
      sampler->scale_model_input(model_input, step);
      ASSERT_TRUE(close_scaled(model_input, o.values(r["model_inputs"][step]), 1e-6, &worst_in)) << "model input";
      const std::vector<float> model_output = o.values(r["model_outputs"][step]);
      sampler->step(model_output, latent, step, &noise, denoised);
      double& w = worst_by_kind[c["kind"].get<std::string>()];
      ASSERT_TRUE(close_scaled(latent, o.values(r["latents"][step]), 1e-5, &w)) << "latent";
      worst = std::max(worst, w);
      if (!r["denoised"][step].is_null()) {
        ASSERT_TRUE(close_scaled(denoised, o.values(r["denoised"][step]), 1e-5, &worst_x0)) << "denoised";
      }
    }
  }
  std::printf("%zu sampling runs; worst error in units of max|want|: latents %.3g, x0 %.3g, model input %.3g\n",
              cases.size(), worst, worst_x0, worst_in);
  for (const auto& [kind, w] : worst_by_kind) std::printf("  %s latents: %.3g\n", kind.c_str(), w);
}

// The samplers added for A1111 / ComfyUI images, against their diffusers 0.31
// classes: schedules (timesteps, sigmas, init_noise_sigma) and whole runs, the
// per-step noise of DPM++ 2M SDE, DDPM and LCM from the run's generator and DPM++
// SDE's Brownian-tree noise replaced by that generator's randn on both sides.
// Heun and DPM++ SDE run 2n-1 model calls for n steps. Tiny latents: ~2 s.
TEST(Schedulers, MoreSamplersMatchDiffusers) {
  NANSCOPE_REQUIRE_PYTHON();
  json cases = json::array();
  auto add = [&](const std::string& kind, json config, int steps) {
    cases.push_back({{"kind", kind},
                     {"config", std::move(config)},
                     {"steps", steps},
                     {"run_steps", 1000},
                     {"shape", {1, 4, 6, 6}},
                     {"seed", 2000 + static_cast<int>(cases.size())}});
  };
  const json sd15 = {{"beta_schedule", "scaled_linear"},
                     {"beta_start", 0.00085},
                     {"beta_end", 0.012},
                     {"steps_offset", 1},
                     {"clip_sample", false},
                     {"set_alpha_to_one", false}};
  for (std::string kind : {"heun", "lms", "dpmpp_sde", "dpmpp_2m_sde", "ddpm", "lcm", "unipc"}) {
    add(kind, sd15, 7);
    add(kind, sd15, 1);
    json v = sd15;
    v["prediction_type"] = "v_prediction";
    add(kind, v, 4);
  }
  for (std::string kind : {"euler", "heun", "lms", "dpmpp_sde"}) {
    for (std::string option : {"use_karras_sigmas", "use_exponential_sigmas"}) {
      if (kind == "euler" && option == "use_karras_sigmas") continue;  // in the grid above
      json k = sd15;
      k[option] = true;
      add(kind, k, 6);
    }
  }
  json lin = {{"beta_schedule", "linear"}, {"timestep_spacing", "leading"}, {"steps_offset", 1}};
  add("heun", lin, 5);
  add("lms", lin, 9);
  add("dpmpp_2m_sde", sd15, 16);  // second order all the way (no lower-order steps below 15)
  json uni = sd15;
  add("unipc", uni, 12);
  uni["solver_order"] = 3;
  add("unipc", uni, 10);
  uni["solver_type"] = "bh1";
  // bh1 ends in NaN in diffusers 0.31 with a final sigma of 0 (B(h) = -h = -inf times a
  // zero correction); we give the limit, x0. Compared where diffusers is finite:
  uni["final_sigmas_type"] = "sigma_min";
  add("unipc", uni, 8);
  uni.erase("final_sigmas_type");
  uni["solver_type"] = "bh2";
  uni["solver_order"] = 2;
  uni["use_karras_sigmas"] = true;
  add("unipc", uni, 6);
  json ddpm = sd15;
  ddpm["clip_sample"] = true;
  add("ddpm", ddpm, 10);
  add("lcm", json{{"beta_schedule", "scaled_linear"}, {"beta_start", 0.00085}, {"beta_end", 0.012}}, 4);
  const Oracle o = run_oracle(cases);
  double worst = 0, worst_x0 = 0, worst_in = 0, worst_t = 0, worst_s = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const json& r = o.response["cases"][i];
    SCOPED_TRACE(describe(c));
    auto sampler = make(c);
    sampler->set_timesteps(c["steps"].get<int>());
    ASSERT_EQ(sampler->num_steps(), r["num_inference_steps"].get<int>());
    // Timesteps in units of the largest: exponential sigmas end at t ~ 5e-8 in diffusers
    // (its float32 exp) and at 0 here, a difference no model sees.
    ASSERT_TRUE(close_scaled(sampler->timesteps(), o.values(r["timesteps"]), 1e-6, &worst_t)) << "timesteps";
    ASSERT_TRUE(close_rel(sampler->sigmas(), o.values(r["sigmas"]), 1e-6, &worst_s)) << "sigmas";
    const auto want_init = r["init_noise_sigma"].get<double>();
    ASSERT_NEAR(sampler->init_noise_sigma(), want_init, 1e-6 * want_init) << "init_noise_sigma";
    const bool two_calls = sampler->calls_per_step() == 2;
    if (two_calls) {
      EXPECT_EQ(sampler->num_steps(), 2 * c["steps"].get<int>() - 1);
    }
    sampler->set_timesteps(c["steps"].get<int>());
    if (!check_run(*sampler, o, c, r, worst, worst_x0, worst_in)) break;
  }
  std::printf(
      "%zu runs; worst: timesteps %.3g, sigmas %.3g (relative); latents %.3g, x0 %.3g, model input %.3g (of "
      "max|want|)\n",
      cases.size(), worst_t, worst_s, worst, worst_x0, worst_in);
}

// The k-diffusion / A1111 / ComfyUI schedules, and the samplers against
// k-diffusion's sampling functions (tests/oracles/kdiffusion_oracle.py) on the
// same test model: eps = 0.8 x_in + 0.05 cos(0.01 t), both sides computing it.
// The SDE samplers' noise comes from the same torch generator on both sides (in
// A1111 and ComfyUI it is Brownian-tree noise, which nothing reproduces).
TEST(Schedulers, KDiffusionSchedulesAndSamplers) {
  NANSCOPE_REQUIRE_PYTHON();
  const json sd15 = {{"beta_schedule", "scaled_linear"}, {"beta_start", 0.00085}, {"beta_end", 0.012}};
  struct Case {
    std::string schedule;
    int steps;
    std::string kdiff;  // k-diffusion's sample_<name>; "" for the schedule alone
    std::string ours;
  };
  const std::vector<Case> list = {
      {"normal", 10, "euler", "euler"},
      {"karras", 8, "euler_ancestral", "euler_a"},
      {"exponential", 7, "lms", "lms"},
      {"sgm_uniform", 6, "heun", "heun"},
      {"simple", 9, "dpmpp_2m", "dpmpp_2m"},
      {"karras", 16, "dpmpp_2m", "dpmpp_2m"},
      {"ddim_uniform", 8, "dpmpp_sde", "dpmpp_sde"},
      {"exponential", 10, "dpmpp_2m_sde", "dpmpp_2m_sde"},
      {"karras", 5, "dpmpp_sde", "dpmpp_sde"},
      {"normal", 1, "", "euler"},
      {"sgm_uniform", 25, "", "euler"},
      {"simple", 3, "", "euler"},
      {"ddim_uniform", 30, "", "euler"},
      {"exponential", 20, "", "euler"},
      {"karras", 12, "", "euler"},
  };
  json cases = json::array();
  for (std::size_t i = 0; i < list.size(); ++i) {
    cases.push_back({{"config", sd15},
                     {"schedule", list[i].schedule},
                     {"steps", list[i].steps},
                     {"sampler", list[i].kdiff},
                     {"shape", {1, 4, 5, 3}},
                     {"seed", 3000 + static_cast<int>(i)}});
  }
  test::TempDir dir;
  std::ofstream(dir / "request.json") << json{{"cases", cases}}.dump();
  test::run_oracle("kdiffusion_oracle.py",
                   {(dir / "request.json").string(), (dir / "response.json").string(), (dir / "blob.f32").string()});
  Oracle o;
  o.response = json::parse(std::ifstream(dir / "response.json"));
  {
    std::ifstream in(dir / "blob.f32", std::ios::binary | std::ios::ate);
    o.blob.resize(static_cast<std::size_t>(in.tellg()) / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(o.blob.data()), static_cast<std::streamsize>(o.blob.size() * sizeof(float)));
  }
  double worst_s = 0, worst = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Case& k = list[i];
    const json& r = o.response["cases"][i];
    SCOPED_TRACE(k.ours + " " + k.schedule + " " + std::to_string(k.steps) + " steps");
    const SamplerId kind = pipeline::sampler_from_name(k.ours);
    auto sampler = pipeline::make_sampler(
        SchedulerConfig::from_json(sd15, kind, "test config").with_schedule(*parse_schedule(k.schedule)));
    sampler->set_timesteps(k.steps);
    // The schedule: one sampler step per sigma (Heun and DPM++ SDE repeat each inner sigma).
    std::vector<float> steps_sigmas;
    for (int call = 0; call < sampler->num_steps(); call += sampler->calls_per_step()) {
      steps_sigmas.push_back(sampler->sigmas()[static_cast<std::size_t>(call)]);
    }
    steps_sigmas.push_back(sampler->sigmas().back());
    // karras: diffusers' float64 ramp against k-diffusion's float32 one (a few float ulps).
    ASSERT_TRUE(close_rel(steps_sigmas, o.values(r["sigmas"]), 5e-6, &worst_s)) << "sigmas";
    if (k.kdiff.empty()) continue;
    EXPECT_EQ(sampler->num_steps(), r["calls"].get<int>()) << "model calls";
    pipeline::TorchCpuNoise noise(cases[i]["seed"].get<std::uint64_t>());
    std::vector<float> latent(60);
    noise.randn(latent);
    const float s0 = sampler->sigmas().front();
    // k-diffusion starts from noise * sigma_0 in its x = x0 + sigma * eps space; DPM++
    // (diffusers' class) works on x / sqrt(sigma^2 + 1): the same state, rescaled.
    const float start = pipeline::is_dpmpp(kind) ? s0 / std::sqrt(s0 * s0 + 1.0f) : sampler->init_noise_sigma();
    for (float& v : latent) v = v * start;
    std::vector<float> eps(latent.size());
    for (int call = 0; call < sampler->num_steps(); ++call) {
      std::vector<float> x_in = latent;
      sampler->scale_model_input(x_in, call);
      const float t = sampler->timesteps()[static_cast<std::size_t>(call)];
      const float shift = 0.05f * std::cos(0.01f * t);
      for (std::size_t e = 0; e < eps.size(); ++e) eps[e] = 0.8f * x_in[e] + shift;
      sampler->step(eps, latent, call, &noise);
    }
    EXPECT_TRUE(close_scaled(latent, o.values(r["final"]), 1e-4, &worst)) << "final latent";
  }
  std::printf("%zu k-diffusion cases; worst: sigmas %.3g (relative), final latents %.3g (of max|want|)\n", list.size(),
              worst_s, worst);
}

TEST(Schedulers, DpmStepsMustRunInOrder) {
  auto s = pipeline::make_sampler(SchedulerConfig::defaults(SamplerId::dpmpp_2m));
  s->set_timesteps(5);
  std::vector<float> x(8, 1.0f), m(8, 0.5f);
  s->step(m, x, 0);
  EXPECT_THROW(s->step(m, x, 2), Error);
  s->set_timesteps(5);  // restarts
  EXPECT_NO_THROW(s->step(m, x, 0));
}

TEST(Schedulers, AncestralNeedsNoiseAndSizesMustMatch) {
  auto s = pipeline::make_sampler(SchedulerConfig::defaults(SamplerId::euler_a));
  std::vector<float> x(8, 1.0f), m(8, 0.5f), short_m(7, 0.5f);
  EXPECT_THROW(s->step(m, x, 0), Error);  // before set_timesteps
  s->set_timesteps(4);
  EXPECT_TRUE(s->uses_noise());
  EXPECT_THROW(s->step(m, x, 0), Error);  // no noise source
  pipeline::NanscopeNoise noise(1);
  EXPECT_THROW(s->step(short_m, x, 0, &noise), Error);
  EXPECT_THROW(s->step(m, x, 4, &noise), Error);
  EXPECT_NO_THROW(s->step(m, x, 0, &noise));
  EXPECT_THROW(s->set_timesteps(0), ConfigError);
  EXPECT_THROW(s->set_timesteps(1001), ConfigError);
}

TEST(SchedulerConfig, ClassDefaultsAndOverrides) {
  const json sd15 = {{"_class_name", "PNDMScheduler"},
                     {"beta_schedule", "scaled_linear"},
                     {"beta_start", 0.00085},
                     {"beta_end", 0.012},
                     {"steps_offset", 1},
                     {"skip_prk_steps", true},
                     {"trained_betas", nullptr},
                     {"thresholding", true}};  // thresholding is read by DDIM only
  const auto euler = SchedulerConfig::from_json(sd15, SamplerId::euler);
  EXPECT_EQ(euler.timestep_spacing, pipeline::TimestepSpacing::linspace);
  EXPECT_EQ(euler.beta_schedule, pipeline::BetaSchedule::scaled_linear);
  EXPECT_EQ(euler.steps_offset, 1);
  EXPECT_TRUE(euler.trained_betas.empty());
  EXPECT_EQ(SchedulerConfig::defaults(SamplerId::ddim).timestep_spacing, pipeline::TimestepSpacing::leading);
  EXPECT_TRUE(SchedulerConfig::defaults(SamplerId::ddim).clip_sample);
  EXPECT_EQ(pipeline::sampler_from_name("DPMSolverMultistepScheduler"), SamplerId::dpmpp_2m);
  EXPECT_EQ(pipeline::sampler_from_name("euler_a"), SamplerId::euler_a);
  EXPECT_EQ(pipeline::sampler_from_name("heun"), SamplerId::heun);
  EXPECT_EQ(pipeline::sampler_from_name("HeunDiscreteScheduler"), SamplerId::heun);
  EXPECT_EQ(pipeline::sampler_from_name("dpmpp_2m_karras"), SamplerId::dpmpp_2m);
  EXPECT_THROW(pipeline::sampler_from_name("plms"), ConfigError);
}

// Each bad value is a ConfigError whose message names the file and the key.
TEST(SchedulerConfig, ErrorsNameTheKey) {
  struct Bad {
    SamplerId kind;
    json config;
    std::string key;
  };
  const std::vector<Bad> bad = {
      {SamplerId::euler, {{"beta_schedule", "cosine"}}, "beta_schedule"},
      {SamplerId::euler, {{"beta_start", "small"}}, "beta_start"},
      {SamplerId::euler, {{"prediction_type", "noise"}}, "prediction_type"},
      {SamplerId::euler_a, {{"prediction_type", "sample"}}, "prediction_type"},
      {SamplerId::ddim, {{"timestep_spacing", "karras"}}, "timestep_spacing"},
      {SamplerId::ddim, {{"thresholding", true}}, "thresholding"},
      {SamplerId::euler, {{"interpolation_type", "log_linear"}}, "interpolation_type"},
      {SamplerId::dpmpp_2m_sde, {{"solver_order", 3}}, "solver_order"},
      {SamplerId::heun, {{"clip_sample", true}}, "clip_sample"},
      {SamplerId::ddpm, {{"variance_type", "learned"}}, "variance_type"},
      {SamplerId::dpmpp_2m, {{"solver_order", 4}}, "solver_order"},
      {SamplerId::dpmpp_2m, {{"use_karras_sigmas", "yes"}}, "use_karras_sigmas"},
      {SamplerId::euler, {{"num_train_timesteps", 1}}, "num_train_timesteps"},
      {SamplerId::euler, {{"trained_betas", {0.1, 0.2}}}, "trained_betas"},
      {SamplerId::euler, {{"steps_offset", -1}}, "steps_offset"},
  };
  for (const Bad& b : bad) {
    try {
      (void)SchedulerConfig::from_json(b.config, b.kind, "models/x/scheduler/scheduler_config.json");
      ADD_FAILURE() << "accepted " << b.config.dump();
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(b.key), std::string::npos) << what;
      EXPECT_NE(what.find("scheduler_config.json"), std::string::npos) << what;
    }
  }
  // The same keys are ignored by a class that does not read them (as diffusers does).
  EXPECT_NO_THROW(SchedulerConfig::from_json({{"thresholding", true}, {"algorithm_type", "x"}}, SamplerId::euler));
}

}  // namespace
}  // namespace nanscope
