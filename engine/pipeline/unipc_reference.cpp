// UniPC's reference implementation as A1111 and ComfyUI run it; see
// unipc_reference.hpp for what each tool does and where it is written.

#include "pipeline/unipc_reference.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/schedule.hpp"

namespace nanscope::pipeline {

int a1111_unipc_steps(int steps) {
  const int stride = 1000 / steps;
  return (1000 + stride - 1) / stride;  // len(range(0, 1000, stride))
}

namespace {

// uni_pc.py interpolate_fn for one x over keys xp (ascending) and values yp:
// the segment below x (x placed before equal keys, as torch's sort leaves it;
// the first or last segment outside the keys), then
// start_y + (x - start_x) * (end_y - start_y) / (end_x - start_x) in float32.
float interpolate(float x, const std::vector<float>& xp, const std::vector<float>& yp) {
  const auto k = static_cast<std::ptrdiff_t>(xp.size());
  const std::ptrdiff_t below = std::lower_bound(xp.begin(), xp.end(), x) - xp.begin();
  const auto seg = static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(below - 1, 0, k - 2));
  const float sx = xp[seg], ex = xp[seg + 1], sy = yp[seg], ey = yp[seg + 1];
  const float num = (x - sx) * (ey - sy);
  return sy + num / (ex - sx);
}

// torch.logaddexp(a, b) in float32.
float logaddexp(float a, float b) {
  const float m = std::max(a, b);
  if (std::isinf(m) && a == b) return a;
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}

// alpha_t, sigma_t and lambda_t = log alpha_t - log sigma_t of one time, in float32.
struct Level {
  float alpha, sigma, lambda;
};

// From log(alpha_t) as NoiseScheduleVP and SigmaConvert compute the rest.
Level level_from_log_alpha(float lm) {
  const float e = std::exp(2.0f * lm);
  const float one_minus = 1.0f - e;
  return {std::exp(lm), std::sqrt(one_minus), lm - 0.5f * std::log(one_minus)};
}

// LDM's alphas_cumprod (ldm/models/diffusion/ddpm.py register_schedule with
// make_beta_schedule: betas in float64 — "linear" is diffusers' scaled_linear —
// cumprod in float64, stored as float32), which A1111 hands to
// NoiseScheduleVP. Other beta schedules: the sampler's own (diffusers') table.
std::vector<float> ldm_alphas_cumprod(const SchedulerConfig& c, const std::vector<float>& fallback) {
  const int n = c.num_train_timesteps;
  if (!c.trained_betas.empty() || c.rescale_betas_zero_snr || c.beta_schedule == BetaSchedule::squaredcos_cap_v2) {
    return fallback;
  }
  const bool scaled = c.beta_schedule == BetaSchedule::scaled_linear;
  const double a = scaled ? std::sqrt(c.beta_start) : c.beta_start;
  const double b = scaled ? std::sqrt(c.beta_end) : c.beta_end;
  const std::vector<double> lin = schedule::numpy_linspace(a, b, n);
  std::vector<float> out;
  double prod = 1.0;
  for (double v : lin) {
    const double beta = scaled ? v * v : v;
    prod *= 1.0 - beta;
    out.push_back(static_cast<float>(prod));
  }
  return out;
}

class UniPcReferenceSampler final : public Sampler {
 public:
  explicit UniPcReferenceSampler(const SchedulerConfig& c) : Sampler(c) {
    const std::string who = c.unipc_impl == UniPcImpl::a1111 ? "A1111's UniPC" : "ComfyUI's uni_pc";
    if (c.prediction_type != PredictionType::epsilon) {
      throw ConfigError(c.origin + ": " + who + " is implemented for epsilon-prediction models only (prediction_type " +
                        std::string(to_string(c.prediction_type)) + "); use unipc.implementation=diffusers");
    }
    if (c.solver_type != DpmSolverType::bh1 && c.solver_type != DpmSolverType::bh2) {
      throw ConfigError(who + ": variant must be bh1 or bh2");
    }
  }

