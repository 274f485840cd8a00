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
// and dpmpp_2m_sde (DPMSolverMultistepScheduler, algorithm_type dpmsolver++ and
// sde-dpmsolver++), dpmpp_sde (DPMSolverSDEScheduler), heun
// (HeunDiscreteScheduler), lms (LMSDiscreteScheduler), ddpm (DDPMScheduler),
// lcm (LCMScheduler), unipc (UniPCMultistepScheduler, predict_x0, bh1/bh2).

// The sampler names ("euler", ..., and "dpmpp_2m_karras", read as dpmpp_2m) or
// the diffusers class names. Throws ConfigError listing the known names.
SamplerId sampler_from_name(std::string_view name);
std::string_view diffusers_class_name(SamplerId sampler);
// DPM-Solver++ multistep (2M), deterministic or SDE.
constexpr bool is_dpmpp(SamplerId s) { return s == SamplerId::dpmpp_2m || s == SamplerId::dpmpp_2m_sde; }
// Samplers that work on a sigma schedule (any ScheduleId applies to them); the
// others (ddim, ddpm, lcm) step between discrete timesteps.
constexpr bool is_sigma_sampler(SamplerId s) {
  return s == SamplerId::euler || s == SamplerId::euler_a || s == SamplerId::heun || s == SamplerId::lms ||
         s == SamplerId::dpmpp_sde || s == SamplerId::unipc || is_dpmpp(s);
}

enum class BetaSchedule { linear, scaled_linear, squaredcos_cap_v2 };
enum class PredictionType { epsilon, v_prediction, sample };
enum class TimestepSpacing { linspace, leading, trailing };
enum class FinalSigmas { zero, sigma_min };
enum class DpmSolverType { midpoint, heun, bh1, bh2 };  // bh1, bh2: UniPC
// Which UniPC code a unipc sampler follows (pipeline/unipc_reference.hpp):
// diffusers' UniPCMultistepScheduler, or the UniPC reference implementation
// (wl-zhao/UniPC uni_pc.py) as A1111's "UniPC" or ComfyUI's uni_pc run it.
enum class UniPcImpl { diffusers, a1111, comfyui };
// The reference's get_time_steps skip_type (A1111's uni_pc_skip_type).
enum class UniPcSkip { time_uniform, time_quadratic, log_snr };

struct SchedulerConfig {
  SamplerId kind = SamplerId::euler;
  // The run's schedule. class_default keeps what the file says; karras and
  // exponential set use_karras_sigmas / use_exponential_sigmas (with_schedule()).
  ScheduleId schedule = ScheduleId::class_default;
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

  // The sigma samplers.
  bool use_karras_sigmas = false;
  bool use_exponential_sigmas = false;
  std::optional<double> sigma_min;  // Euler only (DPM++ has no such key in 0.31)
  std::optional<double> sigma_max;
  FinalSigmas final_sigmas_type = FinalSigmas::zero;

  // Euler: timestep_type "continuous" feeds 0.25*log(sigma) to the model (v-prediction only).
  bool continuous_timesteps = false;

  // DDPM, LCM: the variance (DDPM "fixed_small") and LCM's boundary-condition scalings.
  int original_inference_steps = 50;  // LCM
  double timestep_scaling = 10.0;     // LCM

  // DDIM, DDPM, LCM.
  bool clip_sample = true;
  double clip_sample_range = 1.0;
  bool set_alpha_to_one = true;

  // DPM++.
  int solver_order = 2;
  DpmSolverType solver_type = DpmSolverType::midpoint;
  bool lower_order_final = true;
  bool euler_at_final = false;
  double lambda_min_clipped = -std::numeric_limits<double>::infinity();  // no clipping

  // UniPC: solver_order, solver_type (bh1/bh2) and lower_order_final above, and these.
  UniPcImpl unipc_impl = UniPcImpl::diffusers;
  UniPcSkip unipc_skip = UniPcSkip::time_uniform;
  // A1111's UniPC starting mid-schedule: true in the hires fix's second pass
  // (t_enc = steps - 1 model calls), false in img2img (t_enc = the steps left).
  bool unipc_hires_pass = false;

  // The defaults of the diffusers class behind `kind`.
  static SchedulerConfig defaults(SamplerId kind);

  // Parses a scheduler_config.json object for `kind`. `origin` names the file in errors.
  static SchedulerConfig from_json(const nlohmann::json& j, SamplerId kind,
                                   const std::string& origin = "scheduler_config.json");

  // This config with the run's schedule: karras and exponential switch on the
  // class's own option, the others replace the sigmas (pipeline/schedule.hpp).
  // Throws ConfigError when the sampler steps between timesteps and the
  // schedule is not default.
  SchedulerConfig with_schedule(ScheduleId s) const;

  // This config with the run's unipc.* settings (kind unipc; other kinds are
  // returned unchanged): the implementation, and variant / order /
  // lower_order_final where the run sets them ("auto": diffusers keeps this
  // config's values, A1111 and ComfyUI take their own defaults: bh1, order 3,
  // lower order final). Throws ConfigError for a value it does not know.
  SchedulerConfig with_unipc(const RunConfig& run) const;
};

std::string_view to_string(PredictionType p);
std::string_view to_string(TimestepSpacing s);
std::string_view to_string(BetaSchedule b);

}  // namespace nanscope::pipeline
