#pragma once
// Inspected runs and the five field reports (../SEEDS: R0-R4) as runnable
// scenarios. A scenario is a preset in resources/presets/ (R0.json) with a
// fixed twin (R0-fixed.json), plus what the preset alone cannot say:
//   R0  fault emulation of Intel Arc's power-of-two attention corruption
//       (inspect.emulate=r0, labelled EMULATION); fixed: sliced attention.
//   R1  f16 attention with native (half) accumulation on a STRESS VARIANT of
//       the embedded model (to_q and to_k of one attention scaled by 128, so
//       the score sums pass 65504; made on first use in the cache dir and
//       labelled in the report); fixed: f32 accumulation for attn1 only.
//   R2  the embedded model's vae/ (overflows in f16 by construction);
//       fixed: vae-fp16-fix/ (R2-retry.json: the upcast retry of the kept latent;
//       R2-layer-retry.json: nan_policy=retry-layer-f32, only the modules that broke in f32).
//   R3  a pinned device that does not exist: an error listing the devices,
//       never a silent switch; fixed: pinning one that exists.
//   R4  kernel compilation on a cold cache (an empty kernel cache dir);
//       fixed: the same run on the cache the first run filled (or precompile).

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.hpp"
#include "inspect/inspect.hpp"
#include "pipeline/run_report.hpp"
#include "pipeline/session.hpp"

namespace nanscope::studies {

struct Scenario {
  std::string id;                    // "R0"
  std::string title;                 // one line
  std::string preset, fixed_preset;  // file names in presets_dir()
  std::string fix;                   // what the fixed twin changes, one line
  inspect::Verdict broken_verdict;   // what the broken preset must be detected as
};
const std::vector<Scenario>& scenarios();
// Case-insensitive ("r1"); null when unknown.
const Scenario* find_scenario(std::string_view id);

// Where the presets are: $NANSCOPE_PRESETS_DIR, else ../share/nanscope/presets
// next to the executable, else the source tree's resources/presets. Throws
// FileError naming the places looked at.
std::filesystem::path presets_dir();

// A relative `vae` that does not exist from the working directory is looked
// up in the model folder ("vae-fp16-fix" means <model>/vae-fp16-fix).
void resolve_vae_path(RunConfig& config);

// One inspected run: the observer's view plus the JSON report of its first image.
struct InspectedRun {
  RunConfig config;
  std::vector<pipeline::StepReport> steps;
  std::vector<pipeline::RunReport> reports;
  std::vector<pipeline::GeneratedImage> images;
  inspect::Verdict verdict = inspect::Verdict::clean;
  std::string summary;
  std::string origin;
  nlohmann::json report;  // report_json() of the first image, or the device-missing report
  std::string error;      // set when the run could not start (device missing)
};

// Runs a config through a Session, keeping every step and the reports;
// `forward` (optional) sees everything too. A DeviceError for a missing pinned
// device becomes verdict device-missing with the device list in the report.
InspectedRun run_inspected(pipeline::Session& session, const RunConfig& config,
                           pipeline::RunObserver* forward = nullptr);

struct ScenarioOptions {
  std::vector<std::string> sets;   // extra key=value assignments applied after the preset (tests: steps, device)
  std::filesystem::path work_dir;  // R1's stress model and R4's cold caches; empty: $XDG_CACHE_HOME/nanscope/scenarios
  BackendOptions backend;          // kernel cache for scenarios other than R4
  pipeline::RunObserver* observer = nullptr;
};

struct ScenarioRun {
  const Scenario* scenario = nullptr;
  bool fixed = false;
  InspectedRun run;
  std::string note;  // scenario-specific facts (stress variant, build times), plain English
};
ScenarioRun run_scenario(const Scenario& scenario, bool fixed, const ScenarioOptions& options = {});

// R1's stress variant of a model folder (written to out_dir unless present):
// the same model with `module`.to_q and .to_k weights multiplied by `factor`.
std::filesystem::path make_attention_stress_model(const std::filesystem::path& model,
                                                  const std::filesystem::path& out_dir, const std::string& module,
                                                  float factor);

}  // namespace nanscope::studies