 protected:
  void make_schedule(int n) override {
    levels_.clear();
    if (comfy()) {
      comfy_schedule(n);
    } else {
      a1111_schedule(n);
    }
    for (const Level& l : levels_) sigmas_.push_back(l.sigma / l.alpha);
  }

  void reset_state() override {
    a1111_noise_.reset();
    history_.clear();
    last_sample_.reset();
    this_order_ = 0;
    start_ = 0;
    next_step_ = 0;
  }

  void on_start_at(int i) override {
    start_ = i;
    next_step_ = i;
    if (!comfy()) {
      a1111_start(i);
      return;
    }
    // ComfyUI samples the remaining sigmas as a new run (KSampler: sigmas[-(steps + 1):]).
    if (num_steps() - i < 2) {
      throw ConfigError("ComfyUI's uni_pc needs 2 or more steps to run (its order is min(3, steps - 1)); " +
                        std::to_string(num_steps() - i) + " remain");
    }
  }

  // The latent is alpha-scaled: alpha_i x0 + sigma_i noise (ComfyUI: (x0 + s noise) / sqrt(1 + s^2));
  // A1111 noises at its own timestep (a1111_start).
  void add_noise(Backend& be, Tensor& x, const Tensor& noise, int i) const override {
    const Level& l = levels_.at(static_cast<std::size_t>(i));
    const float a = a1111_noise_ ? a1111_noise_->alpha : l.alpha;
    const float b = a1111_noise_ ? a1111_noise_->sigma : l.sigma;
    apply(be, LatentOp::dpm1, x, &noise, x, {a, -b});
  }

  void do_step(Backend& be, const Tensor& mo, Tensor& x, int i, NoiseSource*, Tensor* denoised) override {
    if (i != next_step_) {
      throw Error("unipc sampler: step " + std::to_string(i) + " called where step " + std::to_string(next_step_) +
                  " was due; UniPC steps must run in order (call set_timesteps() to restart)");
    }
    const int steps = num_steps() - start_;  // the reference's `steps`
    const int k = i - start_;                // this call evaluates the model at the run's time k
    // ComfyUI: min(3, steps - 1) (unipc.order, 3 when auto, in place of its 3).
    const int order = comfy() ? std::min(config_.solver_order, steps - 1) : config_.solver_order;
    // data_prediction_fn: x0 = (x - sigma_t * eps) / alpha_t.
    const Level& lt = levels_[static_cast<std::size_t>(i)];
    Tensor x0 = be.empty({x.numel()}, DType::f32);
    apply(be, LatentOp::dpm_x0, x, &mo, x0, {lt.alpha, lt.sigma});
    if (denoised) apply(be, LatentOp::mul, x0, nullptr, *denoised, {1.0f});
    // The corrector of the update that reached time k, with the model's value there.
    if (k > 0) update(be, x, i - 1, this_order_, &x0);
    history_.push_back(std::move(x0));
    if (static_cast<int>(history_.size()) > std::max(order, 1)) history_.erase(history_.begin());
    // The predictor to time k + 1 ("step" k + 1 of UniPC.sample).
    const int target = k + 1;
    if (target < order) {
      this_order_ = target;
    } else {
      this_order_ = config_.lower_order_final ? std::min(order, steps + 1 - target) : order;
    }
    Tensor keep = be.empty({x.numel()}, DType::f32);
    apply(be, LatentOp::mul, x, nullptr, keep, {1.0f});
    last_sample_ = std::move(keep);
    update(be, x, i, this_order_, nullptr);
    if (comfy() && i == num_steps() - 1) {
      // sample_unipc: x /= ns.marginal_alpha(timesteps[-1]).
      apply(be, LatentOp::mul, x, nullptr, x, {1.0f / levels_.back().alpha});
    }
    ++next_step_;
  }

 private:
  bool comfy() const { return config_.unipc_impl == UniPcImpl::comfyui; }

  // ---- schedules ----

