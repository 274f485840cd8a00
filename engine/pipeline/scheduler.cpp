#include "pipeline/scheduler.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/reference/reference_backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/samplers.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/unipc_reference.hpp"

namespace nanscope::pipeline {

Sampler::Sampler(SchedulerConfig config) : config_(std::move(config)) {
  // The sigma samplers keep the zero-SNR terminal alpha finite; DDIM, DDPM and LCM do not.
  alphas_cumprod_ = schedule::alphas_cumprod(config_, is_sigma_sampler(config_.kind));
  train_sigmas_ = schedule::training_sigmas(alphas_cumprod_);
}

void Sampler::set_timesteps(int steps) {
  if (steps < 1 || steps > config_.num_train_timesteps) {
    throw ConfigError(std::string(sampler_name(kind())) + ": steps = " + std::to_string(steps) + " must be 1 to " +
                      std::to_string(config_.num_train_timesteps) + " (num_train_timesteps of " + config_.origin + ")");
  }
  requested_steps_ = steps;
  first_step_ = 0;
  timesteps_.clear();
  sigmas_.clear();
  make_schedule(steps);
  reset_state();
  const int made = step_of_call(num_steps() - 1) + 1;  // sampler steps (Heun: 2n-1 calls for n)
  if (made != steps && config_.schedule == ScheduleId::ddim_uniform) {
    log::warn("{}: the ddim_uniform schedule (every {}th training sigma, ComfyUI's rule) gives {} steps for {}",
              sampler_name(kind()), std::max(config_.num_train_timesteps / steps, 1), made, steps);
  } else if (made != steps && config_.kind == SamplerId::unipc && config_.unipc_impl == UniPcImpl::a1111) {
    // unipc_reference.cpp says why (A1111's timestep list).
  } else if (made != steps) {
    log::warn(
        "{}: {} spacing with {} steps gives {} timesteps in diffusers (last t = {}); running them all, as "
        "diffusers does",
        sampler_name(kind()), to_string(config_.timestep_spacing), steps, made, timesteps_.back());
  }
}

namespace {

// The host forms' backend: plain C++ on host memory, shared (it holds no state
// of its own; every tensor owns its buffer).
Backend& host_backend() {
  static reference::ReferenceBackend be;
  return be;
}

Tensor upload_f32(Backend& be, std::span<const float> v) {
  return be.upload(HostTensor::from_f32({static_cast<std::int64_t>(v.size())}, std::vector<float>(v.begin(), v.end())));
}

void copy_back(Backend& be, const Tensor& t, std::span<float> out) {
  const std::vector<float> v = be.download(t).to_f32();
  std::copy(v.begin(), v.end(), out.begin());
}

}  // namespace

void Sampler::apply(Backend& be, LatentOp op, const Tensor& x, const Tensor* m, Tensor& out, std::array<float, 8> c,
                    Tensor* x0, const Tensor* h1, const Tensor* h2, int flag) const {
  LatentStepArgs a{op, x.numel(), x, 0, m, 0, h1, h2, out, 0, x0, c, static_cast<int>(config_.prediction_type), flag};
  be.latent_step(a);
}

void Sampler::scale_model_input(Backend& be, const Tensor& sample, Tensor& out, int step_index,
                                std::int64_t out_offset) const {
  float divisor = 1.0f;
  if (scales_model_input()) {
    const float sigma = input_sigma(step_index);
    divisor = std::sqrt(sigma * sigma + 1.0f);
  }
  // x / 1 is x: the unscaled samplers copy through the same op.
  LatentStepArgs a{LatentOp::scale, sample.numel(), sample,    0, nullptr, 0, nullptr, nullptr, out,
                   out_offset,      nullptr,        {divisor}, 0, 0};
  be.latent_step(a);
}

void Sampler::scale_model_input(std::span<float> sample, int step_index) const {
  if (!scales_model_input()) return;
  Backend& be = host_backend();
  const Tensor x = upload_f32(be, sample);
  Tensor out = be.empty(x.shape(), DType::f32);
  scale_model_input(be, x, out, step_index);
  copy_back(be, out, sample);
}

void Sampler::step(Backend& be, const Tensor& model_output, Tensor& sample, int step_index, NoiseSource* noise,
                   Tensor* denoised) {
  const std::string name(sampler_name(kind()));
  if (timesteps_.empty()) throw Error(name + " sampler: step() before set_timesteps()");
  if (step_index < 0 || step_index >= num_steps()) {
    throw Error(name + " sampler: step " + std::to_string(step_index) + " is outside 0.." +
                std::to_string(num_steps() - 1));
  }
  if (model_output.numel() != sample.numel() || (denoised && denoised->numel() != sample.numel())) {
    throw Error(name + " sampler: model output has " + std::to_string(model_output.numel()) + " values, sample " +
                std::to_string(sample.numel()) + ", denoised " + std::to_string(denoised ? denoised->numel() : 0) +
                "; they must match");
  }
  if (uses_noise() && noise == nullptr) throw Error(name + " sampler: step() needs a noise source");
  do_step(be, model_output, sample, step_index, noise, denoised);
}

void Sampler::step(std::span<const float> model_output, std::span<float> sample, int step_index, NoiseSource* noise,
                   std::span<float> denoised) {
  // The backend form checks the sizes (and everything else) on the uploaded copies.
  Backend& be = host_backend();
  const Tensor m = upload_f32(be, model_output);
  Tensor x = upload_f32(be, sample);
  Tensor d;
  if (!denoised.empty()) d = be.empty(x.shape(), DType::f32);
  step(be, m, x, step_index, noise, denoised.empty() ? nullptr : &d);
  copy_back(be, x, sample);
  if (!denoised.empty()) copy_back(be, d, denoised);
}

void Sampler::combine(Backend& be, Tensor& out, const std::vector<std::pair<double, const Tensor*>>& terms) const {
  std::size_t k = std::min<std::size_t>(terms.size(), 4);
  std::array<float, 8> c{};
  for (std::size_t j = 0; j < k; ++j) c[j] = static_cast<float>(terms[j].first);
  Tensor acc = be.empty({out.numel()}, DType::f32);
  apply(be, LatentOp::lincomb, *terms[0].second, terms[1].second, acc, c, nullptr, k > 2 ? terms[2].second : nullptr,
        k > 3 ? terms[3].second : nullptr, static_cast<int>(k));
  while (k < terms.size()) {
    const std::size_t more = std::min<std::size_t>(terms.size() - k, 3);
    std::array<float, 8> d{1.0f};
    for (std::size_t j = 0; j < more; ++j) d[j + 1] = static_cast<float>(terms[k + j].first);
    apply(be, LatentOp::lincomb, acc, terms[k].second, acc, d, nullptr, more > 1 ? terms[k + 1].second : nullptr,
          more > 2 ? terms[k + 2].second : nullptr, static_cast<int>(more + 1));
    k += more;
  }
  apply(be, LatentOp::mul, acc, nullptr, out, {1.0f});
}

void Sampler::apply_sigma_schedule(std::vector<double>& sig, std::vector<double>& ts, int n) const {
  const SchedulerConfig& c = config_;
  std::vector<double> out;
  if (c.use_karras_sigmas) {
    out = schedule::karras_sigmas(c.sigma_min.value_or(sig.back()), c.sigma_max.value_or(sig.front()), n);
  } else if (c.use_exponential_sigmas) {
    out = schedule::exponential_sigmas(c.sigma_min.value_or(sig.back()), c.sigma_max.value_or(sig.front()), n);
  } else {
    out = schedule::kdiffusion_sigmas(c.schedule, n, train_sigmas_);
  }
  if (out.empty()) return;
  const std::vector<float> log_sigmas = schedule::log_sigmas(train_sigmas_);
  sig = out;
  ts.clear();
  for (double s : sig) ts.push_back(schedule::sigma_to_t(s, log_sigmas));
}

void Sampler::start_at(Backend& be, Tensor& sample, const Tensor& noise, int step_index) {
  const std::string name(sampler_name(kind()));
  if (timesteps_.empty()) throw Error(name + " sampler: start_at() before set_timesteps()");
  if (step_index < 0 || step_index >= num_steps()) {
    throw Error(name + " sampler: start step " + std::to_string(step_index) + " is outside 0.." +
                std::to_string(num_steps() - 1));
  }
  if (noise.numel() != sample.numel()) {
    throw Error(name + " sampler: add_noise with " + std::to_string(noise.numel()) + " noise values for a latent of " +
                std::to_string(sample.numel()));
  }
  reset_state();
  first_step_ = step_index;
  on_start_at(step_index);
  add_noise(be, sample, noise, step_index);
}

void Sampler::add_noise(Backend& be, Tensor& x, const Tensor& noise, int i) const {
  // EulerDiscreteScheduler.add_noise: original_samples + noise * sigma.
  const float sigma = sigmas_.at(static_cast<std::size_t>(i));
  apply(be, LatentOp::add_scaled, x, &noise, x, {sigma});
}

std::unique_ptr<Sampler> make_sampler(const SchedulerConfig& config) {
  switch (config.kind) {
    case SamplerId::euler: return make_euler_sampler(config);
    case SamplerId::euler_a: return make_euler_ancestral_sampler(config);
    case SamplerId::ddim: return make_ddim_sampler(config);
    case SamplerId::dpmpp_2m:
    case SamplerId::dpmpp_2m_sde: return make_dpmpp_sampler(config);
    case SamplerId::dpmpp_sde: return make_dpmpp_sde_sampler(config);
    case SamplerId::heun: return make_heun_sampler(config);
    case SamplerId::lms: return make_lms_sampler(config);
    case SamplerId::ddpm: return make_ddpm_sampler(config);
    case SamplerId::lcm: return make_lcm_sampler(config);
    case SamplerId::unipc:
      // A1111's and ComfyUI's UniPC run the UniPC reference code, not diffusers' class.
      if (config.unipc_impl != UniPcImpl::diffusers) return make_unipc_reference_sampler(config);
      return make_unipc_sampler(config);
  }
  throw ConfigError("unknown sampler kind");
}

}  // namespace nanscope::pipeline
