#pragma once
// Samplers: the per-step update of the latent, matching diffusers 0.31's
// EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DDIMScheduler (eta 0)
// and DPMSolverMultistepScheduler (dpmsolver++, "DPM++ 2M", with or without Karras
// sigmas) for the same scheduler_config.json.
//
// The schedule (sigmas, alphas and each step's coefficients) is computed on the
// host; the tensor arithmetic runs on the backend that holds the latent
// (Backend::latent_step, kernels/latent.cl), so a pipeline keeps its latent on
// the device between steps. Every operation is done in float32 in the order
// torch evaluates diffusers' expressions (each tensor op rounded on its own, no
// fused multiply-add), so results agree with diffusers to a few ulps, and the
// reference and OpenCL backends agree bit for bit where the device divides
// correctly rounded. The span forms run the same code on host data.
//
// Use (as diffusers' StableDiffusionPipeline does):
//   auto s = make_sampler(SchedulerConfig::from_json(j, SamplerId::euler));
//   s->set_timesteps(20);
//   noise.randn(latent); multiply latent by s->init_noise_sigma();
//   for i in 0..s->num_steps()-1:
//     s->scale_model_input(be, latent, x, i); eps = unet(x, s->timesteps()[i]) (+ CFG);
//     s->step(be, eps, latent, i, &noise);

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/op_args.hpp"
#include "core/tensor.hpp"
#include "pipeline/scheduler_config.hpp"

namespace nanscope {
class Backend;
}

namespace nanscope::pipeline {

class NoiseSource;

class Sampler {
 public:
  explicit Sampler(SchedulerConfig config);
  virtual ~Sampler() = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SchedulerConfig& config() const { return config_; }
  SamplerId kind() const { return config_.kind; }

  // Computes the schedule for `steps` denoising steps (1..num_train_timesteps) and
  // resets the sampler's state. Throws ConfigError for a bad count.
  void set_timesteps(int steps);

  // Model calls to run (see calls_per_step()). For one-call samplers the requested
  // step count, except where diffusers itself yields one more (trailing spacing for
  // some counts, e.g. 61 of 1000: it appends t=-1) or the ddim_uniform schedule
  // gives another count;
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
  // unchanged for DDIM and DPM++, with torch's division. The backend form writes
  // sample (f32) into out at element offset out_offset (a row of a CFG batch).
  void scale_model_input(Backend& be, const Tensor& sample, Tensor& out, int step_index,
                         std::int64_t out_offset = 0) const;
  void scale_model_input(std::span<float> sample, int step_index) const;

  // Whether step() draws noise (Euler ancestral, the SDE samplers, DDPM, LCM).
  virtual bool uses_noise() const { return false; }
  // Whether this sampler's noise, in the tools it comes from, is drawn from a
  // Brownian tree (torchsde) rather than one randn per draw: then no seed and
  // generator reproduces the other tool's image bit for bit (the run report
  // says so); NaNscope draws its noise source instead.
  virtual bool brownian_noise_elsewhere() const { return false; }
  // Model calls per sampler step: 2 for Heun and DPM++ SDE (the second call
  // evaluates the model at the step's end or midpoint). num_steps() counts
  // model calls, as diffusers' timesteps do (2n-1 of them for n steps: call 2k
  // and 2k+1 are step k, the last step is a single Euler call); step_of_call()
  // maps a call to its step.
  virtual int calls_per_step() const { return 1; }
  int step_of_call(int call) const { return call / calls_per_step(); }
  int sampler_steps() const { return requested_steps_; }
  // The noise level the model sees at call i (the midpoint sigma for DPM++
  // SDE's second call), which the inspector reports.
  virtual float model_sigma(int i) const { return sigmas_.at(static_cast<std::size_t>(i)); }

