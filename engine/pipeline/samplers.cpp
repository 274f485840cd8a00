// The samplers, each a transcription of its diffusers 0.31 class (schedulers/
// scheduling_*.py): set_timesteps() becomes make_schedule(), step() do_step().
// Scalars are float32 like diffusers' 0-d tensors, computed here; the tensor
// arithmetic is a LATENT_STEP op on the backend that holds the latent
// (kernels/latent.cl, one separately rounded statement per diffusers tensor
// op), so the results match torch's to an ulp or so on every backend.
//
// This file: the helpers the sampler files share (sampler_helpers.hpp), Euler,
// Euler ancestral and DDIM. samplers_dpm.cpp: DPM-Solver++ and UniPC;
// samplers_kdiffusion.cpp: Heun, LMS and DPM++ SDE; samplers_timestep.cpp: DDPM
// and LCM.

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

namespace sampler_detail {

using schedule::numpy_round;

// LatentOp::euler's coefficients: sigma, dt, and for v-prediction
// c_out = -sigma / sqrt(sigma^2 + 1) and var = sigma^2 + 1.
std::array<float, 8> euler_coefficients(float sigma, float dt) {
  const float var = sigma * sigma + 1.0f;
  const float c_out = -sigma / std::sqrt(var);
  return {sigma, dt, c_out, var};
}

// EulerDiscreteScheduler and EulerAncestralDiscreteScheduler share their spacing rules:
// float32 timesteps, sigmas interpolated in the training table.
std::vector<float> euler_timesteps(const SchedulerConfig& c, int n) {
  const int t_max = c.num_train_timesteps;
  std::vector<float> t;
  switch (c.timestep_spacing) {
    case TimestepSpacing::linspace:
      for (double v : schedule::numpy_linspace(0.0, t_max - 1, n)) t.push_back(static_cast<float>(v));
      std::reverse(t.begin(), t.end());
      break;
    case TimestepSpacing::leading: {
      const int ratio = t_max / n;
      for (int i = n - 1; i >= 0; --i) t.push_back(static_cast<float>(i * ratio) + static_cast<float>(c.steps_offset));
      break;
    }
    case TimestepSpacing::trailing:
      for (double v : schedule::numpy_arange(t_max, 0.0, -(static_cast<double>(t_max) / n))) {
        t.push_back(static_cast<float>(numpy_round(v)) - 1.0f);
      }
      break;
  }
  return t;
}

// max(sigma) for linspace and trailing spacing, sqrt(max^2 + 1) for leading (diffusers'
// rule, whatever its reason).
float euler_init_noise_sigma(const SchedulerConfig& c, const std::vector<float>& sigmas) {
  const float max_sigma = *std::max_element(sigmas.begin(), sigmas.end());
  if (c.timestep_spacing == TimestepSpacing::leading) return std::sqrt(max_sigma * max_sigma + 1.0f);
  return max_sigma;
}

void predict_x0(const Sampler& s, Backend& be, float sigma, const Tensor& x, const Tensor& m, Tensor& x0) {
  const std::array<float, 8> c = euler_coefficients(sigma, 0.0f);
  LatentStepArgs a{LatentOp::x0,
                   x.numel(),
                   x,
                   0,
                   &m,
                   0,
                   nullptr,
                   nullptr,
                   x0,
                   0,
                   nullptr,
                   c,
                   static_cast<int>(s.config().prediction_type),
                   0};
  be.latent_step(a);
}

}  // namespace sampler_detail

namespace {

using sampler_detail::euler_coefficients;
using sampler_detail::euler_init_noise_sigma;
using sampler_detail::euler_timesteps;
using schedule::numpy_round;

// Euler: the first-order ODE step x + (x - x0)/sigma * (sigma_next - sigma), with
// s_churn = 0 (diffusers' default, so sigma_hat = sigma).
class EulerSampler final : public Sampler {
 public:
  using Sampler::Sampler;

 protected:
  bool scales_model_input() const override { return true; }

