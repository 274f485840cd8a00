#include "studies/scenario.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "config/inspect_settings.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/resources.hpp"
#include "inspect/fault_emulation.hpp"
#include "io/safetensors.hpp"
#include "studies/report_json.hpp"

namespace nanscope::studies {

using namespace inspect;  // the inspector's values and detectors

namespace fs = std::filesystem;

namespace {

// Keeps everything a run reports and forwards it.
class Recorder final : public pipeline::RunObserver {
 public:
  explicit Recorder(InspectedRun& run, pipeline::RunObserver* forward) : run_(run), forward_(forward) {}
  void on_status(std::string_view m) override {
    if (forward_) forward_->on_status(m);
  }
  void on_text_embeddings(const HostTensor& e) override {
    if (forward_) forward_->on_text_embeddings(e);
  }
  void on_initial_noise(int image, const Shape& s, std::span<const float> v) override {
    if (forward_) forward_->on_initial_noise(image, s, v);
  }
  void on_step(const pipeline::StepReport& s) override {
    run_.steps.push_back(s);
    run_.steps.back().latent_values.clear();  // the report keeps statistics, not tensors
    if (forward_) forward_->on_step(s);
  }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
    run_.images.push_back(img);
    run_.reports.push_back(r);
    if (forward_) forward_->on_image(img, r);
  }
  bool cancelled() const override { return forward_ && forward_->cancelled(); }
  bool wants_latents() const override { return forward_ && forward_->wants_latents(); }

 private:
  InspectedRun& run_;
  pipeline::RunObserver* forward_;
};

fs::path model_folder(const RunConfig& c) {
  return c.model.empty() ? pipeline::embedded_model_dir() : fs::path(c.model);
}

fs::path default_work_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "nanscope" / "scenarios";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "nanscope" / "scenarios";
  return fs::temp_directory_path() / "nanscope-scenarios";
}

nlohmann::json device_list_json(const DeviceList& list) {
  nlohmann::json d = nlohmann::json::array();
  for (const auto& dev : list.devices) {
    d.push_back({{"index", dev.index},
                 {"id", dev.id},
                 {"name", dev.name},
                 {"kind", device_kind_name(dev.kind)},
                 {"default", dev.is_default},
                 {"reason", dev.reason}});
  }
  return d;
}

double kernel_build_seconds(pipeline::Session& session, const std::string& pin, int* builds, int* hits) {
  double ms = 0;  // compiling only; loading a cached binary is not the cost R4 is about
  for (const auto& r : session.backend(pin).kernel_builds()) {
    if (!r.cache_hit) ms += r.ms;
    ++(r.cache_hit ? *hits : *builds);
  }
  return ms / 1000.0;
}

}  // namespace

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> list = {
      {"R0",
       "Intel Arc: power-of-two sizes corrupt a line at the top and bottom in f16/bf16 fused attention (EMULATED)",
       "R0.json", "R0-fixed.json", "sliced attention in the VAE (a nearby size such as 80x80, or f32, fixes it too)",
       Verdict::bands},
      {"R1", "NaN on some GPUs: attention with half-precision accumulation overflows (stress variant of the weights)",
       "R1.json", "R1-fixed.json", "f32 accumulation for the self-attention (attn1) modules only", Verdict::non_finite},
      {"R2", "The VAE overflows in f16 at decode (SDXL-style VAE)", "R2.json", "R2-fixed.json",
       "the fp16-fix VAE (vae-fp16-fix/); R2-retry.json: the upcast retry of the kept latent; "
       "R2-layer-retry.json: only the VAE modules that broke in f32",
       Verdict::non_finite},
      {"R3", "Wrong or missing device: a pinned device that is not there", "R3.json", "R3-fixed.json",
       "pin a device that exists (the list says which); work never moves to another device", Verdict::device_missing},
      {"R4", "Minutes of first-run kernel compilation (cold kernel cache)", "R4.json", "R4-fixed.json",
       "a warm kernel cache (nanscope-cli precompile, or any earlier run)", Verdict::slow_start},
  };
  return list;
}

const Scenario* find_scenario(std::string_view id) {
  for (const auto& s : scenarios()) {
    if (s.id.size() == id.size() &&
        std::equal(id.begin(), id.end(), s.id.begin(), [](char a, char b) { return std::toupper(a) == b; }))
      return &s;
  }
  return nullptr;
}

