#pragma once
// What a run tells its observer: value types only, so a front end can copy
// them across threads (the GUI's queued signals).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/run_config.hpp"
#include "core/tensor.hpp"
#include "inspect/inspect.hpp"
#include "io/png.hpp"
#include "models/lora.hpp"
#include "pipeline/f16_safety.hpp"

namespace nanscope::pipeline {

// Statistics over the finite values plus counts of the non-finite ones (the
// inspector's overall Stats of a map).
using TensorSummary = inspect::Stats;

struct StepReport {
  int image = 0;          // index in the batch
  int index = 0;          // model call index, 0-based: the sampler step for samplers that call the model once per step
  int steps = 0;          // model calls in the run (2n-1 for n steps of heun or dpmpp_sde)
  int sampler_step = 0;   // the sampler step this call belongs to, 0-based
  int sampler_steps = 0;  // sampler steps in the run (the steps setting, or what the schedule gives)
  int call_in_step = 0;   // which of the step's model calls (0, or 1 for the second call of heun / dpmpp_sde)
  // Which pass the step belongs to: 1, or 2 for the hires fix's second pass
  // (passes = 2 in a hires run); index and steps count within the pass.
  int pass = 1, passes = 1;
  float timestep = 0, sigma = 0;
  TensorSummary latent;        // after the step
  TensorSummary noise_cond;    // UNet output, conditional branch
  TensorSummary noise_uncond;  // UNet output, unconditional branch (count 0 without CFG)
  Shape latent_shape;
  std::vector<float> latent_values;  // the latent after the step (f32, NCHW); only for observers that want_latents()
  double seconds = 0;                // the whole step, inspector included
  double inspect_seconds = 0;        // of which the inspector's statistics, detectors and preview
  std::size_t inspect_bytes = 0;     // what the inspector read back from the device for this step
  double decode_seconds = 0;         // of which the full-decode preview (inspect.decode_every)
  inspect::StepStats stats;          // the inspector's view of this step: per channel, mask, bands, preview, verdict
};

struct DecodeAttempt {
  std::string vae;  // folder
  DType dtype = DType::f32;
  std::int64_t nonfinite = 0;
  double seconds = 0;
  inspect::ImageStats image;  // the image checks of this decode (before clamping)
};

// nan_policy=retry-layer-f32: one upcast and redo of a failed call.
struct LayerRetryAttempt {
  std::string call;       // "unet step 3", "vae decode"
  std::string origin;     // full module path of the op that broke ("vae.decoder.up_blocks.2.resnets.0.conv1")
  std::string origin_op;  // "CONV2D"
  std::string upcast;     // the override pattern set to dtype=f32 (the origin's module)
  std::int64_t nonfinite_before = 0, nonfinite_after = 0;  // non-finite values the call gave before and after
  double trace_seconds = 0;                                // the traced call that named the origin
  double redo_seconds = 0;                                 // the redone call with the module upcast
};

// What the retry-layer-f32 policy did for one image.
struct LayerRetryReport {
  bool active = false;  // the policy saw a failed call in this image
  std::vector<LayerRetryAttempt> attempts;
  std::vector<std::string> upcast;  // every module the run computes in f32 after this image (override patterns)
  int limit = 0;                    // inspect.layer_retry_limit
  bool clean = false;               // every failed call came out finite after the upcasts
  bool limit_reached = false;
  std::string remaining;  // plain English: what is still broken and why the policy stopped; empty when clean
  double seconds() const {
    double s = 0;
    for (const auto& a : attempts) s += a.trace_seconds + a.redo_seconds;
    return s;
  }
};

// One sampling pass of an image: the txt2img or img2img pass, and the hires
// fix's second pass.
struct PassReport {
  int pass = 1;
  std::string kind;  // "txt2img", "img2img", "hires"
  int width = 0, height = 0;
  int schedule_steps = 0;  // the sampler's schedule
  int start_step = 0;      // where it started in that schedule (img2img, hires: > 0 when strength < 1)
  int steps = 0;           // steps run
  std::string note;        // plain English: "hires: latent (bilinear) 8x8 -> 16x16, 2 of 4 steps (denoise 0.5)"
  double seconds = 0;
  // What the pass ran with: the hires pass may have its own (A1111's Hires sampler, prompt, CFG Scale).
  std::string sampler;   // "euler"
  std::string schedule;  // "default"
  std::string prompt, negative_prompt;
  double cfg_scale = 0;
};

struct RunReport {
  std::string device;
  std::string model;
  std::string family;
  int image = 0;
  double load_seconds = 0, text_seconds = 0, sampling_seconds = 0, decode_seconds = 0;
  int first_nonfinite_step = -1;  // first step whose latent held NaN/Inf (counted within first_nonfinite_pass)
  std::vector<DecodeAttempt> decodes;
  std::vector<std::string> kernel_notes;  // Backend::kernel_notes() at the end of the run
  // Plain English, empty when none: what keeps this image from matching the tools
  // its sampler comes from bit for bit (Brownian-tree noise in k-diffusion's SDE samplers).
  std::string reproducibility;
  std::string outcome;   // plain English: "clean", "decode gave 3145728 non-finite values; retried in f32: clean"
  bool stopped = false;  // nan_policy=stop ended the run early
  bool cancelled = false;
  inspect::RunInspection inspection;       // verdict, first bad step, origin op, image checks, layer traces
  LayerRetryReport layer_retry;            // nan_policy=retry-layer-f32
  std::vector<models::LoraSummary> loras;  // applied to the model, with their hashes (models/lora.hpp)
  bool lora_unmerged = false;
  // inspect.f16_safety: the f16-safety probe run before sampling.
  std::optional<F16SafetyReport> f16_safety;
  std::vector<PassReport> passes;  // the sampling passes run (two with the hires fix)
  int first_nonfinite_pass = 0;    // the pass of first_nonfinite_step (1-based; 0: none)
};

struct GeneratedImage {
  io::RgbImage image;
  RunConfig config;  // the config of this image alone (its seed)
  Shape latent_shape;
  std::vector<float> latent;  // the sampled latent, kept so a decode can be retried
  std::int64_t nonfinite_pixels = 0;
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_status(std::string_view message) {}
  virtual void on_text_embeddings(const HostTensor& embeddings) {}
  virtual void on_initial_noise(int image, const Shape& shape, std::span<const float> values) {}
  virtual void on_step(const StepReport& step) {}
  // True to receive every step's full latent in StepReport::latent_values (a
  // read-back of the whole latent per step; A/B divergence, tensor dumps).
  virtual bool wants_latents() const { return false; }
  virtual void on_image(const GeneratedImage& image, const RunReport& report) {}
  // Checked between steps and between components; true stops the run.
  virtual bool cancelled() const { return false; }
};

}  // namespace nanscope::pipeline