  // A1111's img2img and hires pass (modules/sd_samplers_timesteps.py sample_img2img, with
  // sd_samplers_common.setup_img2img_steps): `steps` is the whole schedule's (requested_steps_),
  // t_enc = the steps left (img2img) or one fewer (the hires fix: requested steps - 1); the latent
  // is x * sqrt(a) + noise * sqrt(1 - a) at timesteps[t_enc] of clip(range(0, 1000, 1000 // steps) + 1,
  // 0, 999), and UniPC runs t_enc steps from t_start = timesteps[t_enc - 1] / 1000 + 1/1000 (A1111's
  // own comment there: "this is likely off by a bit") down to 1/1000.
  void a1111_start(int i) {
    const int total = requested_steps_;
    const int left = total - i;
    // img2img: int(min(denoising_strength, 0.999) * steps), which is `left` below 0.999.
    const int t_enc = config_.unipc_hires_pass ? left - 1 : std::min(left, static_cast<int>(0.999 * total));
    if (t_enc < 1 || t_enc < config_.solver_order) {
      throw ConfigError("A1111's UniPC: " + std::string(config_.unipc_hires_pass ? "the hires pass" : "img2img") +
                        " runs t_enc = " + std::to_string(t_enc) + " steps, fewer than its order " +
                        std::to_string(config_.solver_order) +
                        " (A1111 itself fails: \"UniPC order must be < sampling steps\"); use more steps");
    }
    const int stride = 1000 / total;
    auto timestep = [&](int j) { return std::min(j * stride + 1, 999); };
    const std::vector<float> ac = ldm_alphas_cumprod(config_, alphas_cumprod_);
    const float a = ac.at(static_cast<std::size_t>(timestep(t_enc)));
    a1111_noise_ = Level{std::sqrt(a), std::sqrt(1.0f - a), 0.0f};
    const float t_start = static_cast<float>(timestep(t_enc - 1)) / 1000.0f + static_cast<float>(1.0 / 1000);
    const auto at = static_cast<std::size_t>(i);
    levels_.resize(at);
    timesteps_.resize(at);
    sigmas_.resize(at);
    add_a1111_times(t_start, t_enc);
    for (std::size_t j = at; j < levels_.size(); ++j) sigmas_.push_back(levels_[j].sigma / levels_[j].alpha);
    log::info("unipc (A1111): {} of {} steps from t = {} (latent noised at timestep {}), as A1111's {} does", t_enc,
              total, t_start, timestep(t_enc), config_.unipc_hires_pass ? "hires pass" : "img2img");
  }

  void a1111_schedule(int requested) {
    const SchedulerConfig& c = config_;
    if (c.solver_order > requested) {
      throw ConfigError("A1111's UniPC: order " + std::to_string(c.solver_order) + " needs at least as many steps (" +
                        std::to_string(requested) +
                        " asked); A1111 itself fails here (\"UniPC order must be < sampling steps\")");
    }
    const int n = a1111_unipc_steps(requested);
    if (n != requested) {
      log::warn("unipc (A1111): {} steps run as {}, as A1111 does (len(range(0, 1000, 1000 // {})))", requested, n,
                requested);
    }
    const int total = c.num_train_timesteps;
    // NoiseScheduleVP('discrete'): t_array = linspace(0, 1, N + 1)[1:], log_alpha = 0.5 log(alphas_cumprod).
    const std::vector<float> grid = schedule::torch_linspace_f32(0.0f, 1.0f, total + 1);
    t_array_.assign(grid.begin() + 1, grid.end());
    log_alpha_.clear();
    for (float a : ldm_alphas_cumprod(c, alphas_cumprod_)) log_alpha_.push_back(0.5f * std::log(a));
    add_a1111_times(1.0f, n);
    init_noise_sigma_ = 1.0f;
  }