fs::path presets_dir() {
  return find_resource("the scenario presets", "presets", "NANSCOPE_PRESETS_DIR", "Set NANSCOPE_PRESETS_DIR.");
}

void resolve_vae_path(RunConfig& config) {
  if (config.vae.empty()) return;
  const fs::path v(config.vae);
  if (v.is_absolute() || fs::exists(v)) return;
  const fs::path in_model = model_folder(config) / v;
  if (fs::exists(in_model)) config.vae = in_model.string();
}

InspectedRun run_inspected(pipeline::Session& session, const RunConfig& config, pipeline::RunObserver* forward) {
  InspectedRun run;
  run.config = config;
  Recorder rec(run, forward);
  try {
    const auto faults = make_fault_emulator(inspect_settings(config.inspect));
    session.generate(config, &rec, faults.get());
  } catch (const DeviceError& e) {
    // Report R3: a pinned device that is missing is an error naming what exists.
    const DeviceList& list = session.devices();
    bool pinned_missing = !config.device.empty();
    for (const auto& d : list.devices)
      if (d.id == config.device || d.name == config.device) pinned_missing = false;
    if (!pinned_missing) throw;
    run.verdict = Verdict::device_missing;
    run.error = e.what();
    run.summary = "device-missing: the pinned device \"" + config.device + "\" does not exist; nothing ran";
    run.report = {{"nanscope_inspect_report", kReportVersion},
                  {"verdict", verdict_name(run.verdict)},
                  {"summary", run.summary},
                  {"error", run.error},
                  {"origin", nullptr},
                  {"first_bad_step", nullptr},
                  {"emulation", false},
                  {"devices", device_list_json(list)},
                  {"steps", nlohmann::json::array()},
                  {"config", to_json(config)}};
    add_version_fields(run.report);
    return run;
  }
  if (!run.reports.empty()) {
    const auto& ri = run.reports.front().inspection;
    run.verdict = ri.verdict;
    run.summary = ri.summary;
    run.origin = ri.origin;
    run.report = report_json(config, run.steps, run.reports.front());
    run.report["devices"] = device_list_json(session.devices());
  }
  return run;
}

fs::path make_attention_stress_model(const fs::path& model, const fs::path& out_dir, const std::string& module,
                                     float factor) {
  const fs::path weights = model / "unet" / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(weights)) {
    throw FileError(weights.string() + ": not found; the R1 stress variant is made from a diffusers folder's unet/");
  }
  // Keyed by the source folder and its weights' size and time, so a retrained model gets a new variant.
  const auto stamp = std::to_string(fs::file_size(weights)) + ":" +
                     std::to_string(fs::last_write_time(weights).time_since_epoch().count()) + ":" + model.string() +
                     ":" + module + ":" + std::to_string(factor);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(stamp));
  const fs::path dst = out_dir / (model.filename().string() + "-r1-stress-" + hex);
  if (fs::exists(dst / "model_index.json")) return dst;

  const fs::path tmp = out_dir / (dst.filename().string() + ".tmp" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const auto& e : fs::directory_iterator(model)) {
    if (e.path().filename() == "unet") continue;
    fs::copy(e.path(), tmp / e.path().filename(), fs::copy_options::recursive);
  }
  fs::create_directories(tmp / "unet");
  fs::copy_file(model / "unet" / "config.json", tmp / "unet" / "config.json");
  const auto file = io::SafetensorsFile::open(weights);
  std::vector<std::pair<std::string, HostTensor>> tensors;
  int scaled = 0;
  for (const auto& e : file.entries()) {
    HostTensor t = file.read(e, DType::f32);
    if (e.name == module + ".to_q.weight" || e.name == module + ".to_k.weight") {
      for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, t.get(i) * factor);
      ++scaled;
    }
    tensors.emplace_back(e.name, std::move(t));
  }
  if (scaled != 2) {
    fs::remove_all(tmp);
    throw FileError(weights.string() + ": no " + module +
                    ".to_q.weight / .to_k.weight to scale for the R1 stress variant");
  }
  io::write_safetensors(tmp / "unet" / "diffusion_pytorch_model.safetensors", tensors,
                        {{"nanscope_stress_variant", "R1: " + module + ".to_q/.to_k x " + std::to_string(factor)}});
  std::ofstream(tmp / "STRESS-VARIANT.md")
      << "# Stress variant (not the shipped weights)\n\nMade by `nanscope-cli scenario run R1` from " << model.string()
      << ":\nthe weights of `unet." << module << ".to_q` and `.to_k` are multiplied by " << factor
      << ", so that attention scores reach ~" << factor * factor
      << "x their size and their sums overflow f16 when accumulated in half precision (report R1).\n";
  std::error_code ec;
  fs::rename(tmp, dst, ec);
  if (ec) fs::remove_all(tmp);  // another process made it first
  return dst;
}

