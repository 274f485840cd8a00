#pragma once
// Reproducing an image another tool made (A1111 / SD.Next / Forge, ComfyUI):
// its settings (config/foreign_generation.hpp) mapped onto a RunConfig, the
// checkpoint, VAE and LoRA files it names found in a models folder, and
// everything NaNscope cannot run listed in plain words. Nothing is guessed
// silently: a setting that cannot be honoured is in `not_reproducible`.
//
// Finding files: the folder is searched recursively for .safetensors files
// and diffusers folders (a model_index.json; their AutoencoderKL subfolders
// count as VAEs). A hash in the image (Model hash, VAE hash, Lora hashes)
// is matched against each file's AutoV2 / AutoV1 / LoRA hash
// (io/file_hash.hpp; files whose name matches are hashed first, every hash
// goes through the cache); a name is matched against the path relative to
// the folder (ComfyUI names files by their path relative to its models
// folder), the file name, or the name without extension, ignoring case.

#include <atomic>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/foreign_generation.hpp"
#include "config/run_config.hpp"
#include "io/file_hash.hpp"

namespace nanscope::studies {

struct FoundFile {
  std::string role;            // "checkpoint", "VAE", "LoRA 'add_detail'"
  std::string wanted;          // what the image names: "v1-5-pruned [6ce0161689]"
  std::filesystem::path path;  // empty: not found
  std::string how;             // "AutoV2 hash 6ce0161689", "file name", "LoRA hash ...", or why not found
  friend bool operator==(const FoundFile&, const FoundFile&) = default;
};

struct NotReproducible {
  std::string what;    // "Hires fix", "LoRA 'x'", "sampler", "node 12 'ControlNetApply'"
  std::string reason;  // a plain sentence
  friend bool operator==(const NotReproducible&, const NotReproducible&) = default;
};

struct ReproducePlan {
  ForeignGeneration generation;
  std::filesystem::path models_dir;
  RunConfig config;
  FoundFile checkpoint;
  FoundFile vae;                 // role "" when the image uses the model's own VAE
  std::vector<FoundFile> loras;  // one per generation.loras, same order
  FoundFile hires_checkpoint;    // role "" when the image names none (A1111's "Hires checkpoint")
  std::vector<NotReproducible> not_reproducible;
  std::vector<std::string> notes;  // how things were mapped, hash cache warnings
  int hashed_files = 0;            // files hashed (not from the cache) while planning
  // False when the checkpoint was not found: a run would use another model.
  bool runnable() const { return !checkpoint.path.empty(); }
  // The config as `--set key=value` arguments (the keys that differ from the defaults).
  std::vector<std::string> sets() const;
};

// The planning's file hashing as it goes, and its cancel (the workbench plans
// on a worker thread; gui/src/reproduce_dialog.cpp).
struct PlanProgress {
  // Before each file whose hashes are looked up (hashed, or found in the
  // cache): `done` such files so far, `total` the files of the folder that may
  // be (every file in it; the search stops at the first match), `file` the next.
  std::function<void(int done, int total, const std::filesystem::path& file)> on_file;
  // When set: planning throws Cancelled before the next file or within 1 MiB
  // of hashing; the hashes finished by then are saved to the cache.
  const std::atomic<bool>* cancel = nullptr;
};

// Scans `models_dir`, finds the files and maps the settings. Throws FileError
// when models_dir is not a readable folder.
ReproducePlan plan_reproduction(const ForeignGeneration& generation, const std::filesystem::path& models_dir,
                                io::FileHashCache& cache, const PlanProgress* progress = nullptr);

// THE place that decides what of an image this version of NaNscope runs:
// fills plan.config from plan.generation and the files found (checkpoint,
// VAE), and appends to plan.not_reproducible every setting it cannot honour
// (LoRAs, hires fix, img2img / denoise < 1, samplers and schedules it lacks,
// GPU/NV noise, partial KSamplerAdvanced schedules, ENSD/eta, nodes it does
// not know, fields it does not read). Features added later are wired here.
void map_onto_run_config(ReproducePlan& plan);

// For people: the run as settings, the files and how they were found, then
// everything that cannot be reproduced.
std::string describe(const ReproducePlan& plan);
// Its two parts: the run and the files; the list of what cannot be reproduced.
std::string describe_run(const ReproducePlan& plan);
std::string describe_not_reproducible(const ReproducePlan& plan);
nlohmann::json to_json(const ReproducePlan& plan);

}  // namespace nanscope::studies