  void make_schedule(int n) override {
    const SchedulerConfig& c = config_;
    std::vector<float> t = euler_timesteps(c, n);
    std::vector<double> sig;
    for (float v : t) sig.push_back(schedule::interp(v, train_sigmas_));
    std::vector<double> ts(t.begin(), t.end());
    if (c.use_karras_sigmas) {
      const std::vector<float> log_sigmas = schedule::log_sigmas(train_sigmas_);
      sig = schedule::karras_sigmas(c.sigma_min.value_or(sig.back()), c.sigma_max.value_or(sig.front()), n);
      ts.clear();
      for (double s : sig) ts.push_back(schedule::sigma_to_t(s, log_sigmas));
    } else {
      apply_sigma_schedule(sig, ts, n);  // exponential and the k-diffusion schedules
    }
    for (double s : sig) sigmas_.push_back(static_cast<float>(s));
    sigmas_.push_back(c.final_sigmas_type == FinalSigmas::zero ? 0.0f : train_sigmas_.front());
    if (c.continuous_timesteps) {
      // timestep_type "continuous" (v-prediction): the model takes 0.25 * log(sigma).
      for (std::size_t i = 0; i + 1 < sigmas_.size(); ++i) timesteps_.push_back(0.25f * std::log(sigmas_[i]));
    } else {
      for (double v : ts) timesteps_.push_back(static_cast<float>(v));
    }
    init_noise_sigma_ = euler_init_noise_sigma(c, sigmas_);
  }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource*, Tensor* denoised) override {
    const float sigma = sigmas_[static_cast<std::size_t>(i)];
    const float dt = sigmas_[static_cast<std::size_t>(i) + 1] - sigma;
    apply(be, LatentOp::euler, x, &mo, x, euler_coefficients(sigma, dt), denoised);
  }
};

// Euler ancestral: an Euler step down to sigma_down, then fresh noise of size sigma_up.
class EulerAncestralSampler final : public Sampler {
 public:
  using Sampler::Sampler;
  bool uses_noise() const override { return true; }

 protected:
  bool scales_model_input() const override { return true; }

  void make_schedule(int n) override {
    const SchedulerConfig& c = config_;
    const std::vector<float> t = euler_timesteps(c, n);
    std::vector<double> sig;
    std::vector<double> ts(t.begin(), t.end());
    for (float v : t) sig.push_back(schedule::interp(v, train_sigmas_));
    // The class has no sigma options: the run's schedule (A1111 and ComfyUI run any) replaces its own.
    apply_sigma_schedule(sig, ts, n);
    for (double v : ts) timesteps_.push_back(static_cast<float>(v));
    for (double v : sig) sigmas_.push_back(static_cast<float>(v));
    sigmas_.push_back(0.0f);
    init_noise_sigma_ = euler_init_noise_sigma(c, sigmas_);
  }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource* noise, Tensor* denoised) override {
    const float from = sigmas_[static_cast<std::size_t>(i)];
    const float to = sigmas_[static_cast<std::size_t>(i) + 1];
    const float from2 = from * from;
    const float to2 = to * to;
    const float up2 = to2 * (from2 - to2) / from2;
    const float sigma_up = std::sqrt(up2);
    const float sigma_down = std::sqrt(to2 - sigma_up * sigma_up);
    const float dt = sigma_down - from;
    apply(be, LatentOp::euler, x, &mo, x, euler_coefficients(from, dt), denoised);
    // diffusers draws the noise after the deterministic part, one tensor per step.
    std::vector<float> z(static_cast<std::size_t>(x.numel()));
    noise->randn(z);
    const Tensor zt = be.upload(HostTensor::from_f32({x.numel()}, z));
    apply(be, LatentOp::add_scaled, x, &zt, x, {sigma_up});
  }
};

// DDIM with eta = 0: x_prev = sqrt(a_prev) * x0 + sqrt(1 - a_prev) * eps.
class DdimSampler final : public Sampler {
 public:
  using Sampler::Sampler;