  // One denoising step: `sample` (x_t) becomes x_{t-1} in place. `model_output` is the
  // (CFG-combined) UNet output for step `step_index`. `noise` must be given when
  // uses_noise(). `denoised`, when not empty, receives the model's x0 prediction.
  // DPM++ keeps earlier outputs, so its steps must run in order from 0.
  // The backend form: model_output, sample and denoised are f32 tensors of the
  // same size on `be`; sampler state (DPM++'s earlier outputs) stays there too.
  void step(Backend& be, const Tensor& model_output, Tensor& sample, int step_index, NoiseSource* noise = nullptr,
            Tensor* denoised = nullptr);
  // The host form runs the same code on the reference backend.
  void step(std::span<const float> model_output, std::span<float> sample, int step_index, NoiseSource* noise = nullptr,
            std::span<float> denoised = {});

  // Starting mid-schedule (img2img, the hires fix's second pass), as diffusers'
  // StableDiffusionImg2ImgPipeline does: it keeps timesteps[t_start:], calls
  // scheduler.set_begin_index(t_start) and scheduler.add_noise(x0, noise,
  // timesteps[t_start]). `sample` holds the clean latent x0 (f32) and becomes
  // the noisy latent at step `step_index` (diffusers' add_noise for this
  // sampler; `noise` is standard normal, same size); the sampler's state is
  // reset so that step() continues from `step_index` (0 <= step_index < num_steps()).
  // Call after set_timesteps().
  void start_at(Backend& be, Tensor& sample, const Tensor& noise, int step_index);
  // The step where sampling starts: 0, or what start_at() set.
  int first_step() const { return first_step_; }

 protected:
  // Fills timesteps_, sigmas_ and init_noise_sigma_ for `steps`.
  virtual void make_schedule(int steps) = 0;
  virtual void reset_state() {}
  // diffusers' add_noise of this sampler's scheduler at step i, in place on x.
  // The default is the k-diffusion form x0 + noise * sigma_i (Euler, Euler a
  // and every sampler that scales the model input by its sigma). Samplers whose
  // latent is alpha-scaled (DDIM, DPM-Solver, UniPC, DDPM, LCM: diffusers'
  // sqrt(a) * x0 + sqrt(1-a) * noise) must override it.
  virtual void add_noise(Backend& be, Tensor& x, const Tensor& noise, int i) const;
  // State for a run that starts at step i (after reset_state(); DPM++ expects step i next).
  virtual void on_start_at(int /*i*/) {}
  virtual bool scales_model_input() const { return false; }
  // The sigma scale_model_input divides by at call i.
  virtual float input_sigma(int i) const { return sigmas_.at(static_cast<std::size_t>(i)); }
  // A sigma sampler's schedule options over its class's own n sigmas `sig`
  // (descending) and timesteps `ts`: karras / exponential sigmas (diffusers'
  // _convert_to_*, from sig's ends unless the config sets sigma_min/max) and the
  // k-diffusion schedules (schedule.hpp), with fractional timesteps.
  void apply_sigma_schedule(std::vector<double>& sig, std::vector<double>& ts, int n) const;
  virtual void do_step(Backend& be, const Tensor& model_output, Tensor& sample, int i, NoiseSource* noise,
                       Tensor* denoised) = 0;
  // One LATENT_STEP over all of x's values with this sampler's prediction type.
  void apply(Backend& be, LatentOp op, const Tensor& x, const Tensor* m, Tensor& out, std::array<float, 8> c,
             Tensor* x0 = nullptr, const Tensor* h1 = nullptr, const Tensor* h2 = nullptr, int flag = 0) const;
  // out = sum of coef * tensor, left to right, in LATENT_STEP lincomb ops of up to
  // 4 terms (the multistep samplers' updates).
  void combine(Backend& be, Tensor& out, const std::vector<std::pair<double, const Tensor*>>& terms) const;

  SchedulerConfig config_;
  std::vector<float> alphas_cumprod_;  // per training timestep
  std::vector<float> train_sigmas_;    // sqrt((1-a)/a) per training timestep
  std::vector<float> timesteps_;
  std::vector<float> sigmas_;
  float init_noise_sigma_ = 1.0f;
  int requested_steps_ = 0;
  int first_step_ = 0;
};

// The sampler for config.kind.
std::unique_ptr<Sampler> make_sampler(const SchedulerConfig& config);

}  // namespace nanscope::pipeline
