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

namespace nanscope::pipeline {

// The samplers, each matching one diffusers 0.31 scheduler class.
enum class SamplerKind {
  kEuler,           // EulerDiscreteScheduler
  kEulerAncestral,  // EulerAncestralDiscreteScheduler
  kDdim,            // DDIMScheduler (eta = 0)
  kDpmPp2m,         // DPMSolverMultistepScheduler, algorithm_type dpmsolver++
};

// "euler", "euler_a", "ddim", "dpmpp_2m"; the diffusers class names are accepted too.
// Throws ConfigError listing the known names.
SamplerKind sampler_kind_from_string(std::string_view name);
std::string_view to_string(SamplerKind kind);
std::string_view diffusers_class_name(SamplerKind kind);

enum class BetaSchedule { kLinear, kScaledLinear, kSquaredCosCapV2 };
enum class PredictionType { kEpsilon, kVPrediction, kSample };
enum class TimestepSpacing { kLinspace, kLeading, kTrailing };
enum class FinalSigmas { kZero, kSigmaMin };
enum class DpmSolverType { kMidpoint, kHeun };

struct SchedulerConfig {
  SamplerKind kind = SamplerKind::kEuler;
  std::string origin = "scheduler config";  // file name for error messages

  // Shared by all samplers.
  int num_train_timesteps = 1000;
  double beta_start = 0.0001;
  double beta_end = 0.02;
  BetaSchedule beta_schedule = BetaSchedule::kLinear;
  std::vector<float> trained_betas;  // when not empty, replaces the schedule (num_train_timesteps entries)
  PredictionType prediction_type = PredictionType::kEpsilon;
  TimestepSpacing timestep_spacing = TimestepSpacing::kLinspace;
  int steps_offset = 0;
  bool rescale_betas_zero_snr = false;

  // Euler and DPM++.
  bool use_karras_sigmas = false;
  std::optional<double> sigma_min;  // Euler only (DPM++ has no such key in 0.31)
  std::optional<double> sigma_max;
  FinalSigmas final_sigmas_type = FinalSigmas::kZero;

  // Euler: timestep_type "continuous" feeds 0.25*log(sigma) to the model (v-prediction only).
  bool continuous_timesteps = false;

  // DDIM.
  bool clip_sample = true;
  double clip_sample_range = 1.0;
  bool set_alpha_to_one = true;

  // DPM++.
  int solver_order = 2;
  DpmSolverType solver_type = DpmSolverType::kMidpoint;
  bool lower_order_final = true;
  bool euler_at_final = false;
  double lambda_min_clipped = -std::numeric_limits<double>::infinity();  // no clipping

  // The defaults of the diffusers class behind `kind`.
  static SchedulerConfig defaults(SamplerKind kind);

  // Parses a scheduler_config.json object for `kind`. `origin` names the file in errors.
  static SchedulerConfig from_json(const nlohmann::json& j, SamplerKind kind,
                                   const std::string& origin = "scheduler_config.json");
};

std::string_view to_string(PredictionType p);
std::string_view to_string(TimestepSpacing s);
std::string_view to_string(BetaSchedule b);

}  // namespace nanscope::pipeline