  // UniPC.sample's get_time_steps from t_T down to t_0 = 1/N in n steps: the levels and the
  // model's timesteps (appended).
  void add_a1111_times(float t_T, int n) {
    const SchedulerConfig& c = config_;
    const int total = c.num_train_timesteps;
    const auto t_0 = static_cast<float>(1.0 / total);
    std::vector<float> times;
    switch (c.unipc_skip) {
      case UniPcSkip::time_uniform: times = schedule::torch_linspace_f32(t_T, t_0, n + 1); break;
      case UniPcSkip::time_quadratic: {
        // t_T ** 0.5 in float64 (a Python float, or a 0-d float32 tensor's own sqrt in img2img).
        times = schedule::torch_linspace_f32(std::sqrt(t_T), static_cast<float>(std::sqrt(1.0 / total)), n + 1);
        for (float& t : times) t = t * t;
        break;
      }
      case UniPcSkip::log_snr: {
        const float lambda_T = level_from_log_alpha(interpolate(t_T, t_array_, log_alpha_)).lambda;
        const float lambda_0 = level_from_log_alpha(interpolate(t_0, t_array_, log_alpha_)).lambda;
        // inverse_lambda: log_alpha = -0.5 logaddexp(0, -2 lambda), interpolated back to t.
        const std::vector<float> flipped_la(log_alpha_.rbegin(), log_alpha_.rend());
        const std::vector<float> flipped_t(t_array_.rbegin(), t_array_.rend());
        for (float l : schedule::torch_linspace_f32(lambda_T, lambda_0, n + 1)) {
          const float la = -0.5f * logaddexp(0.0f, -2.0f * l);
          times.push_back(interpolate(la, flipped_la, flipped_t));
        }
        break;
      }
    }
    const auto offset = static_cast<float>(1.0 / total);
    for (std::size_t j = 0; j < times.size(); ++j) {
      levels_.push_back(level_from_log_alpha(interpolate(times[j], t_array_, log_alpha_)));
      // UniPCCFG.get_model_input_time: (t - 1/N) * 1000.
      if (j + 1 < times.size()) timesteps_.push_back((times[j] - offset) * 1000.0f);
    }
  }

  void comfy_schedule(int n) {
    const SchedulerConfig& c = config_;
    std::vector<double> sig;
    if (c.use_karras_sigmas) {
      sig = schedule::karras_sigmas(train_sigmas_.front(), train_sigmas_.back(), n);
    } else {
      // ComfyUI always names a scheduler; "default" runs its `normal`.
      const ScheduleId s = c.use_exponential_sigmas                  ? ScheduleId::exponential
                           : c.schedule == ScheduleId::class_default ? ScheduleId::normal
                                                                     : c.schedule;
      sig = schedule::kdiffusion_sigmas(s, n, train_sigmas_);
    }
    if (sig.size() < 2) {
      throw ConfigError("ComfyUI's uni_pc needs 2 or more steps (its order is min(3, steps - 1)); asked for " +
                        std::to_string(sig.size()));
    }
    const std::vector<float> log_sigmas = schedule::log_sigmas(train_sigmas_);
    auto level_of = [](float s) { return level_from_log_alpha(0.5f * std::log(1.0f / (s * s + 1.0f))); };
    for (double v : sig) {
      const auto s = static_cast<float>(v);
      levels_.push_back(level_of(s));
      // ModelSamplingDiscrete.timestep: the index of the nearest log sigma.
      const float ls = std::log(s);
      std::size_t best = 0;
      for (std::size_t j = 1; j < log_sigmas.size(); ++j) {
        if (std::fabs(ls - log_sigmas[j]) < std::fabs(ls - log_sigmas[best])) best = j;
      }
      timesteps_.push_back(static_cast<float>(best));
    }
    levels_.push_back(level_of(0.001f));  // sample_unipc: timesteps[-1] = 0.001 in place of 0
    // KSAMPLER: noise * sqrt(1 + s0^2) at full denoise (sigma_0 within 1e-5 of sigma_max, or above), else
    // noise * s0; sample_unipc divides by sqrt(1 + s0^2).
    const auto s0 = static_cast<float>(sig.front());
    const float smax = train_sigmas_.back();
    const bool max_denoise = std::fabs(s0 - smax) <= 1e-5 * std::max(std::fabs(s0), std::fabs(smax)) || s0 > smax;
    init_noise_sigma_ = max_denoise ? 1.0f : s0 / std::sqrt(1.0f + s0 * s0);
  }

