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
#include <optional>
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

// DPM-Solver++ (multistep, data prediction), orders 1-3; order 2 is "DPM++ 2M";
// with kind dpmpp_2m_sde the sde-dpmsolver++ update, and with kind unipc
// UniPCMultistepScheduler (bh1/bh2, predict_x0), which shares this schedule
// and history of data predictions.
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
    } else if (c.use_exponential_sigmas || c.schedule != ScheduleId::class_default) {
      // k-diffusion's definitions (diffusers 0.31's DPMSolverMultistep exponential
      // sigmas run from the smallest training sigma up, not down: we do not copy that).
      const std::vector<float> log_sigmas = schedule::log_sigmas(train_sigmas_);
      sig = schedule::kdiffusion_sigmas(c.use_exponential_sigmas ? ScheduleId::exponential : c.schedule, n,
                                        train_sigmas_);
      t.clear();
      for (double s : sig) t.push_back(schedule::sigma_to_t(s, log_sigmas));
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
    last_sample_.reset();
    this_order_ = 0;
  }
  void on_start_at(int i) override { next_step_ = i; }

  // DPMSolverMultistepScheduler.add_noise: alpha_t * x0 + sigma_t * noise for the sigma at step i.
  void add_noise(Backend& be, Tensor& x, const Tensor& noise, int i) const override {
    const Level l = level(i);
    apply(be, LatentOp::dpm1, x, &noise, x, {l.alpha, -l.sigma});
  }

  bool uses_noise() const override { return sde(); }
  // Brownian-tree noise in k-diffusion (A1111, ComfyUI); diffusers draws randn per step like us.
  bool brownian_noise_elsewhere() const override { return sde(); }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource* noise, Tensor* denoised) override {
    const SchedulerConfig& c = config_;
    if (i != next_step_) {
      throw Error(std::string(sampler_name(kind())) + " sampler: step " + std::to_string(i) + " called where step " +
                  std::to_string(next_step_) +
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
    if (kind() == SamplerId::unipc) {
      unipc_step(be, std::move(x0), x, i);
      ++next_step_;
      return;
    }
    std::rotate(history_.begin(), history_.begin() + 1, history_.end());
    history_.back() = std::move(x0);

    if (sde()) {
      // sde-dpmsolver++: diffusers draws the step's noise before the update, every step.
      std::vector<float> z(static_cast<std::size_t>(x.numel()));
      noise->randn(z);
      const Tensor zt = be.upload(HostTensor::from_f32({x.numel()}, z));
      if (c.solver_order == 1 || lower_order_nums_ < 1 || lower_order_final) {
        sde_update(be, x, i, zt, false);
      } else {
        sde_update(be, x, i, zt, true);
      }
    } else if (c.solver_order == 1 || lower_order_nums_ < 1 || lower_order_final) {
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

  bool sde() const { return config_.kind == SamplerId::dpmpp_2m_sde; }

  // ---- UniPC (UniPCMultistepScheduler.step, disable_corrector empty) ----
  // The corrector (UniC) refines the sample the previous predictor made, with
  // this call's data prediction; then the predictor (UniP) steps on.
  void unipc_step(Backend& be, Tensor x0, Tensor& x, int i) {
    const SchedulerConfig& c = config_;
    if (i > 0 && last_sample_) unic(be, x0, x, i, this_order_);
    std::rotate(history_.begin(), history_.begin() + 1, history_.end());
    history_.back() = std::move(x0);
    const int order = c.lower_order_final ? std::min(c.solver_order, num_steps() - i) : c.solver_order;
    this_order_ = std::min(order, lower_order_nums_ + 1);
    Tensor keep = be.empty({x.numel()}, DType::f32);
    apply(be, LatentOp::mul, x, nullptr, keep, {1.0f});
    last_sample_ = std::move(keep);
    unip(be, x, i, this_order_);
    lower_order_nums_ = std::min(lower_order_nums_ + 1, c.solver_order);
  }

  // h_phi_1 = expm1(-h), B(h) (bh1: -h, bh2: expm1(-h)) and b_1..b_order of UniPC's linear system.
  struct UniCoefficients {
    double h_phi_1, b_h;
    std::vector<double> b;
  };
  UniCoefficients uni_coefficients(double h, int order) const {
    const double hh = -h;
    UniCoefficients u;
    u.h_phi_1 = std::expm1(hh);
    u.b_h = config_.solver_type == DpmSolverType::bh1 ? hh : std::expm1(hh);
    double h_phi_k = u.h_phi_1 / hh - 1.0;
    double factorial = 1.0;
    for (int k = 1; k <= order; ++k) {
      u.b.push_back(h_phi_k * factorial / u.b_h);
      factorial *= k + 1;
      h_phi_k = h_phi_k / hh - 1.0 / factorial;
    }
    return u;
  }

  // UniP, bh update: x_t = sigma_t/sigma_s0 x - alpha_t h_phi_1 m0 - alpha_t B(h) sum_k rho_k D1_k,
  // D1_k = (m_k - m0) / r_k over the older data predictions.
  void unip(Backend& be, Tensor& x, int i, int order) const {
    const Level t = level(i + 1);
    const Level s0 = level(i);
    const double h = static_cast<double>(t.lambda) - s0.lambda;
    const UniCoefficients u = uni_coefficients(h, order);
    std::vector<double> r;
    for (int k = 1; k < order; ++k) r.push_back((static_cast<double>(level(i - k).lambda) - s0.lambda) / h);
    r.push_back(1.0);
    std::vector<double> rho;
    if (order == 2) rho = {0.5};
    if (order > 2) rho = schedule::solve_vandermonde(r, u.b, static_cast<std::size_t>(order - 1));
    const double a = static_cast<double>(t.alpha);
    const Tensor& m0 = history_.back();
    double c_m0 = -a * u.h_phi_1;
    std::vector<std::pair<double, const Tensor*>> terms = {{t.sigma / static_cast<double>(s0.sigma), &x}};
    std::vector<std::pair<double, const Tensor*>> older;
    for (int k = 1; k < order; ++k) {
      const double w = -a * u.b_h * rho[static_cast<std::size_t>(k - 1)] / r[static_cast<std::size_t>(k - 1)];
      older.push_back({w, &history_[history_.size() - 1 - static_cast<std::size_t>(k)]});
      c_m0 -= w;
    }
    terms.push_back({c_m0, &m0});
    terms.insert(terms.end(), older.begin(), older.end());
    combine(be, x, terms);
  }

  // UniC, bh update with this call's data prediction m_t: from the previous step's
  // sample (last_sample_), x_t = sigma_t/sigma_s0 x - alpha_t h_phi_1 m0
  //   - alpha_t B(h) (sum_k rho_k D1_k + rho_last (m_t - m0)).
  void unic(Backend& be, const Tensor& m_t, Tensor& x, int i, int order) const {
    const Level t = level(i);
    const Level s0 = level(i - 1);
    const double h = static_cast<double>(t.lambda) - s0.lambda;
    const UniCoefficients u = uni_coefficients(h, order);
    std::vector<double> r;
    for (int k = 1; k < order; ++k) r.push_back((static_cast<double>(level(i - k - 1).lambda) - s0.lambda) / h);
    r.push_back(1.0);
    const std::vector<double> rho =
        order == 1 ? std::vector<double>{0.5} : schedule::solve_vandermonde(r, u.b, static_cast<std::size_t>(order));
    const double a = static_cast<double>(t.alpha);
    const Tensor& m0 = history_.back();
    const double w_t = -a * u.b_h * rho.back();
    double c_m0 = -a * u.h_phi_1 - w_t;
    std::vector<std::pair<double, const Tensor*>> older;
    for (int k = 1; k < order; ++k) {
      const double w = -a * u.b_h * rho[static_cast<std::size_t>(k - 1)] / r[static_cast<std::size_t>(k - 1)];
      older.push_back({w, &history_[history_.size() - 1 - static_cast<std::size_t>(k)]});
      c_m0 -= w;
    }
    std::vector<std::pair<double, const Tensor*>> terms = {
        {t.sigma / static_cast<double>(s0.sigma), &*last_sample_}, {c_m0, &m0}, {w_t, &m_t}};
    terms.insert(terms.end(), older.begin(), older.end());
    combine(be, x, terms);
  }

  // sde-dpmsolver++ (midpoint), first or second order:
  //   x = (sigma_t/sigma_s * e^-h) x + alpha_t (1 - e^-2h) D0 [+ 0.5 alpha_t (1 - e^-2h) D1]
  //       + sigma_t sqrt(1 - e^-2h) z,   D1 = (m0 - m1) / r0.
  void sde_update(Backend& be, Tensor& x, int i, const Tensor& z, bool second) const {
    const Level t = level(i + 1);
    const Level s0 = level(i);
    const float h = t.lambda - s0.lambda;
    const float eh = std::exp(-h);
    const float e2h = std::exp(-2.0f * h);
    const float a = t.sigma / s0.sigma * eh;
    const float b = t.alpha * (1.0f - e2h);
    const float nz = t.sigma * std::sqrt(1.0f - e2h);
    const Tensor& m0 = history_[history_.size() - 1];
    if (!second) {
      apply(be, LatentOp::lincomb, x, &m0, x, {a, b, nz}, nullptr, &z, nullptr, 3);
      return;
    }
    const Level s1 = level(i - 1);
    const float r0 = (s0.lambda - s1.lambda) / h;
    const float d1_coef = 1.0f / r0;
    Tensor d1 = be.empty({x.numel()}, DType::f32);
    apply(be, LatentOp::lincomb, m0, &history_[history_.size() - 2], d1, {d1_coef, -d1_coef}, nullptr, nullptr, nullptr,
          2);
    apply(be, LatentOp::lincomb, x, &m0, x, {a, b, 0.5f * b, nz}, nullptr, &d1, &z, 4);
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
  std::optional<Tensor> last_sample_;  // UniPC: the sample its last predictor started from
  int this_order_ = 0;                 // UniPC: the order of the last predictor (its corrector's)
};

// The Euler-family schedule of Heun, LMS and DPM++ SDE (their diffusers classes
// share Euler's spacing and sigma options): n sigmas, timesteps and the run's schedule.
void euler_family_schedule(const SchedulerConfig& c, int n, const std::vector<float>& train_sigmas,
                           std::vector<double>& sig, std::vector<double>& ts) {
  const std::vector<float> t = euler_timesteps(c, n);
  ts.assign(t.begin(), t.end());
  sig.clear();
  for (float v : t) sig.push_back(schedule::interp(v, train_sigmas));
}

// x0 of (x, m) at `sigma` for the Euler family's prediction types.
void predict_x0(const Sampler& s, Backend& be, float sigma, const Tensor& x, const Tensor& m, Tensor& x0);

// Heun (HeunDiscreteScheduler, k-diffusion sample_heun with s_churn 0): an Euler
// step to sigma_next, the model again there, and the step redone with the mean
// of both derivatives. Calls alternate: 2k is step k's first call, 2k+1 its
// second; the last step (to sigma 0) is Euler alone, so n steps take 2n-1 calls.
class HeunSampler final : public Sampler {
 public:
  using Sampler::Sampler;
  int calls_per_step() const override { return 2; }

 protected:
  bool scales_model_input() const override { return true; }

  void make_schedule(int n) override {
    std::vector<double> sig, ts;
    euler_family_schedule(config_, n, train_sigmas_, sig, ts);
    apply_sigma_schedule(sig, ts, n);
    // diffusers: sigmas [s0, s1, s1, ..., s_{n-1}, s_{n-1}, 0], timesteps [t0, t1, t1, ...].
    for (std::size_t k = 0; k < sig.size(); ++k) {
      const auto v = static_cast<float>(sig[k]);
      sigmas_.push_back(v);
      if (k > 0) sigmas_.push_back(v);
      timesteps_.push_back(static_cast<float>(ts[k]));
      if (k > 0) timesteps_.push_back(static_cast<float>(ts[k]));
    }
    sigmas_.push_back(0.0f);
    init_noise_sigma_ = euler_init_noise_sigma(config_, sigmas_);
  }

  void reset_state() override { prev_.reset(); }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource*, Tensor* denoised) override {
    const auto u = static_cast<std::size_t>(i);
    const std::int64_t n = x.numel();
    Tensor x0 = be.empty({n}, DType::f32);
    if (!prev_) {
      const float sigma = sigmas_[u];
      const float dt = sigmas_[u + 1] - sigma;
      predict_x0(*this, be, sigma, x, mo, x0);
      Prev p{be.empty({n}, DType::f32), be.empty({n}, DType::f32), dt};
      apply(be, LatentOp::deriv, x, &x0, p.derivative, {sigma});
      apply(be, LatentOp::mul, x, nullptr, p.sample, {1.0f});
      apply(be, LatentOp::lincomb, x, &p.derivative, x, {1.0f, dt}, nullptr, nullptr, nullptr, 2);
      // The last step (to sigma 0) has no second call: nothing to keep.
      if (i + 1 < num_steps()) prev_ = std::move(p);
    } else {
      const float sigma_next = sigmas_[u];
      predict_x0(*this, be, sigma_next, x, mo, x0);
      Tensor d = be.empty({n}, DType::f32);
      apply(be, LatentOp::deriv, x, &x0, d, {sigma_next});
      apply(be, LatentOp::lincomb, prev_->derivative, &d, d, {0.5f, 0.5f}, nullptr, nullptr, nullptr, 2);
      apply(be, LatentOp::lincomb, prev_->sample, &d, x, {1.0f, prev_->dt}, nullptr, nullptr, nullptr, 2);
      prev_.reset();
    }
    if (denoised) apply(be, LatentOp::mul, x0, nullptr, *denoised, {1.0f});
  }

 private:
  struct Prev {
    Tensor derivative, sample;
    float dt;
  };
  std::optional<Prev> prev_;
};

// LMS (LMSDiscreteScheduler with order 4, k-diffusion sample_lms): a linear
// multistep over the last (up to 4) derivatives, with coefficients the
// integrals of their Lagrange polynomials in sigma over [sigma_i, sigma_i+1].
class LmsSampler final : public Sampler {
 public:
  using Sampler::Sampler;
  static constexpr int kOrder = 4;

 protected:
  bool scales_model_input() const override { return true; }

  void make_schedule(int n) override {
    std::vector<double> sig, ts;
    euler_family_schedule(config_, n, train_sigmas_, sig, ts);
    apply_sigma_schedule(sig, ts, n);
    for (double v : ts) timesteps_.push_back(static_cast<float>(v));
    for (double v : sig) sigmas_.push_back(static_cast<float>(v));
    sigmas_.push_back(0.0f);
    init_noise_sigma_ = euler_init_noise_sigma(config_, sigmas_);
  }

  void reset_state() override {
    derivatives_.clear();
    next_step_ = 0;
  }
  void on_start_at(int i) override { next_step_ = i; }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource*, Tensor* denoised) override {
    if (i != next_step_) {
      throw Error("lms sampler: step " + std::to_string(i) + " called where step " + std::to_string(next_step_) +
                  " was due; LMS steps must run in order (call set_timesteps() to restart)");
    }
    const std::int64_t n = x.numel();
    const float sigma = sigmas_[static_cast<std::size_t>(i)];
    Tensor x0 = be.empty({n}, DType::f32);
    predict_x0(*this, be, sigma, x, mo, x0);
    Tensor d = be.empty({n}, DType::f32);
    apply(be, LatentOp::deriv, x, &x0, d, {sigma});
    derivatives_.push_back(std::move(d));
    if (static_cast<int>(derivatives_.size()) > kOrder) derivatives_.erase(derivatives_.begin());
    const int order = std::min(i + 1, kOrder);
    // diffusers zips the coefficients with the derivatives it has: after start_at() (img2img, the
    // hires fix) the step index is ahead of the history, and only the newest terms are summed, each
    // with its coefficient of the full order (LMSDiscreteScheduler.step; k-diffusion's sample_lms
    // would restart at order 1 on the shorter schedule).
    const int terms = std::min(order, static_cast<int>(derivatives_.size()));
    // sum(coeff_k * derivative_{newest-k}), then sample + sum.
    std::array<float, 8> c{};
    std::array<const Tensor*, 4> d_k{};
    for (int k = 0; k < terms; ++k) {
      c[static_cast<std::size_t>(k)] = static_cast<float>(coefficient(order, i, k));
      d_k[static_cast<std::size_t>(k)] = &derivatives_[derivatives_.size() - 1 - static_cast<std::size_t>(k)];
    }
    if (terms == 1) {
      apply(be, LatentOp::lincomb, x, d_k[0], x, {1.0f, c[0]}, nullptr, nullptr, nullptr, 2);
    } else {
      Tensor sum = be.empty({n}, DType::f32);
      apply(be, LatentOp::lincomb, *d_k[0], d_k[1], sum, c, nullptr, d_k[2], d_k[3], terms);
      apply(be, LatentOp::lincomb, x, &sum, x, {1.0f, 1.0f}, nullptr, nullptr, nullptr, 2);
    }
    if (denoised) apply(be, LatentOp::mul, x0, nullptr, *denoised, {1.0f});
    ++next_step_;
  }

 private:
  // integral over [sigma_t, sigma_t+1] of prod_{k != j} (tau - sigma_{t-k}) / (sigma_{t-j} - sigma_{t-k}),
  // a polynomial of degree order-1 <= 3: 4-point Gauss-Legendre is exact (diffusers and
  // k-diffusion use scipy's quad, which converges to the same value).
  double coefficient(int order, int t, int j) const {
    auto s = [&](int idx) { return static_cast<double>(sigmas_[static_cast<std::size_t>(idx)]); };
    auto f = [&](double tau) {
      double prod = 1.0;
      for (int k = 0; k < order; ++k) {
        if (k == j) continue;
        prod *= (tau - s(t - k)) / (s(t - j) - s(t - k));
      }
      return prod;
    };
    static constexpr std::array<double, 4> kX{-0.8611363115940526, -0.3399810435848563, 0.3399810435848563,
                                              0.8611363115940526};
    static constexpr std::array<double, 4> kW{0.3478548451374538, 0.6521451548625461, 0.6521451548625461,
                                              0.3478548451374538};
    const double a = s(t), b = s(t + 1);
    double sum = 0.0;
    for (std::size_t q = 0; q < 4; ++q) sum += kW[q] * f(0.5 * (b - a) * kX[q] + 0.5 * (a + b));
    return 0.5 * (b - a) * sum;
  }

  std::vector<Tensor> derivatives_;  // newest last
  int next_step_ = 0;
};

// DPM++ SDE (DPMSolverSDEScheduler, k-diffusion sample_dpmpp_sde with eta 1,
// r = 1/2): per step an ancestral DPM-Solver++ step to the midpoint in
// t = -log(sigma), the model there, and the step redone from the start with that
// prediction; each stage adds noise of size sigma_up. k-diffusion (A1111,
// ComfyUI) and diffusers draw that noise from a Brownian tree (torchsde): here
// it is the run's noise source, one draw per stage, so images cannot match
// theirs bit for bit (brownian_noise_elsewhere()).
class DpmSdeSampler final : public Sampler {
 public:
  using Sampler::Sampler;
  int calls_per_step() const override { return 2; }
  bool uses_noise() const override { return true; }
  bool brownian_noise_elsewhere() const override { return true; }
  float model_sigma(int i) const override { return input_sigma(i); }

 protected:
  bool scales_model_input() const override { return true; }
  float input_sigma(int i) const override {
    const auto u = static_cast<std::size_t>(i);
    if (i % 2 == 0) return sigmas_.at(u);
    return mid_[u / 2];
  }

  void make_schedule(int n) override {
    if (config_.prediction_type == PredictionType::sample) {
      throw ConfigError(config_.origin + ": prediction_type 'sample' is not implemented by DPMSolverSDEScheduler");
    }
    std::vector<double> sig, ts;
    euler_family_schedule(config_, n, train_sigmas_, sig, ts);
    apply_sigma_schedule(sig, ts, n);
    const std::vector<float> log_sigmas = schedule::log_sigmas(train_sigmas_);
    // _second_order_timesteps: the midpoint in t = -log(sigma) of each pair, float64.
    std::vector<double> mid_t;
    mid_.clear();
    for (std::size_t k = 0; k + 1 < sig.size(); ++k) {
      const double t0 = -std::log(sig[k]), t1 = -std::log(sig[k + 1]);
      const double m = std::exp(-(t0 + (t1 - t0) * 0.5));
      mid_t.push_back(schedule::sigma_to_t(m, log_sigmas));
    }
    // sigmas [s0, s1, s1, ..., s_{n-1}, s_{n-1}, 0]; calls at t0, mid01, t1, mid12, ..., t_{n-1}.
    for (std::size_t k = 0; k < sig.size(); ++k) {
      const auto v = static_cast<float>(sig[k]);
      sigmas_.push_back(v);
      if (k > 0) sigmas_.push_back(v);
    }
    for (std::size_t k = 0; k < sig.size(); ++k) {
      timesteps_.push_back(static_cast<float>(ts[k]));
      if (k + 1 < sig.size()) timesteps_.push_back(static_cast<float>(mid_t[k]));
    }
    sigmas_.push_back(0.0f);
    // The midpoint sigma the second call of each step sees (float32, as diffusers' sigma_fn(t_proposed)).
    for (std::size_t k = 0; k + 1 < sig.size(); ++k) {
      mid_.push_back(midpoint(static_cast<float>(sig[k]), static_cast<float>(sig[k + 1])));
    }
    init_noise_sigma_ = euler_init_noise_sigma(config_, sigmas_);
  }

  void reset_state() override { saved_.reset(); }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource* noise, Tensor* denoised) override {
    const auto u = static_cast<std::size_t>(i);
    const bool first = !saved_;
    const float sigma = first ? sigmas_[u] : sigmas_[u - 1];
    const float sigma_next = first ? sigmas_[u + 1] : sigmas_[u];
    const float t = -std::log(sigma);
    const float t_next_full = -std::log(sigma_next);
    const float t_proposed = t + (t_next_full - t) * 0.5f;
    const std::int64_t n = x.numel();
    Tensor x0 = be.empty({n}, DType::f32);
    predict_x0(*this, be, first ? sigma : std::exp(-t_proposed), x, mo, x0);
    if (denoised) apply(be, LatentOp::mul, x0, nullptr, *denoised, {1.0f});
    if (sigma_next == 0.0f) {
      // The last step: Euler to 0.
      Tensor d = be.empty({n}, DType::f32);
      apply(be, LatentOp::deriv, x, &x0, d, {sigma});
      apply(be, LatentOp::lincomb, x, &d, x, {1.0f, sigma_next - sigma}, nullptr, nullptr, nullptr, 2);
      return;
    }
    const float t_next = first ? t_proposed : t_next_full;
    const float sigma_from = std::exp(-t);
    const float sigma_to = std::exp(-t_next);
    const float up =
        std::sqrt(sigma_to * sigma_to * (sigma_from * sigma_from - sigma_to * sigma_to) / (sigma_from * sigma_from));
    const float sigma_up = std::min(sigma_to, up);
    const float sigma_down = std::sqrt(sigma_to * sigma_to - sigma_up * sigma_up);
    const float ancestral_t = -std::log(sigma_down);
    const float a = std::exp(-ancestral_t) / std::exp(-t);
    const float b = -std::expm1(t - ancestral_t);
    std::vector<float> z(static_cast<std::size_t>(n));
    noise->randn(z);
    const Tensor zt = be.upload(HostTensor::from_f32({n}, z));
    if (first) {
      Tensor keep = be.empty({n}, DType::f32);
      apply(be, LatentOp::mul, x, nullptr, keep, {1.0f});
      apply(be, LatentOp::lincomb, x, &x0, x, {a, b, sigma_up}, nullptr, &zt, nullptr, 3);
      saved_ = std::move(keep);
    } else {
      apply(be, LatentOp::lincomb, *saved_, &x0, x, {a, b, sigma_up}, nullptr, &zt, nullptr, 3);
      saved_.reset();
    }
  }

 private:
  static float midpoint(float s0, float s1) {
    const float t0 = -std::log(s0);
    const float t1 = -std::log(s1);
    return std::exp(-(t0 + (t1 - t0) * 0.5f));
  }
  std::vector<float> mid_;
  std::optional<Tensor> saved_;  // the sample at the step's start, between its two calls
};

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
      timesteps_.push_back(static_cast<float>(t));
      const float a = alpha_of(alphas_cumprod_, t);
      sigmas_.push_back(std::sqrt((1.0f - a) / a));
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
      timesteps_.push_back(static_cast<float>(t));
      const float a = alpha_of(alphas_cumprod_, t);
      sigmas_.push_back(std::sqrt((1.0f - a) / a));
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
std::unique_ptr<Sampler> make_unipc_sampler(const SchedulerConfig& config) {
  return std::make_unique<DpmPpSampler>(config);
}
std::unique_ptr<Sampler> make_dpmpp_sampler(const SchedulerConfig& config) {
  return std::make_unique<DpmPpSampler>(config);
}
std::unique_ptr<Sampler> make_heun_sampler(const SchedulerConfig& config) {
  return std::make_unique<HeunSampler>(config);
}
std::unique_ptr<Sampler> make_lms_sampler(const SchedulerConfig& config) {
  return std::make_unique<LmsSampler>(config);
}
std::unique_ptr<Sampler> make_dpmpp_sde_sampler(const SchedulerConfig& config) {
  return std::make_unique<DpmSdeSampler>(config);
}
std::unique_ptr<Sampler> make_ddpm_sampler(const SchedulerConfig& config) {
  return std::make_unique<DdpmSampler>(config);
}
std::unique_ptr<Sampler> make_lcm_sampler(const SchedulerConfig& config) {
  return std::make_unique<LcmSampler>(config);
}

}  // namespace nanscope::pipeline
