#pragma once
// One Session::generate call (txt2img.cpp), in the stages a reader expects:
// resolve the size and contexts, encode the prompt, then per image sample,
// decode and apply the NaN policy. The run's state lives in Txt2ImgRun, not in
// the Session. Internal to the pipeline; its methods are defined in
// txt2img.cpp (preparing the run, the prompt), txt2img_sampling.cpp (the
// passes and their steps) and txt2img_retry.cpp (the decode, the NaN policy
// and retry-layer-f32).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/inspect_settings.hpp"
#include "inspect/fault_emulation.hpp"
#include "inspect/layer_trace.hpp"
#include "pipeline/component_context.hpp"
#include "pipeline/img2img.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/scheduler.hpp"
#include "pipeline/session.hpp"

namespace nanscope::pipeline::txt2img {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct ComponentContexts {
  std::unique_ptr<ComponentPolicy> te_policy, unet_policy, vae_policy;
  OpContext te, unet, vae;
};

std::unique_ptr<NoiseSource> make_noise(NoiseKind kind, std::uint64_t seed, TorchCpuKernel torch_kernel);
Tensor upload_as(Backend& be, const Shape& shape, std::span<const float> values, DType dtype);
std::vector<float> download_f32(Backend& be, const Tensor& t);
// x in dtype `to` (x itself when it already is): RNE, as an upload of its values in that dtype would round them.
Tensor cast_to(Backend& be, const Tensor& x, DType to);
// One LATENT_STEP over n values: out = op(x, m[m_off..]) with scalar c0.
void latent_op(Backend& be, LatentOp op, std::int64_t n, const Tensor& x, const Tensor* m, std::int64_t m_off,
               Tensor& out, float c0);
// Which latent -> RGB preview factors fit this model: the embedded model's
// VAE (block_out_channels 16, 32, 64 with 4 latent channels) has its own fit;
// others use their family's.
std::string preview_family(const SdModel& m);

class Txt2ImgRun {
 public:
  Txt2ImgRun(Session& session, const RunConfig& config, RunObserver& obs, FaultEmulator* faults)
      : session_(session), config_(config), obs_(obs), faults_(faults), insp_(inspect_settings(config.inspect)) {}

  // A Cancel stops the run within one op (OpContext::cancel): before the
  // first image nothing is reported; during an image, that image is reported
  // as cancelled with what it had (the latent, when sampling had finished).
  std::vector<GeneratedImage> run();

 private:
  // The observer's Cancel, asked before every op.
  struct ObserverCancel final : CancelProbe {
    explicit ObserverCancel(const RunObserver& o) : obs(o) {}
    bool cancelled() const override { return obs.cancelled(); }
    const RunObserver& obs;
  };

  // What one image's stages hand each other beyond the report.
  struct ImageState {
    std::string first_bad_note;
    bool traced_unet = false;
  };

  // Loads the model, resolves each component's precision context and the size,
  // and checks that the run fits the device.
  void prepare();

  // The hires fix's second pass, checked before any work: its size (A1111's
  // calculate_target_resolution, pipeline/img2img.hpp hires_target), its
  // sampler and schedule, and its prompt's LoRA tags.
  void prepare_hires(SdModel& m, bool resize);

  // The conditioning of each pass: the first pass's in context_/added_/cfg_,
  // the hires pass's kept apart when its prompts or guidance differ.
  void encode_conditionings();

  // The size the current pass samples at (the first pass's, or the hires fix's).
  void set_size(int width, int height);

  // SDXL's micro-conditioning: original size, crop and target size, per CFG row.
  void fill_time_ids();

  // Text: [uncond, cond] in one batch when guidance is on (diffusers' order).
  void encode_prompt(const std::string& prompt_text, const std::string& negative_prompt, bool first_pass);

  RunReport new_report(int img) const;

  // The sampling loop of one image: the latent lives on the device from here
  // to the decode (the samplers' arithmetic runs there, kernels/latent.cl, and
  // the inspector reduces it there, so a step reads back a few KB of
  // statistics, and the full latent only for an observer that asks for it).
  // Leaves the final latent in out.latent.
  void sample(std::uint64_t seed, int img, GeneratedImage& out, RunReport& report, ImageState& state);

  // noise.eta_seed_delta (A1111's ENSD, pipeline/step_noise.hpp): the per-step noise's own
  // generator, seeded seed + delta; null when the delta is 0 (the steps continue `noise`).
  std::unique_ptr<NoiseSource> step_noise(std::uint64_t seed) const;

  // What a pass ran with, for its report.
  static void describe_pass(PassReport& pass, SamplerId sampler, ScheduleId schedule, const std::string& prompt,
                            const std::string& negative, double cfg_scale);