  // ---- multistep_uni_pc_bh_update ----

  // x becomes x at level i + 1 from level i by the predictor (corrector null) or,
  // from last_sample_, by the corrector with the model's data prediction `m_t` at i + 1.
  // history_ ends with the data prediction at level i (the corrector: at level i too,
  // m_t not yet added).
  void update(Backend& be, Tensor& x, int i, int order, const Tensor* m_t) {
    const Level& s0 = levels_[static_cast<std::size_t>(i)];
    const Level& t = levels_[static_cast<std::size_t>(i) + 1];
    const float h = t.lambda - s0.lambda;
    std::vector<double> rks;  // float ratios, as the reference computes them
    for (int q = 1; q < order; ++q) rks.push_back((levels_[static_cast<std::size_t>(i - q)].lambda - s0.lambda) / h);
    rks.push_back(1.0);
    const float hh = -h;  // predict_x0
    const float h_phi_1 = std::expm1(hh);
    float h_phi_k = h_phi_1 / hh - 1.0f;
    const float b_h = config_.solver_type == DpmSolverType::bh1 ? hh : std::expm1(hh);
    std::vector<double> b;
    float factorial = 1.0f;
    for (int q = 1; q <= order; ++q) {
      b.push_back(static_cast<double>(h_phi_k * factorial / b_h));
      factorial *= static_cast<float>(q + 1);
      h_phi_k = h_phi_k / hh - 1.0f / factorial;
    }
    std::vector<double> rho;
    const bool corrector = m_t != nullptr;
    if (!corrector && order == 2) rho = {0.5};
    if (!corrector && order > 2) rho = schedule::solve_vandermonde(rks, b, static_cast<std::size_t>(order - 1));
    if (corrector)
      rho =
          order == 1 ? std::vector<double>{0.5} : schedule::solve_vandermonde(rks, b, static_cast<std::size_t>(order));
    // x_t_ = sigma_t / sigma_s0 x - alpha_t h_phi_1 m0; x_t = x_t_ - alpha_t B(h) (sum rho_q D1_q [+ rho_c D1_t]),
    // D1_q = (m_q - m0) / r_q: one linear combination of x, m0, the older m_q and m_t.
    const double ab = static_cast<double>(t.alpha * b_h);
    const Tensor& m0 = history_.back();
    double c_m0 = -static_cast<double>(t.alpha * h_phi_1);
    std::vector<std::pair<double, const Tensor*>> older;
    for (int q = 1; q < order; ++q) {
      const double w = -ab * rho[static_cast<std::size_t>(q - 1)] / rks[static_cast<std::size_t>(q - 1)];
      older.push_back({w, &history_[history_.size() - 1 - static_cast<std::size_t>(q)]});
      c_m0 -= w;
    }
    std::vector<std::pair<double, const Tensor*>> terms;
    if (corrector) {
      const double w_t = -ab * rho.back();
      c_m0 -= w_t;
      terms = {{static_cast<double>(t.sigma / s0.sigma), &*last_sample_}, {c_m0, &m0}, {w_t, m_t}};
    } else {
      terms = {{static_cast<double>(t.sigma / s0.sigma), &x}, {c_m0, &m0}};
    }
    terms.insert(terms.end(), older.begin(), older.end());
    combine(be, x, terms);
  }

  std::vector<Level> levels_;  // num_steps() + 1: the run's times, the last where sampling ends
  std::vector<float> t_array_, log_alpha_;
  std::vector<Tensor> history_;  // data predictions, oldest first (at most `order`)
  std::optional<Tensor> last_sample_;
  std::optional<Level> a1111_noise_;  // A1111's img2img noising: sqrt(a), sqrt(1 - a) at timesteps[t_enc]
  int this_order_ = 0;
  int start_ = 0;
  int next_step_ = 0;
};

}  // namespace

std::unique_ptr<Sampler> make_unipc_reference_sampler(const SchedulerConfig& config) {
  return std::make_unique<UniPcReferenceSampler>(config);
}

}  // namespace nanscope::pipeline
