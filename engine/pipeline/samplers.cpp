// The samplers, each a transcription of its diffusers 0.31 class (schedulers/
// scheduling_*.py): set_timesteps() becomes make_schedule(), step() do_step().
// Scalars are float32 like diffusers' 0-d tensors, computed here; the tensor
// arithmetic is a LATENT_STEP op on the backend that holds the latent
// (kernels/latent.cl, one separately rounded statement per diffusers tensor
// op), so the results match torch's to an ulp or so on every backend.

#include "pipeline/samplers.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/schedule.hpp"

namespace nanscope::pipeline {
namespace {

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
    timesteps_ = euler_timesteps(c, n);
    for (float v : timesteps_) sigmas_.push_back(static_cast<float>(schedule::interp(v, train_sigmas_)));
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

// DPM-Solver++ (multistep, data prediction), orders 1-3; order 2 is "DPM++ 2M".
class DpmPpSampler final : public Sampler {
 public:
  using Sampler::Sampler;

 protected:
  void make_schedule(int n) override {
    const SchedulerConfig& c = config_;
    const int t_max = c.num_train_timesteps;
    const int last_timestep = t_max - clipped_index();
    std::vector<double> t;
    switch (c.timestep_spacing) {
      case TimestepSpacing::linspace: {
        const std::vector<double> v = schedule::numpy_linspace(0.0, last_timestep - 1, n + 1);
        for (int i = n; i >= 1; --i) t.push_back(numpy_round(v[static_cast<std::size_t>(i)]));
        break;
      }
      case TimestepSpacing::leading: {
        const int ratio = last_timestep / (n + 1);
        for (int i = n; i >= 1; --i) t.push_back(static_cast<double>(i * ratio + c.steps_offset));
        break;
      }
      case TimestepSpacing::trailing:
        for (double v : schedule::numpy_arange(last_timestep, 0.0, -(static_cast<double>(t_max) / n))) {
          t.push_back(numpy_round(v) - 1);
        }
        break;
    }
    std::vector<double> sig;
    if (c.use_karras_sigmas) {
      const std::vector<float> log_sigmas = schedule::log_sigmas(train_sigmas_);
      sig = schedule::karras_sigmas(c.sigma_min.value_or(train_sigmas_.front()),
                                    c.sigma_max.value_or(train_sigmas_.back()), n);
      t.clear();
      for (double s : sig) t.push_back(numpy_round(schedule::sigma_to_t(s, log_sigmas)));
    } else {
      for (double v : t) sig.push_back(schedule::interp(v, train_sigmas_));
    }
    for (double v : t) timesteps_.push_back(static_cast<float>(v));
    for (double s : sig) sigmas_.push_back(static_cast<float>(s));
    sigmas_.push_back(c.final_sigmas_type == FinalSigmas::zero ? 0.0f : train_sigmas_.front());
    init_noise_sigma_ = 1.0f;
  }

  void reset_state() override {
    history_.assign(static_cast<std::size_t>(config_.solver_order), {});
    lower_order_nums_ = 0;
    next_step_ = 0;
  }
  void on_start_at(int i) override { next_step_ = i; }

  // DPMSolverMultistepScheduler.add_noise: alpha_t * x0 + sigma_t * noise for the sigma at step i.
  void add_noise(Backend& be, Tensor& x, const Tensor& noise, int i) const override {
    const Level l = level(i);
    apply(be, LatentOp::dpm1, x, &noise, x, {l.alpha, -l.sigma});
  }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource*, Tensor* denoised) override {
    const SchedulerConfig& c = config_;
    if (i != next_step_) {
      throw Error("dpmpp_2m sampler: step " + std::to_string(i) + " called where step " + std::to_string(next_step_) +
                  " was due; DPM++ steps must run in order (call set_timesteps() to restart)");
    }
    const int n = num_steps();
    const bool last = i == n - 1;
    const bool lower_order_final =
        last && (c.euler_at_final || (c.lower_order_final && n < 15) || c.final_sigmas_type == FinalSigmas::zero);
    const bool lower_order_second = i == n - 2 && c.lower_order_final && n < 15;

    // convert_model_output: the data prediction x0.
    const Level s0 = level(i);
    Tensor x0 = be.empty({x.numel()}, DType::f32);
    apply(be, LatentOp::dpm_x0, x, &mo, x0, {s0.alpha, s0.sigma});
    if (denoised) apply(be, LatentOp::mul, x0, nullptr, *denoised, {1.0f});
    std::rotate(history_.begin(), history_.begin() + 1, history_.end());
    history_.back() = std::move(x0);

    if (c.solver_order == 1 || lower_order_nums_ < 1 || lower_order_final) {
      first_order(be, x, i);
    } else if (c.solver_order == 2 || lower_order_nums_ < 2 || lower_order_second) {
      second_order(be, x, i);
    } else {
      third_order(be, x, i);
    }
    lower_order_nums_ = std::min(lower_order_nums_ + 1, c.solver_order);
    ++next_step_;
  }