ScenarioRun run_scenario(const Scenario& scenario, bool fixed, const ScenarioOptions& options) {
  ScenarioRun out;
  out.scenario = &scenario;
  out.fixed = fixed;
  const fs::path preset = presets_dir() / (fixed ? scenario.fixed_preset : scenario.preset);
  RunConfig config = load_preset(preset);
  for (const auto& s : options.sets) config.set(s);
  const fs::path work = options.work_dir.empty() ? default_work_dir() : options.work_dir;

  if (scenario.id == "R1") {
    const std::string module = "mid_block.attentions.0.transformer_blocks.0.attn1";
    const float factor = 128.0f;
    fs::create_directories(work);
    config.model = make_attention_stress_model(model_folder(config), work, module, factor).string();
    out.note = "STRESS VARIANT of the weights (not the shipped model): unet." + module +
               ".to_q and .to_k multiplied by 128, made in " + config.model;
  }
  resolve_vae_path(config);

  if (scenario.id == "R4") {
    // Cold: an empty kernel cache; fixed: the cache an earlier run filled.
    const fs::path cache =
        work / (fixed ? "r4-warm"
                      : "r4-cold-" + std::to_string(::getpid()) + "-" +
                            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    if (!fixed) fs::remove_all(cache);
    fs::create_directories(cache);
    BackendOptions bo = options.backend;  // the caller's build listener too
    bo.kernel_cache_dir = cache.string();
    if (fixed) {
      pipeline::Session warmup(bo);  // fills the cache (what precompile or any earlier run does)
      run_inspected(warmup, config);
    }
    pipeline::Session session(bo);
    const auto t0 = std::chrono::steady_clock::now();
    out.run = run_inspected(session, config, options.observer);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int builds = 0, hits = 0;
    const double build_s = kernel_build_seconds(session, config.device, &builds, &hits);
    const double share = total > 0 ? build_s / total : 0;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "kernel programs: %d compiled, %d loaded from the cache; compiling took %.2f s of the run's %.2f s "
                  "(%.0f%%), cache %s",
                  builds, hits, build_s, total, share * 100.0, cache.c_str());
    out.note = buf;
    if (builds + hits == 0) out.note = "the device runs no OpenCL kernels (reference device): nothing to compile";
    out.run.report["kernel_build"] = {{"built", builds},      {"cached", hits}, {"seconds", build_s},
                                      {"run_seconds", total}, {"share", share}, {"cache_dir", cache.string()}};
    // Slow start: compiling kernels took at least 40% of the run (cold: 17
    // programs, 1-3 s of a 1.3-2 s + compile run of 8 steps of the embedded
    // model on PoCL, ~75%; warm: nothing compiled).
    if (builds > 0 && share >= 0.4 && out.run.verdict == Verdict::clean) {
      out.run.verdict = Verdict::slow_start;
      out.run.summary = "slow-start: " + out.note;
      out.run.report["verdict"] = verdict_name(out.run.verdict);
      out.run.report["summary"] = out.run.summary;
    }
    if (!fixed) fs::remove_all(cache);
  } else {
    pipeline::Session session(options.backend);
    out.run = run_inspected(session, config, options.observer);
  }
  out.run.report["scenario"] = {{"id", scenario.id},         {"title", scenario.title}, {"fixed", fixed},
                                {"preset", preset.string()}, {"fix", scenario.fix},     {"note", out.note}};
  if (!out.note.empty()) log::info("{} {}: {}", scenario.id, fixed ? "fixed" : "broken", out.note);
  return out;
}

}  // namespace nanscope::studies
