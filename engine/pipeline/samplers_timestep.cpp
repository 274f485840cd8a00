// DDPM and LCM: the timestep samplers that noise each step
// (samplers.cpp has how every sampler is written).

#include "pipeline/samplers.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/sampler_helpers.hpp"
#include "pipeline/schedule.hpp"

namespace nanscope::pipeline {
namespace {

using schedule::numpy_round;

// The alphas of the timestep samplers, indexed as diffusers does (-1: the last).
float alpha_of(const std::vector<float>& a, int t) {
  const int n = static_cast<int>(a.size());
  return a.at(static_cast<std::size_t>(t < 0 ? t + n : t));
}

// Timesteps for DDPM: linspace (rounded), leading (+ steps_offset) or trailing spacing.
std::vector<int> ddpm_timesteps(const SchedulerConfig& c, int n) {
  const int t_max = c.num_train_timesteps;
  std::vector<int> t;
  switch (c.timestep_spacing) {
    case TimestepSpacing::linspace:
      for (double v : schedule::numpy_linspace(0.0, t_max - 1, n)) t.push_back(static_cast<int>(numpy_round(v)));
      std::reverse(t.begin(), t.end());
      break;
    case TimestepSpacing::leading:
      for (int i = n - 1; i >= 0; --i) t.push_back(i * (t_max / n) + c.steps_offset);
      break;
    case TimestepSpacing::trailing:
      for (double v : schedule::numpy_arange(t_max, 0.0, -(static_cast<double>(t_max) / n))) {
        t.push_back(static_cast<int>(numpy_round(v)) - 1);
      }
      break;
  }
  return t;
}

// The timestep samplers that noise a sample as DDPMScheduler.add_noise does
// (LCMScheduler's is the same): alphas_cumprod[t] ** 0.5 * x0 +
// (1 - alphas_cumprod[t]) ** 0.5 * noise, so img2img and the hires fix start where diffusers does.
class CumprodNoiseSampler : public Sampler {
 public:
  using Sampler::Sampler;
  void add_noise(Backend& be, Tensor& x, const Tensor& noise, int i) const override {
    const float a = alpha_of(alphas_cumprod_, static_cast<int>(timesteps_.at(static_cast<std::size_t>(i))));
    apply(be, LatentOp::dpm1, x, &noise, x, {std::sqrt(a), -std::sqrt(1.0f - a)});
  }

 protected:
  // Timestep t on the schedule, with the sigma its alpha implies.
  void push_timestep(int t) {
    timesteps_.push_back(static_cast<float>(t));
    const float a = alpha_of(alphas_cumprod_, t);
    sigmas_.push_back(std::sqrt((1.0f - a) / a));
  }
};

// DDPM (DDPMScheduler, variance_type fixed_small): the posterior mean of x_{t-1}
// given x0 and x_t, plus sqrt(variance) times fresh noise while t > 0.
class DdpmSampler final : public CumprodNoiseSampler {
 public:
  using CumprodNoiseSampler::CumprodNoiseSampler;
  bool uses_noise() const override { return true; }

 protected:
  void make_schedule(int n) override {
    for (int t : ddpm_timesteps(config_, n)) {
      if (t >= config_.num_train_timesteps) {
        throw ConfigError(config_.origin + ": DDPM with steps_offset " + std::to_string(config_.steps_offset) +
                          " and " + std::to_string(n) + " steps reaches timestep " + std::to_string(t) +
                          ", outside num_train_timesteps; use fewer steps");
      }
      push_timestep(t);
    }
    sigmas_.push_back(0.0f);
    init_noise_sigma_ = 1.0f;
  }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource* noise, Tensor* denoised) override {
    const SchedulerConfig& c = config_;
    const int t = static_cast<int>(timesteps_[static_cast<std::size_t>(i)]);
    const int prev_t = t - c.num_train_timesteps / requested_steps_;
    const float a_t = alpha_of(alphas_cumprod_, t);
    const float a_prev = prev_t >= 0 ? alpha_of(alphas_cumprod_, prev_t) : 1.0f;
    const float b_t = 1.0f - a_t;
    const float b_prev = 1.0f - a_prev;
    const float cur_alpha = a_t / a_prev;
    const float cur_beta = 1.0f - cur_alpha;
    const std::int64_t n = x.numel();
    // x0 as DDIM computes it (the same expressions), clipped as the config says.
    Tensor x0 = be.empty({n}, DType::f32);
    Tensor scratch = be.empty({n}, DType::f32);
    apply(be, LatentOp::ddim, x, &mo, scratch,
          {std::sqrt(a_t), std::sqrt(b_t), 0.0f, 0.0f, static_cast<float>(c.clip_sample_range)}, &x0, nullptr, nullptr,
          c.clip_sample ? 1 : 0);
    const float x0_coef = std::sqrt(a_prev) * cur_beta / b_t;
    const float x_coef = std::sqrt(cur_alpha) * b_prev / b_t;
    apply(be, LatentOp::lincomb, x0, &x, x, {x0_coef, x_coef}, nullptr, nullptr, nullptr, 2);
    if (t > 0) {
      const float variance = std::max(b_prev / b_t * cur_beta, 1e-20f);
      std::vector<float> z(static_cast<std::size_t>(n));
      noise->randn(z);
      const Tensor zt = be.upload(HostTensor::from_f32({n}, z));
      apply(be, LatentOp::add_scaled, x, &zt, x, {std::sqrt(variance)});
    }
    if (denoised) apply(be, LatentOp::mul, x0, nullptr, *denoised, {1.0f});
  }
};

// LCM (LCMScheduler): x0 from the model, the consistency boundary condition
// denoised = c_out x0 + c_skip x_t, then (except at the last step) noised again
// to the next timestep with fresh noise.
class LcmSampler final : public CumprodNoiseSampler {
 public:
  using CumprodNoiseSampler::CumprodNoiseSampler;
  bool uses_noise() const override { return true; }