 protected:
  void make_schedule(int n) override {
    const SchedulerConfig& c = config_;
    const int t_max = c.num_train_timesteps;
    std::vector<double> t;
    switch (c.timestep_spacing) {
      case TimestepSpacing::linspace:
        for (double v : schedule::numpy_linspace(0.0, t_max - 1, n)) t.push_back(numpy_round(v));
        std::reverse(t.begin(), t.end());
        break;
      case TimestepSpacing::leading:
        for (int i = n - 1; i >= 0; --i) t.push_back(static_cast<double>(i * (t_max / n) + c.steps_offset));
        break;
      case TimestepSpacing::trailing:
        for (double v : schedule::numpy_arange(t_max, 0.0, -(static_cast<double>(t_max) / n))) {
          t.push_back(numpy_round(v) - 1);
        }
        break;
    }
    for (double v : t) {
      if (v >= t_max) {
        // diffusers accepts this schedule and then fails indexing alphas_cumprod in step().
        throw ConfigError(c.origin + ": DDIM with " + std::string(to_string(c.timestep_spacing)) +
                          " spacing, steps_offset " + std::to_string(c.steps_offset) + " and " + std::to_string(n) +
                          " steps reaches timestep " + std::to_string(static_cast<int>(v)) +
                          ", outside num_train_timesteps " + std::to_string(t_max) + "; use fewer steps");
      }
      timesteps_.push_back(static_cast<float>(v));
      sigmas_.push_back(sigma_of(alpha_at(static_cast<int>(v))));
    }
    sigmas_.push_back(sigma_of(final_alpha()));
    init_noise_sigma_ = 1.0f;
  }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource*, Tensor* denoised) override {
    const SchedulerConfig& c = config_;
    const int t = static_cast<int>(timesteps_[static_cast<std::size_t>(i)]);
    const int prev_t = t - c.num_train_timesteps / requested_steps_;
    const float a_t = alpha_at(t);
    const float a_prev = prev_t >= 0 ? alpha_at(prev_t) : final_alpha();
    const float b_t = 1.0f - a_t;
    const float sqrt_a = std::sqrt(a_t);
    const float sqrt_b = std::sqrt(b_t);
    const float b_prev = 1.0f - a_prev;
    const float variance = b_prev / b_t * (1.0f - a_t / a_prev);
    const float std_dev = 0.0f * std::sqrt(variance);  // eta = 0 (NaN if the variance is, as in diffusers)
    const float dir_coef = std::sqrt(1.0f - a_prev - std_dev * std_dev);
    const float sqrt_a_prev = std::sqrt(a_prev);
    const auto range = static_cast<float>(c.clip_sample_range);
    apply(be, LatentOp::ddim, x, &mo, x, {sqrt_a, sqrt_b, dir_coef, sqrt_a_prev, range}, denoised, nullptr, nullptr,
          c.clip_sample ? 1 : 0);
  }

  // DDIMScheduler.add_noise: alphas_cumprod[t] ** 0.5 * x0 + (1 - alphas_cumprod[t]) ** 0.5 * noise.
  void add_noise(Backend& be, Tensor& x, const Tensor& noise, int i) const override {
    const float a = alpha_at(static_cast<int>(timesteps_.at(static_cast<std::size_t>(i))));
    // dpm1 is a*x - b*m: with b negated, a*x + b*m rounded as torch rounds it.
    apply(be, LatentOp::dpm1, x, &noise, x, {std::sqrt(a), -std::sqrt(1.0f - a)});
  }

 private:
  // diffusers indexes alphas_cumprod with the timestep, so -1 (trailing spacing's
  // extra step) wraps to the last entry, as Python indexing does.
  float alpha_at(int t) const {
    const int n = static_cast<int>(alphas_cumprod_.size());
    return alphas_cumprod_.at(static_cast<std::size_t>(t < 0 ? t + n : t));
  }
  float final_alpha() const { return config_.set_alpha_to_one ? 1.0f : alphas_cumprod_.front(); }
  static float sigma_of(float a) { return std::sqrt((1.0f - a) / a); }
};

}  // namespace

std::unique_ptr<Sampler> make_euler_sampler(const SchedulerConfig& config) {
  return std::make_unique<EulerSampler>(config);
}
std::unique_ptr<Sampler> make_euler_ancestral_sampler(const SchedulerConfig& config) {
  return std::make_unique<EulerAncestralSampler>(config);
}
std::unique_ptr<Sampler> make_ddim_sampler(const SchedulerConfig& config) {
  return std::make_unique<DdimSampler>(config);
}

}  // namespace nanscope::pipeline
