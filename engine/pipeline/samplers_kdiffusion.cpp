// Heun, LMS and DPM++ SDE: the k-diffusion samplers on the Euler family's schedule
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

using sampler_detail::euler_init_noise_sigma;
using sampler_detail::euler_timesteps;
using sampler_detail::predict_x0;

// The Euler-family schedule of Heun, LMS and DPM++ SDE (their diffusers classes
// share Euler's spacing and sigma options): n sigmas, timesteps and the run's schedule.
void euler_family_schedule(const SchedulerConfig& c, int n, const std::vector<float>& train_sigmas,
                           std::vector<double>& sig, std::vector<double>& ts) {
  const std::vector<float> t = euler_timesteps(c, n);
  ts.assign(t.begin(), t.end());
  sig.clear();
  for (float v : t) sig.push_back(schedule::interp(v, train_sigmas));
}

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

}  // namespace

std::unique_ptr<Sampler> make_heun_sampler(const SchedulerConfig& config) {
  return std::make_unique<HeunSampler>(config);
}
std::unique_ptr<Sampler> make_lms_sampler(const SchedulerConfig& config) {
  return std::make_unique<LmsSampler>(config);
}
std::unique_ptr<Sampler> make_dpmpp_sde_sampler(const SchedulerConfig& config) {
  return std::make_unique<DpmSdeSampler>(config);
}

}  // namespace nanscope::pipeline