 private:
  // alpha_t = 1/sqrt(sigma^2+1), sigma_t = sigma*alpha_t and lambda = log(alpha_t) - log(sigma_t)
  // of the schedule's sigma at index j (lambda = +inf at the final sigma 0).
  struct Level {
    float alpha, sigma, lambda;
  };
  Level level(int j) const {
    const float s = sigmas_[static_cast<std::size_t>(j)];
    const float alpha = 1.0f / std::sqrt(s * s + 1.0f);
    const float sigma = s * alpha;
    return {alpha, sigma, std::log(alpha) - std::log(sigma)};
  }

  void first_order(Backend& be, Tensor& x, int i) const {
    const Level t = level(i + 1);
    const Level s = level(i);
    const float h = t.lambda - s.lambda;
    const float a = t.sigma / s.sigma;
    const float b = t.alpha * (std::exp(-h) - 1.0f);
    apply(be, LatentOp::dpm1, x, &history_.back(), x, {a, b});
  }

  void second_order(Backend& be, Tensor& x, int i) const {
    const Level t = level(i + 1);
    const Level s0 = level(i);
    const Level s1 = level(i - 1);
    const float h = t.lambda - s0.lambda;
    const float h0 = s0.lambda - s1.lambda;
    const float r0 = h0 / h;
    const float d1_coef = 1.0f / r0;
    const float a = t.sigma / s0.sigma;
    const float em1 = std::exp(-h) - 1.0f;
    const float b = t.alpha * em1;
    // midpoint: - 0.5 * b * D1; heun: + alpha_t * ((exp(-h) - 1)/h + 1) * D1
    const bool heun = config_.solver_type == DpmSolverType::heun;
    const float c = heun ? t.alpha * (em1 / h + 1.0f) : 0.5f * b;
    apply(be, LatentOp::dpm2, x, &history_[history_.size() - 1], x, {a, b, c, d1_coef}, nullptr,
          &history_[history_.size() - 2], nullptr, heun ? 1 : 0);
  }

  void third_order(Backend& be, Tensor& x, int i) const {
    const Level t = level(i + 1);
    const Level s0 = level(i);
    const Level s1 = level(i - 1);
    const Level s2 = level(i - 2);
    const float h = t.lambda - s0.lambda;
    const float h0 = s0.lambda - s1.lambda;
    const float h1 = s1.lambda - s2.lambda;
    const float r0 = h0 / h;
    const float r1 = h1 / h;
    const float c10 = 1.0f / r0;
    const float c11 = 1.0f / r1;
    const float r_sum = r0 + r1;
    const float c1 = r0 / r_sum;
    const float c2 = 1.0f / r_sum;
    const float a = t.sigma / s0.sigma;
    const float em1 = std::exp(-h) - 1.0f;
    const float b = t.alpha * em1;
    const float c = t.alpha * (em1 / h + 1.0f);
    const float d = t.alpha * ((em1 + h) / (h * h) - 0.5f);
    apply(be, LatentOp::dpm3, x, &history_[history_.size() - 1], x, {a, b, c, d, c10, c11, c1, c2}, nullptr,
          &history_[history_.size() - 2], &history_[history_.size() - 3]);
  }

  // searchsorted(flip(lambda_t), lambda_min_clipped): how many training timesteps at
  // the noisy end fall below the clip (0 for the default -inf).
  int clipped_index() const {
    std::vector<float> lambdas;
    for (float a : alphas_cumprod_) {
      lambdas.push_back(std::log(std::sqrt(a)) - std::log(std::sqrt(1.0f - a)));
    }
    std::reverse(lambdas.begin(), lambdas.end());
    return static_cast<int>(std::lower_bound(lambdas.begin(), lambdas.end(), config_.lambda_min_clipped) -
                            lambdas.begin());
  }

  std::vector<Tensor> history_;  // data predictions on the sampling backend, newest last
  int lower_order_nums_ = 0;
  int next_step_ = 0;
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
std::unique_ptr<Sampler> make_dpmpp_sampler(const SchedulerConfig& config) {
  return std::make_unique<DpmPpSampler>(config);
}

}  // namespace nanscope::pipeline
