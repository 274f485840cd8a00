// DPM-Solver++ (2M, 2M SDE) and UniPC: the multistep samplers on one schedule
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

}  // namespace

std::unique_ptr<Sampler> make_unipc_sampler(const SchedulerConfig& config) {
  return std::make_unique<DpmPpSampler>(config);
}
std::unique_ptr<Sampler> make_dpmpp_sampler(const SchedulerConfig& config) {
  return std::make_unique<DpmPpSampler>(config);
}

}  // namespace nanscope::pipeline
