#pragma once
// What a sampler is configured with: the keys of a diffusers scheduler_config.json
// that the chosen sampler's diffusers class reads, with that class's defaults for
// missing keys (diffusers' `from_config` does the same: a PNDM config loaded into
// EulerDiscreteScheduler keeps its betas and gets Euler's default spacing).
//
// Keys another scheduler class would read are ignored, as diffusers ignores them.
// A key the chosen class reads but whose value we do not implement (thresholding,
// exponential or beta sigmas, log-linear interpolation, SDE algorithms...) is a
// ConfigError naming the file, the key and the value, never a silent fallback.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.hpp"

namespace nanscope::pipeline {

// The samplers are config's SamplerId (config/run_config.hpp), each matching
// one diffusers 0.31 scheduler class: euler (EulerDiscreteScheduler), euler_a
// (EulerAncestralDiscreteScheduler), ddim (DDIMScheduler, eta = 0), dpmpp_2m
// and dpmpp_2m_karras (DPMSolverMultistepScheduler, algorithm_type
// dpmsolver++; the latter with use_karras_sigmas forced on).

// "euler", "euler_a", "ddim", "dpmpp_2m", "dpmpp_2m_karras"; the diffusers class names are accepted too.
// Throws ConfigError listing the known names.
SamplerId sampler_from_name(std::string_view name);
std::string_view diffusers_class_name(SamplerId sampler);
// DPM-Solver++ (2M), with or without Karras sigmas.
constexpr bool is_dpmpp(SamplerId s) { return s == SamplerId::dpmpp_2m || s == SamplerId::dpmpp_2m_karras; }

enum class BetaSchedule { linear, scaled_linear, squaredcos_cap_v2 };
enum class PredictionType { epsilon, v_prediction, sample };
enum class TimestepSpacing { linspace, leading, trailing };
enum class FinalSigmas { zero, sigma_min };
enum class DpmSolverType { midpoint, heun };

struct SchedulerConfig {
  SamplerId kind = SamplerId::euler;
  std::string origin = "scheduler config";  // file name for error messages

  // Shared by all samplers.
  int num_train_timesteps = 1000;
  double beta_start = 0.0001;
  double beta_end = 0.02;
  BetaSchedule beta_schedule = BetaSchedule::linear;
  std::vector<float> trained_betas;  // when not empty, replaces the schedule (num_train_timesteps entries)
  PredictionType prediction_type = PredictionType::epsilon;
  TimestepSpacing timestep_spacing = TimestepSpacing::linspace;
  int steps_offset = 0;
  bool rescale_betas_zero_snr = false;

  // Euler and DPM++.
  bool use_karras_sigmas = false;
  std::optional<double> sigma_min;  // Euler only (DPM++ has no such key in 0.31)
  std::optional<double> sigma_max;
  FinalSigmas final_sigmas_type = FinalSigmas::zero;

  // Euler: timestep_type "continuous" feeds 0.25*log(sigma) to the model (v-prediction only).
  bool continuous_timesteps = false;

  // DDIM.
  bool clip_sample = true;
  double clip_sample_range = 1.0;
  bool set_alpha_to_one = true;

  // DPM++.
  int solver_order = 2;
  DpmSolverType solver_type = DpmSolverType::midpoint;
  bool lower_order_final = true;
  bool euler_at_final = false;
  double lambda_min_clipped = -std::numeric_limits<double>::infinity();  // no clipping

  // The defaults of the diffusers class behind `kind`.
  static SchedulerConfig defaults(SamplerId kind);

  // Parses a scheduler_config.json object for `kind`. `origin` names the file in errors.
  static SchedulerConfig from_json(const nlohmann::json& j, SamplerId kind,
                                   const std::string& origin = "scheduler_config.json");
};

std::string_view to_string(PredictionType p);
std::string_view to_string(TimestepSpacing s);
std::string_view to_string(BetaSchedule b);

}  // namespace nanscope::pipeline
