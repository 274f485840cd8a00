#pragma once
// The f16-safety probe: will this UNet or VAE overflow in f16, before the
// user waits for a whole run? One UNet call (the run's first step, with
// classifier-free guidance as the run has it) and one VAE decode (of that
// step's prediction of the final latent) run in f32 at the run's size under a
// layer trace (inspect/layer_trace.hpp). Every module's largest |activation|
// (its ops' outputs) is set against the f16 (65504) and bf16 (3.39e38)
// limits. A module is flagged when its headroom to 65504 is below
// kF16RiskHeadroom (16x), or when it reads such a value from another module
// (an f16 module casts its inputs to f16: Inf once the value passes 65504).
// The margin: the decode sees the first step's prediction of the image, which
// is tamer than a finished latent; on the embedded model's vae/ finished
// latents drove the largest activation 5x-14x higher than the probe's decode
// (measured at 32-256 px, docs/inspector.md). The proposal is the per-module
// override set that computes exactly the flagged modules in f32
// (`vae.decoder.up_blocks.2.resnets.0.conv1.dtype=f32`), grouped under a
// parent where all its modules need it.
//
// What it does not see: sums inside an op (native accumulation's partial
// sums, attention scores) that overflow while the op's output fits; the probe
// runs with accumulate=f32 semantics.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.hpp"
#include "ops/op_context.hpp"

namespace nanscope::pipeline {

class Session;

// Flag a module whose headroom to 65504 is below this factor (see above).
inline constexpr double kF16RiskHeadroom = 16;

struct ModuleHeadroom {
  std::string module;          // full module path ("vae.decoder.up_blocks.2.resnets.0.conv1")
  std::string op;              // the op with the largest output |x| in it
  double max_abs = 0;          // largest |x| of its ops' outputs (f32 run)
  double input_max = 0;        // largest |x| it reads from outside itself
  double headroom_f16 = 0;     // 65504 / max_abs (< 1: overflows; inf when max_abs is 0)
  double headroom_bf16 = 0;    // bf16's largest finite / max_abs
  bool overflows_f16 = false;  // an output of it passes 65504 already in the probe
  bool at_risk = false;        // headroom below kF16RiskHeadroom (includes overflows_f16)
  bool reads_at_risk = false;  // it reads such a value from another module
  bool flagged() const { return at_risk || reads_at_risk; }
};

struct F16SafetyReport {
  std::string model, vae, device;
  int width = 0, height = 0;
  std::vector<ModuleHeadroom> modules;  // every module of the UNet and the VAE: flagged first, then largest |x| first
  // The modules that need f32 for the run to stay finite in f16 (at risk or
  // reading a value at risk), in the order they ran.
  std::vector<std::string> flagged;
  // The proposal: `PATTERN.dtype=f32` settings (a --set each), grouped.
  std::vector<std::string> overrides;
  double unet_max = 0, vae_max = 0;  // largest |x| anywhere in each call
  double seconds = 0;
  std::string summary;  // one line
  bool safe() const { return flagged.empty(); }
};

// Runs the probe for `config` (model, VAE, size, prompt, seed, sampler, cfg).
// The model is loaded in f32 for it (Session::model). `cancel`, when set,
// stops it within one op (throws Cancelled).
F16SafetyReport check_f16_safety(Session& session, const RunConfig& config, const CancelProbe* cancel = nullptr);

// `PATH.dtype=f32` settings for the `flagged` modules: a parent replaces its
// children where every module under it (of `all`, the modules that ran) is
// flagged, repeatedly, so the settings upcast exactly the flagged modules in
// as few lines as that allows. Exposed for tests.
std::vector<std::string> group_f32_overrides(const std::vector<std::string>& flagged,
                                             const std::vector<std::string>& all);

// JSON (RunReport and `nanscope-cli probe --f16-safety --json`): model, vae,
// device, width, height, safe, flagged, overrides, unet_max, vae_max,
// seconds, summary, modules (module, op, max_abs, input_max, headroom_f16,
// headroom_bf16, overflows_f16, at_risk, reads_at_risk; null for infinite),
// risk_headroom.
nlohmann::json f16_safety_json(const F16SafetyReport& report);

}  // namespace nanscope::pipeline
