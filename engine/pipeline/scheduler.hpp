#pragma once
// Samplers: the per-step update of the latent, matching diffusers 0.31's
// EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DDIMScheduler (eta 0)
// and DPMSolverMultistepScheduler (dpmsolver++, "DPM++ 2M", with or without Karras
// sigmas) for the same scheduler_config.json.
//
// The math runs on host floats: a latent is at most a few hundred thousand values
// and a step is a handful of multiply-adds per value, so uploading is the
// pipeline's business, not the sampler's. Every operation is done in float32 in
// the order torch evaluates diffusers' expressions (each tensor op rounded on its
// own, no fused multiply-add), so results agree with diffusers to a few ulps.
//
// Use (as diffusers' StableDiffusionPipeline does):
//   auto s = make_sampler(SchedulerConfig::from_json(j, SamplerKind::kEuler));
//   s->set_timesteps(20);
//   noise.randn(latent); multiply latent by s->init_noise_sigma();
//   for i in 0..s->num_steps()-1:
//     x = latent; s->scale_model_input(x, i); eps = unet(x, s->timesteps()[i]) (+ CFG);
//     s->step(eps, latent, i, &noise);

#include <memory>
#include <span>
#include <vector>

#include "pipeline/scheduler_config.hpp"

namespace nanscope::pipeline {

class NoiseSource;

class Sampler {
 public:
  explicit Sampler(SchedulerConfig config);
  virtual ~Sampler() = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SchedulerConfig& config() const { return config_; }
  SamplerKind kind() const { return config_.kind; }

  // Computes the schedule for `steps` denoising steps (1..num_train_timesteps) and
  // resets the sampler's state. Throws ConfigError for a bad count.
  void set_timesteps(int steps);

  // Steps to run. Equals the requested count except where diffusers itself yields
  // one more (trailing spacing for some counts, e.g. 61 of 1000: it appends t=-1);
  // we reproduce that and log a warning.
  int num_steps() const { return static_cast<int>(timesteps_.size()); }
  // The timestep fed to the model at each step (fractional for Euler with Karras sigmas).
  const std::vector<float>& timesteps() const { return timesteps_; }
  // num_steps()+1 noise levels sigma = sqrt((1-a)/a); the last is where sampling ends.
  // For DDIM (which has no sigma table) these are derived from its alphas.
  const std::vector<float>& sigmas() const { return sigmas_; }
  // The initial latent is standard normal noise times this.
  float init_noise_sigma() const { return init_noise_sigma_; }

  // The model input at step i: sample / sqrt(sigma_i^2 + 1) for the Euler samplers,
  // unchanged for DDIM and DPM++. In place, with torch's division.
  void scale_model_input(std::span<float> sample, int step_index) const;
  // The same scaling as a factor, for a device kernel (may differ from the division by an ulp).
  float model_input_scale(int step_index) const;

  // Whether step() draws noise (Euler ancestral).
  virtual bool uses_noise() const { return false; }

  // One denoising step: `sample` (x_t) becomes x_{t-1} in place. `model_output` is the
  // (CFG-combined) UNet output for step `step_index`. `noise` must be given when
  // uses_noise(). `denoised`, when not empty, receives the model's x0 prediction.
  // DPM++ keeps earlier outputs, so its steps must run in order from 0.
  void step(std::span<const float> model_output, std::span<float> sample, int step_index,
            NoiseSource* noise = nullptr, std::span<float> denoised = {});

 protected:
  // Fills timesteps_, sigmas_ and init_noise_sigma_ for `steps`.
  virtual void make_schedule(int steps) = 0;
  virtual void reset_state() {}
  virtual bool scales_model_input() const { return false; }
  virtual void do_step(std::span<const float> model_output, std::span<float> sample, int i, NoiseSource* noise,
                       std::span<float> denoised) = 0;

  SchedulerConfig config_;
  std::vector<float> alphas_cumprod_;  // per training timestep
  std::vector<float> train_sigmas_;    // sqrt((1-a)/a) per training timestep
  std::vector<float> timesteps_;
  std::vector<float> sigmas_;
  float init_noise_sigma_ = 1.0f;
  int requested_steps_ = 0;
};

// The sampler for config.kind.
std::unique_ptr<Sampler> make_sampler(const SchedulerConfig& config);

}  // namespace nanscope::pipeline