  SchedulerConfig scheduler_config() const { return scheduler_config(config_.sampler, config_.schedule); }
  SchedulerConfig scheduler_config(SamplerId sampler, ScheduleId schedule) const;

  // The run's VAE encoder on an image [1, 3, H, W] in [-1, 1]: a sample of the
  // posterior drawn from `noise`, times scaling_factor (diffusers' retrieve_latents).
  std::vector<float> encode_image(const HostTensor& image, NoiseSource& noise);

  // The hires fix's second pass (A1111's sample_hr_pass): `latent` (the first
  // pass's, at the base size) enlarged to the hires size, re-noised from a new
  // generator seeded as the first, and sampled again for hires.steps steps.
  void hires_pass(std::uint64_t seed, int img, Tensor& latent, GeneratedImage& out, RunReport& report,
                  ImageState& state);

  void swap_conditioning();

  // The steps of one pass, from the sampler's first step to its last, on `latent` (at latent_shape_).
  void run_steps(Sampler& sampler_ref, Tensor& latent, NoiseSource* noise_src, PassReport pass, int passes, int img,
                 GeneratedImage& out, RunReport& report, ImageState& state);

  // The decode of the kept latent, traced when it fails (or always, on
  // request), then the NaN policy: decode the kept latent again in f32 or with
  // another VAE when the first decode went non-finite.
  void decode_with_policy(GeneratedImage& out, RunReport& report, ImageState&);

  void apply_nan_policy(GeneratedImage& out, RunReport& report, const DecodeAttempt& first,
                        std::optional<inspect::LayerTrace> first_trace);

  bool layer_retry_on() const { return config_.nan_policy.kind == NanPolicy::Kind::retry_layer_f32; }

  static std::int64_t count_nonfinite(Backend& be, const Tensor& t);

  // The contexts follow config_'s overrides (the retry policy adds some).
  void refresh_contexts();

  // retry-layer-f32 for one failed call (`bad` non-finite values in its
  // output): trace it (or use `known`, a trace of it as it is now), upcast the
  // module of the op that broke to f32, redo it from the same inputs, and go
  // on with the next origin until it is clean or the limit is reached.
  // `traced(tracer)` runs the call with a tracer; `redo(trace)` runs it again
  // and returns its non-finite count (setting `trace` when it traced itself).
  void layer_retry(const std::string& call, const std::string& component, std::int64_t bad,
                   std::optional<inspect::LayerTrace> known, RunReport& report,
                   const std::function<void(inspect::LayerTracer&)>& traced,
                   const std::function<std::int64_t(std::optional<inspect::LayerTrace>&)>& redo);

  // retry-layer-f32 for a failed decode: each redo decodes the kept latent
  // again with the modules found so far in f32 (traced too with inspect.trace=always).
  void retry_decode_layers(GeneratedImage& out, RunReport& report, const DecodeAttempt& first,
                           std::optional<inspect::LayerTrace> first_trace);

  // The image's layer-retry report: the modules upcast so far in the run,
  // whether it came out clean, and a line in the outcome.
  void finish_layer_retry(RunReport& report) const;

  Session& session_;
  RunConfig config_;  // the run's config; retry-layer-f32 adds dtype overrides to it
  RunObserver& obs_;
  FaultEmulator* faults_;
  const inspect::InspectSettings insp_;
  const ObserverCancel cancel_{obs_};

  SdModel* m_ = nullptr;
  Backend* be_ = nullptr;
  ComponentContexts cc_;
  double load_seconds_ = 0, text_seconds_ = 0;
  int width_ = 0, height_ = 0;            // the current pass's size
  int base_w_ = 0, base_h_ = 0;           // the first pass's
  int hires_w_ = 0, hires_h_ = 0;         // the hires fix's second pass's (0: no hires fix)
  std::optional<HostTensor> init_image_;  // img2img: the init image at the first pass's size, in [-1, 1]
  std::string init_note_;                 // how it was resized, if it was
  Shape latent_shape_;
  std::int64_t latent_n_ = 0;
  bool cfg_ = false, sdxl_ = false;
  double cfg_scale_ = 0;  // the current pass's guidance scale
  HiresTarget hires_;     // the hires fix's sizes (A1111's hr_upscale_to, truncate)
  // The hires pass's conditioning, when its prompts or guidance differ from the first pass's.
  struct Conditioning {
    Tensor context;
    models::AddedConditions added;
    bool cfg = false;
  };
  std::optional<Conditioning> hires_cond_;
  DType unet_dtype_ = DType::f32, vae_dtype_ = DType::f32;
  Tensor context_;
  models::AddedConditions added_;
  std::vector<std::string> upcast_;  // modules retry-layer-f32 set to f32 in this run, in order
  // inspect.f16_safety: the probe's result, in every image's report.
  std::optional<F16SafetyReport> f16_safety_;
};

}  // namespace nanscope::pipeline::txt2img