 protected:
  void make_schedule(int n) override {
    const SchedulerConfig& c = config_;
    const int original = c.original_inference_steps;
    const int k = c.num_train_timesteps / original;
    if (n > original) {
      throw ConfigError(c.origin + ": LCM takes at most original_inference_steps = " + std::to_string(original) +
                        " steps; asked for " + std::to_string(n));
    }
    std::vector<int> origin;
    for (int j = original; j >= 1; --j) origin.push_back(j * k - 1);  // reversed
    const std::vector<double> idx = schedule::numpy_linspace(0.0, static_cast<double>(origin.size()), n + 1);
    for (int j = 0; j < n; ++j) {
      const int t = origin[static_cast<std::size_t>(std::floor(idx[static_cast<std::size_t>(j)]))];
      push_timestep(t);
    }
    sigmas_.push_back(0.0f);
    init_noise_sigma_ = 1.0f;
  }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource* noise, Tensor* denoised) override {
    const SchedulerConfig& c = config_;
    const auto u = static_cast<std::size_t>(i);
    const int t = static_cast<int>(timesteps_[u]);
    const bool last = i + 1 == num_steps();
    const int prev_t = last ? t : static_cast<int>(timesteps_[u + 1]);
    const float a_t = alpha_of(alphas_cumprod_, t);
    const float a_prev = prev_t >= 0 ? alpha_of(alphas_cumprod_, prev_t) : final_alpha();
    const float b_t = 1.0f - a_t;
    const float b_prev = 1.0f - a_prev;
    const float scaled = static_cast<float>(t) * static_cast<float>(c.timestep_scaling);
    const float c_skip = 0.25f / (scaled * scaled + 0.25f);
    const float c_out = scaled / std::sqrt(scaled * scaled + 0.25f);
    const std::int64_t n = x.numel();
    Tensor x0 = be.empty({n}, DType::f32);
    Tensor scratch = be.empty({n}, DType::f32);
    apply(be, LatentOp::ddim, x, &mo, scratch,
          {std::sqrt(a_t), std::sqrt(b_t), 0.0f, 0.0f, static_cast<float>(c.clip_sample_range)}, &x0, nullptr, nullptr,
          c.clip_sample ? 1 : 0);
    Tensor d = be.empty({n}, DType::f32);
    apply(be, LatentOp::lincomb, x0, &x, d, {c_out, c_skip}, nullptr, nullptr, nullptr, 2);
    if (denoised) apply(be, LatentOp::mul, d, nullptr, *denoised, {1.0f});
    if (last) {
      apply(be, LatentOp::mul, d, nullptr, x, {1.0f});
      return;
    }
    std::vector<float> z(static_cast<std::size_t>(n));
    noise->randn(z);
    const Tensor zt = be.upload(HostTensor::from_f32({n}, z));
    apply(be, LatentOp::lincomb, d, &zt, x, {std::sqrt(a_prev), std::sqrt(b_prev)}, nullptr, nullptr, nullptr, 2);
  }

 private:
  float final_alpha() const { return config_.set_alpha_to_one ? 1.0f : alphas_cumprod_.front(); }
};

}  // namespace

std::unique_ptr<Sampler> make_ddpm_sampler(const SchedulerConfig& config) {
  return std::make_unique<DdpmSampler>(config);
}
std::unique_ptr<Sampler> make_lcm_sampler(const SchedulerConfig& config) {
  return std::make_unique<LcmSampler>(config);
}

}  // namespace nanscope::pipeline
