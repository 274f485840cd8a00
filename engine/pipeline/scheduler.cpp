#include "pipeline/scheduler.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/samplers.hpp"
#include "pipeline/schedule.hpp"

namespace nanscope::pipeline {

Sampler::Sampler(SchedulerConfig config) : config_(std::move(config)) {
  // Euler, Euler ancestral and DPM++ keep the zero-SNR terminal alpha finite; DDIM does not.
  alphas_cumprod_ = schedule::alphas_cumprod(config_, config_.kind != SamplerKind::kDdim);
  train_sigmas_ = schedule::training_sigmas(alphas_cumprod_);
}

void Sampler::set_timesteps(int steps) {
  if (steps < 1 || steps > config_.num_train_timesteps) {
    throw ConfigError(std::string(to_string(kind())) + ": steps = " + std::to_string(steps) + " must be 1 to " +
                      std::to_string(config_.num_train_timesteps) + " (num_train_timesteps of " + config_.origin +
                      ")");
  }
  requested_steps_ = steps;
  timesteps_.clear();
  sigmas_.clear();
  make_schedule(steps);
  reset_state();
  if (num_steps() != steps) {
    log::warn("{}: {} spacing with {} steps gives {} timesteps in diffusers (last t = {}); running them all, as "
              "diffusers does",
              to_string(kind()), to_string(config_.timestep_spacing), steps, num_steps(), timesteps_.back());
  }
}

float Sampler::model_input_scale(int step_index) const {
  if (!scales_model_input()) return 1.0f;
  const float sigma = sigmas_.at(static_cast<std::size_t>(step_index));
  return 1.0f / std::sqrt(sigma * sigma + 1.0f);
}

void Sampler::scale_model_input(std::span<float> sample, int step_index) const {
  if (!scales_model_input()) return;
  const float sigma = sigmas_.at(static_cast<std::size_t>(step_index));
  const float divisor = std::sqrt(sigma * sigma + 1.0f);
  for (float& v : sample) v = v / divisor;
}

void Sampler::step(std::span<const float> model_output, std::span<float> sample, int step_index,
                   NoiseSource* noise, std::span<float> denoised) {
  const std::string name(to_string(kind()));
  if (timesteps_.empty()) throw Error(name + " sampler: step() before set_timesteps()");
  if (step_index < 0 || step_index >= num_steps()) {
    throw Error(name + " sampler: step " + std::to_string(step_index) + " is outside 0.." +
                std::to_string(num_steps() - 1));
  }
  if (model_output.size() != sample.size() || (!denoised.empty() && denoised.size() != sample.size())) {
    throw Error(name + " sampler: model output has " + std::to_string(model_output.size()) + " values, sample " +
                std::to_string(sample.size()) + ", denoised " + std::to_string(denoised.size()) +
                "; they must match");
  }
  if (uses_noise() && noise == nullptr) throw Error(name + " sampler: step() needs a noise source");
  do_step(model_output, sample, step_index, noise, denoised);
}

std::unique_ptr<Sampler> make_sampler(const SchedulerConfig& config) {
  switch (config.kind) {
    case SamplerKind::kEuler: return make_euler_sampler(config);
    case SamplerKind::kEulerAncestral: return make_euler_ancestral_sampler(config);
    case SamplerKind::kDdim: return make_ddim_sampler(config);
    case SamplerKind::kDpmPp2m: return make_dpmpp_sampler(config);
  }
  throw ConfigError("unknown sampler kind");
}

}  // namespace nanscope::pipeline
