#include "studies/reproduce.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>

#include "config/sampler_names.hpp"
#include "config/settings.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/scheduler_config.hpp"

namespace nanscope::studies {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string number_text(double v) {
  std::string s = nlohmann::json(v).dump();
  if (s.size() > 2 && s.ends_with(".0")) s.resize(s.size() - 2);
  return s;
}

enum class Role { checkpoint, vae, lora };

struct Candidate {
  fs::path path;
  std::string relative;  // '/'-separated, from the models folder
  bool folder = false;   // a diffusers folder (checkpoint) or an AutoencoderKL folder (VAE)
  bool vae_folder = false;
};

bool is_vae_folder(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) return false;
  try {
    const json j = json::parse(in);
    return j.is_object() && j.value("_class_name", "") == "AutoencoderKL";
  } catch (const json::exception&) {
    return false;
  }
}

std::vector<Candidate> scan(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw FileError(dir.string() +
                    ": not a folder; --models takes the folder that holds your checkpoints, VAEs and "
                    "LoRAs (searched recursively)");
  std::vector<Candidate> out;
  auto rel = [&](const fs::path& p) { return p.lexically_relative(dir).generic_string(); };
  fs::recursive_directory_iterator it(
      dir, fs::directory_options::follow_directory_symlink | fs::directory_options::skip_permission_denied, ec);
  if (ec) throw FileError(dir.string() + ": cannot list it (" + ec.message() + ")");
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) {
      log::warn("{}: skipped while searching for models ({})", it->path().string(), ec.message());
      ec.clear();
      continue;
    }
    if (it.depth() > 16) {
      it.disable_recursion_pending();
      continue;
    }
    const fs::path p = it->path();
    if (it->is_directory(ec)) {
      if (fs::exists(p / "model_index.json", ec)) {
        out.push_back({p, rel(p), true, false});
        for (const auto& sub : fs::directory_iterator(p, ec))
          if (sub.is_directory() && is_vae_folder(sub.path())) out.push_back({sub.path(), rel(sub.path()), true, true});
        it.disable_recursion_pending();  // its component files are not models of their own
      } else if (is_vae_folder(p)) {
        out.push_back({p, rel(p), true, true});
        it.disable_recursion_pending();
      }
    } else if (p.extension() == ".safetensors" && it->is_regular_file(ec)) {
      out.push_back({p, rel(p), false, false});
    }
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.relative < b.relative; });
  return out;
}

// The image's name against a candidate: its relative path (or a tail of it),
// its file name, or its name without extension; ignoring case and '\'.
bool name_matches(std::string wanted, const Candidate& c) {
  if (wanted.empty()) return false;
  std::replace(wanted.begin(), wanted.end(), '\\', '/');
  wanted = lower(wanted);
  const std::string rel = lower(c.relative);
  const fs::path p(rel);
  if (rel == wanted || rel.ends_with("/" + wanted)) return true;
  if (p.filename().string() == wanted) return true;
  // "model.safetensors" in the image vs "model" on disk would not happen; "model" vs "model.safetensors" does.
  const std::string stem = c.folder ? p.filename().string() : p.stem().string();
  return stem == wanted;
}

bool role_fits(Role role, const Candidate& c) {
  if (role == Role::checkpoint) return !c.vae_folder;
  if (role == Role::vae) return !c.folder || c.vae_folder;
  return !c.folder;  // LoRA: a file
}

// Which hash of a file the image's hash is, or "".
std::string hash_match(const std::string& h, const io::FileHashes& f, Role role) {
  if (h.size() >= 10 && f.sha256.starts_with(h)) return "AutoV2 hash " + h + " (sha256 of the file)";
  if (h.size() >= 10 && !f.addnet_sha256.empty() && f.addnet_sha256.starts_with(h))
    return std::string(role == Role::lora ? "LoRA" : "addnet") + " hash " + h +
           " (sha256 after the safetensors header)";
  if (h.size() == 8 && f.autov1 == h) return "AutoV1 hash " + h + " (A1111's old 64 KiB hash)";
  return {};
}

FoundFile find(Role role, const std::string& role_name, const std::string& name, const std::string& hash,
               const std::vector<Candidate>& all, const std::function<io::FileHashes(const fs::path&)>& hash_of,
               const fs::path& dir, std::vector<std::string>& notes) {
  FoundFile f;
  f.role = role_name;
  f.wanted = name + (hash.empty() ? "" : " [" + hash + "]");
  std::vector<const Candidate*> named, others;
  for (const Candidate& c : all) {
    if (!role_fits(role, c)) continue;
    (name_matches(name, c) ? named : others).push_back(&c);
  }
  if (!hash.empty()) {
    for (const auto* list : {&named, &others}) {
      for (const Candidate* c : *list) {
        if (c->folder) continue;  // A1111 hashes files; a diffusers folder has no such hash
        io::FileHashes h;
        try {
          h = hash_of(c->path);
        } catch (const FileError& e) {
          notes.push_back(std::string("could not hash a candidate: ") + e.what());
          continue;
        }
        if (std::string how = hash_match(hash, h, role); !how.empty()) {
          f.path = c->path;
          f.how = how;
          return f;
        }
      }
    }
  }
  if (!named.empty()) {
    f.path = named.front()->path;
    f.how = "file name";
    if (named.size() > 1) {
      f.how += " (" + std::to_string(named.size()) + " files match it; the first in path order)";
    }
    if (!hash.empty())
      f.how += "; NOT its hash: no file in the folder has hash " + hash + ", so this is another version of the file";
    return f;
  }
  f.how = "not found in " + dir.string() +
          (hash.empty() ? " (by name)" : " (by name or by hash; " + std::to_string(others.size()) + " files hashed)");
  return f;
}

// A1111 removes every extra-network tag (<lora:...>, <lyco:...>, <hypernet:...>)
// from the text it encodes, and nothing else: modules/extra_networks.py
// parse_prompt, re.sub(re_extra_net, "", prompt) with re_extra_net
// "<(\w+):([^>]+)>". The spaces and commas around a tag stay (a comma is a token).
std::string without_extra_networks(const std::string& prompt) {
  static const std::regex re(R"(<(\w+):([^>]+)>)");
  return std::regex_replace(prompt, re, "");
}

// The sampler the image names, as NaNscope's: A1111's display names (with
// "Schedule type" Karras folded in, as settings.cpp's sampler_from_a1111
// reads them), ComfyUI's sampler_name + scheduler.
std::optional<SamplerChoice> foreign_sampler(const ForeignGeneration& g) {
  if (g.tool == ForeignTool::a1111) return sampler_from_a1111(g.sampler, g.schedule);
  return sampler_from_comfy(g.sampler, g.schedule);
}

bool ancestral(const ForeignGeneration& g) {
  return g.sampler.find(" a") != std::string::npos || g.sampler.find("ancestral") != std::string::npos ||
         g.sampler.find("SDE") != std::string::npos || g.sampler.find("sde") != std::string::npos;
}

std::string node_kind(const std::string& cls) {
  const std::string l = lower(cls);
  if (l.find("controlnet") != std::string::npos) return "ControlNet";
  if (l.find("ipadapter") != std::string::npos) return "IPAdapter";
  if (l.find("upscale") != std::string::npos) return "upscaler";
  if (l.find("lora") != std::string::npos) return "LoRA";
  if (l.find("vaeencode") != std::string::npos) return "img2img";
  if (l.find("loadimage") != std::string::npos) return "image input";
  return "node";
}

}  // namespace

std::vector<std::string> ReproducePlan::sets() const {
  std::vector<std::string> out;
  const RunConfig defaults;
  for (const Setting& row : settings()) {
    const json v = row.get(config);
    if (v == row.get(defaults) && row.key != "seed" && row.key != "steps") continue;
    out.push_back(row.key + "=" + row.format(v));
  }
  return out;
}

namespace {

// The hires pass's own sampler, schedule, prompts, guidance and checkpoint
// (A1111 writes each only where it differs from the first pass's).
void map_hires_pass(ReproducePlan& plan) {
  const ForeignGeneration& g = plan.generation;
  RunConfig& c = plan.config;
  auto& nr = plan.not_reproducible;
  auto set = [&](const std::string& key, const std::string& value, const std::string& field) {
    try {
      c.set(key, value);
    } catch (const ConfigError& e) {
      nr.push_back({field, std::string("cannot be used: ") + e.what()});
    }
  };
  if (!g.hires_sampler.empty() || !g.hires_schedule.empty()) {
    // A1111's get_hr_sampler_and_scheduler: "Use same ..." stands for the first pass's.
    const std::string name = g.hires_sampler.empty() ? g.sampler : g.hires_sampler;
    const std::string type = g.hires_schedule.empty() ? g.schedule : g.hires_schedule;
    const std::string field = g.hires_sampler.empty() ? "Hires schedule type" : "Hires sampler";
    if (const auto choice = g.tool == ForeignTool::a1111 ? sampler_from_a1111(name, type) : std::nullopt) {
      RunConfig trial = c;
      trial.hires_sampler = choice->sampler;
      trial.hires_schedule = choice->schedule;
      try {
        pipeline::SchedulerConfig::defaults(choice->sampler).with_schedule(choice->schedule);
        trial.validate();
        c = trial;
      } catch (const ConfigError& e) {
        nr.push_back({field, "hires sampler '" + name + "' with schedule '" + type + "' cannot run here: " + e.what() +
                                 "; the hires pass uses the first pass's"});
      }
    } else {
      nr.push_back({field, "hires sampler '" + name + "'" + (type.empty() ? "" : " with schedule '" + type + "'") +
                               " is unknown to this version; the hires pass uses the first pass's sampler"});
    }
  }
  if (g.hires_prompt) {
    // The LoRAs are one set for both passes (the prompt's); a hires prompt naming others cannot be honoured.
    auto tags = [](const std::string& p) {
      std::vector<std::string> out;
      for (const ForeignLora& l : a1111_prompt_loras(p))
        out.push_back(l.name + ":" + number_text(l.clip_weight) + ":" + number_text(l.weight));
      std::sort(out.begin(), out.end());
      return out;
    };
    if (tags(*g.hires_prompt) != tags(g.prompt))
      nr.push_back({"Hires prompt",
                    "the hires prompt's LoRA tags differ from the prompt's; NaNscope applies the "
                    "prompt's LoRAs to both passes"});
    set("hires.prompt", without_extra_networks(*g.hires_prompt), "Hires prompt");
  }
  if (g.hires_negative_prompt) set("hires.negative_prompt", *g.hires_negative_prompt, "Hires negative prompt");
  if (g.hires_cfg_scale) set("hires.cfg_scale", number_text(*g.hires_cfg_scale), "Hires CFG Scale");
  if (!g.hires_checkpoint.empty()) {
    const FoundFile& f = plan.hires_checkpoint;
    if (f.path.empty()) {
      nr.push_back({"Hires checkpoint", "Hires checkpoint '" + g.hires_checkpoint + "' " + f.how +
                                            "; the hires pass cannot be reproduced (this version runs both passes "
                                            "with the first checkpoint)"});
    } else {
      nr.push_back({"Hires checkpoint", "Hires checkpoint '" + g.hires_checkpoint + "' is " + f.path.string() +
                                            ", but a second checkpoint for the hires pass is not supported by this "
                                            "version: both passes run with the first checkpoint"});
    }
  }
}

}  // namespace

void map_onto_run_config(ReproducePlan& plan) {
  const ForeignGeneration& g = plan.generation;
  RunConfig& c = plan.config;
  auto& nr = plan.not_reproducible;
  const std::string tool(foreign_tool_name(g.tool));
  auto set = [&](const std::string& key, const std::string& value, const std::string& field) {
    try {
      c.set(key, value);
    } catch (const ConfigError& e) {
      nr.push_back({field, std::string("cannot be used: ") + e.what()});
    }
  };

  if (!plan.checkpoint.path.empty()) c.model = plan.checkpoint.path.string();
  if (!plan.vae.path.empty()) c.vae = plan.vae.path.string();

  const std::string prompt = without_extra_networks(g.prompt);
  set("prompt", prompt, "prompt");
  set("negative_prompt", g.negative_prompt, "negative prompt");
  {
    static const std::regex tag(R"(<(\w+):([^>]+)>)");
    for (std::sregex_iterator it(g.prompt.begin(), g.prompt.end(), tag), end; it != end; ++it) {
      const std::string kind = (*it)[1].str();
      if (kind != "lora" && kind != "lyco")
        nr.push_back({"extra network", "prompt tag " + it->str() + " (an A1111 extra network of kind '" + kind +
                                           "') is not supported by this version; the run leaves it out"});
    }
  }
  if (g.steps) set("steps", std::to_string(*g.steps), "steps");
  if (g.cfg_scale) set("cfg_scale", number_text(*g.cfg_scale), "CFG scale");
  if (g.seed) set("seed", std::to_string(*g.seed), "seed");
  if (g.width && g.height) {
    set("width", std::to_string(*g.width), "size");
    set("height", std::to_string(*g.height), "size");
  } else {
    plan.notes.push_back("the image gives no size: the model's own default size is used");
  }
  if (g.clip_skip) set("clip_skip", std::to_string(*g.clip_skip - 1), "clip skip");

  // Sampler and schedule.
  if (g.sampler.empty()) {
    nr.push_back({"sampler", "the image names no sampler; NaNscope's default (" + std::string(sampler_name(c.sampler)) +
                                 ") is used"});
  } else if (auto s = foreign_sampler(g)) {
    RunConfig trial = c;
    trial.sampler = s->sampler;
    trial.schedule = s->schedule;
    try {
      trial.validate();
      c = trial;
    } catch (const ConfigError& e) {
      nr.push_back({"sampler", "sampler '" + g.sampler + "' with schedule '" + g.schedule + "' cannot run here: " +
                                   e.what() + "; the run uses " + std::string(sampler_name(c.sampler))});
    }
  } else {
    std::string named = "'" + g.sampler + "'";
    if (!g.schedule.empty() && g.schedule != "Automatic") named += " with schedule '" + g.schedule + "'";
    std::string known;
    for (SamplerId id : kSamplers) known += (known.empty() ? "" : ", ") + std::string(sampler_name(id));
    nr.push_back({"sampler", "sampler " + named + " unknown to this version (it has: " + known + "); the run uses " +
                                 std::string(sampler_name(c.sampler))});
  }

  // UniPC: A1111's and ComfyUI's run the UniPC reference code with their own
  // options and time steps (config/sampler_names.hpp, pipeline/unipc_reference.hpp).
  if (c.sampler == SamplerId::unipc) {
    const bool a1111 = g.tool == ForeignTool::a1111;
    const UniPcMapping m =
        a1111 ? unipc_settings_from_a1111(g.unipc_variant, g.unipc_skip_type, g.unipc_order, g.unipc_lower_order_final)
              : unipc_settings_from_comfy(g.sampler);
    for (const auto& [k, v] : m.sets) set(k, v, "UniPC");
    for (const std::string& why : m.not_reproducible) nr.push_back({"UniPC", why});
    plan.notes.push_back(a1111 ? "UniPC: A1111's own (the UniPC reference code, modules/models/diffusion/uni_pc), "
                                 "not diffusers' scheduler: unipc.implementation=a1111"
                               : "UniPC: ComfyUI's " + g.sampler +
                                     " (the UniPC reference code on the scheduler's sigmas): "
                                     "unipc.implementation=comfyui");
  }

  // Noise. A1111's GPU source is torch's CUDA generator; NaNscope's torch-cuda
  // is A1111's own "NV" computation of it (modules/rng_philox.py), which
  // agrees with a real GPU to about 3e-7 but not bit for bit (docs/reproduce.md).
  if (g.rng == "CPU") {
    c.noise = NoiseKind::torch_cpu;
  } else {
    c.noise = NoiseKind::torch_cuda;
    if (g.rng == "GPU")
      plan.notes.push_back("RNG GPU (" + tool +
                           "'s default): the initial noise is torch-cuda, A1111's NV computation of CUDA's "
                           "generator; a real GPU's values differ from it by up to about 3e-7");
  }
  // ENSD: A1111 seeds the per-step noise with seed + ENSD (pipeline/step_noise.hpp).
  if (g.ensd && *g.ensd != 0) set("noise.eta_seed_delta", std::to_string(*g.ensd), "ENSD");
  if (g.eta && ((ancestral(g) && *g.eta != 1.0) || (!ancestral(g) && *g.eta != 0.0)))
    nr.push_back({"eta", "eta " + number_text(*g.eta) +
                             " is not supported by this version (it uses the sampler's "
                             "default)"});

  // LoRAs: the files found are applied with the image's weight; the prompt's
  // tags are gone from the text (above), so lora_dir is not needed.
  for (std::size_t i = 0; i < g.loras.size(); ++i) {
    const ForeignLora& l = g.loras[i];
    const FoundFile* f = i < plan.loras.size() ? &plan.loras[i] : nullptr;
    const std::string what = "LoRA '" + l.name + "'";
    if (f == nullptr || f->path.empty()) {
      nr.push_back({what, "LoRA '" + l.name + "' not found in " + plan.models_dir.string() +
                              (l.hash.empty() ? "" : " (hash " + l.hash + ")") + "; the run leaves it out"});
    } else {
      // Separate text-encoder and UNet weights (A1111's <lora:NAME:TE:UNET>, ComfyUI's strength_clip and
      // strength_model) are applied as such.
      LoraRef r{.path = f->path.string(), .weight = l.clip_weight, .unet_weight = std::nullopt};
      if (l.weight != l.clip_weight) r.unet_weight = l.weight;
      c.loras.push_back(std::move(r));
      if (!l.unsupported.empty())
        nr.push_back({what, "LoRA '" + l.name + "': " + l.unsupported +
                                " is not supported by this version; the LoRA is applied at its full rank"});
    }
  }

  // Hires fix (A1111's sample_hr_pass: hires.* settings), img2img.
  const bool hires_pass_fields = !g.hires_sampler.empty() || !g.hires_schedule.empty() || g.hires_prompt ||
                                 g.hires_negative_prompt || g.hires_cfg_scale || !g.hires_checkpoint.empty();
  if (g.hires_upscale || g.hires_width || g.hires_height || g.hires_steps || !g.hires_upscaler.empty() ||
      hires_pass_fields) {
    if ((g.hires_width && *g.hires_width > 0) || (g.hires_height && *g.hires_height > 0)) {
      // "Hires resize: WxH": the target size, one side 0 from the first pass's aspect, another aspect cropped as
      // A1111 does (pipeline/img2img.hpp hires_target).
      set("hires.width", std::to_string(g.hires_width.value_or(0)), "Hires resize");
      set("hires.height", std::to_string(g.hires_height.value_or(0)), "Hires resize");
    } else {
      const double scale = g.hires_upscale.value_or(0.0) > 0.0 ? *g.hires_upscale : 2.0;  // A1111's default
      set("hires.scale", number_text(scale), "Hires upscale");
    }
    if (g.hires_steps) set("hires.steps", std::to_string(*g.hires_steps), "Hires steps");
    if (const std::optional<double> d = g.hires_denoise ? g.hires_denoise : g.denoise)
      set("hires.denoise", number_text(*d), "Denoising strength");
    if (!g.hires_upscaler.empty()) {
      std::optional<HiresUpscaler> up;
      for (HiresUpscaler u : {HiresUpscaler::latent, HiresUpscaler::latent_nearest, HiresUpscaler::latent_nearest_exact,
                              HiresUpscaler::lanczos})
        if (hires_upscaler_a1111_name(u) == g.hires_upscaler || hires_upscaler_name(u) == g.hires_upscaler) up = u;
      if (up) {
        c.hires_upscaler = *up;
      } else {
        c.hires_upscaler = HiresUpscaler::lanczos;
        nr.push_back({"Hires upscaler", "Hires upscaler '" + g.hires_upscaler +
                                            "' (an upscaling model or a resize NaNscope does not have): the run "
                                            "upscales the decoded image with Lanczos instead"});
      }
    }
    map_hires_pass(plan);
  } else if (g.denoise && *g.denoise < 1.0) {
    set("strength", number_text(*g.denoise), "Denoising strength");
    nr.push_back({"img2img", "denoising strength " + number_text(*g.denoise) +
                                 ": this is an img2img image, and its init image is not stored in the PNG; the run "
                                 "starts from pure noise unless you set init_image=FILE (strength is set)"});
  }
  if (!g.latent_source.empty())
    nr.push_back({"img2img", "the sampler's latent comes from a '" + g.latent_source +
                                 "' node, not an EmptyLatentImage (img2img): the init image is not stored in the "
                                 "PNG; set init_image=FILE to start from it"});
  if (g.start_step && *g.start_step > 0)
    nr.push_back({"start step", "KSamplerAdvanced starts at step " + std::to_string(*g.start_step) +
                                    ": a partial schedule is not supported by this version"});
  if (g.end_step && g.steps && *g.end_step < *g.steps)
    nr.push_back({"end step", "KSamplerAdvanced ends at step " + std::to_string(*g.end_step) + " of " +
                                  std::to_string(*g.steps) + ": a partial schedule is not supported by this version"});
  if (g.add_noise && !*g.add_noise)
    nr.push_back({"add_noise",
                  "KSamplerAdvanced add_noise=disable (the latent is denoised as it is) is not supported "
                  "by this version"});
  if (g.batch_size > 1) {
    plan.notes.push_back("the image's batch has " + std::to_string(g.batch_size) +
                         " images; the first one is reproduced (its noise is the batch's first)");
  }

  for (const ForeignNode& n : g.unsupported_nodes) {
    const std::string kind = node_kind(n.class_type);
    nr.push_back({"node " + n.id + " '" + n.class_type + "'",
                  kind + " node " + n.id + " '" + n.class_type + "' on the sampler's path (reached by " + n.reached_by +
                      "): not reproducible by this version; the run leaves it out"});
  }
  if (!g.unknown_fields.empty()) {
    std::string names;
    for (const auto& [k, v] : g.unknown_fields) names += (names.empty() ? "" : ", ") + k;
    nr.push_back(
        {"other fields", "fields this version does not read (their effect, if any, is not reproduced): " + names});
  }
  if (plan.checkpoint.path.empty()) {
    nr.push_back({"checkpoint", "checkpoint '" + plan.checkpoint.wanted + "' " + plan.checkpoint.how +
                                    "; nothing is run until it is found (point --models at the folder that holds it)"});
  }
  if (!plan.vae.role.empty() && plan.vae.path.empty())
    nr.push_back({"VAE", "VAE '" + plan.vae.wanted + "' " + plan.vae.how + "; the model's own VAE is used"});
}

ReproducePlan plan_reproduction(const ForeignGeneration& generation, const fs::path& models_dir,
                                io::FileHashCache& cache, const PlanProgress* progress) {
  ReproducePlan plan;
  plan.generation = generation;
  plan.models_dir = models_dir;
  const int hashed_before = cache.hashed();
  const std::vector<Candidate> all = scan(models_dir);
  const int total =
      static_cast<int>(std::count_if(all.begin(), all.end(), [](const Candidate& c) { return !c.folder; }));
  std::set<fs::path> looked_up;
  const std::atomic<bool>* cancel = progress ? progress->cancel : nullptr;
  const std::function<io::FileHashes(const fs::path&)> hash_of = [&](const fs::path& p) {
    if (!looked_up.count(p)) {
      if (cancel && cancel->load()) throw Cancelled("searching " + models_dir.string() + " was cancelled");
      if (progress && progress->on_file) progress->on_file(static_cast<int>(looked_up.size()), total, p);
      looked_up.insert(p);
    }
    return cache.get(p, cancel);
  };
  const ForeignGeneration& g = generation;
  try {
    if (g.model.empty() && g.model_hash.empty()) {
      plan.checkpoint = {"checkpoint", "(not named)", {}, "the image names no checkpoint"};
    } else {
      plan.checkpoint =
          find(Role::checkpoint, "checkpoint", g.model, g.model_hash, all, hash_of, models_dir, plan.notes);
    }
    if (!g.vae.empty() || !g.vae_hash.empty()) {
      const std::string name = g.vae.empty() ? std::string("(by hash)") : g.vae;
      plan.vae = find(Role::vae, "VAE", g.vae.empty() ? "" : g.vae, g.vae_hash, all, hash_of, models_dir, plan.notes);
      plan.vae.wanted = name + (g.vae_hash.empty() ? "" : " [" + g.vae_hash + "]");
    }
    for (const ForeignLora& l : g.loras)
      plan.loras.push_back(find(Role::lora, "LoRA", l.name, l.hash, all, hash_of, models_dir, plan.notes));
    if (!g.hires_checkpoint.empty()) {
      // A1111's short title "name [hash]".
      static const std::regex title(R"(^(.*?)\s*\[([0-9a-fA-F]{8,64})\]\s*$)");
      std::smatch m;
      const bool titled = std::regex_match(g.hires_checkpoint, m, title);
      plan.hires_checkpoint = find(Role::checkpoint, "hires checkpoint", titled ? m[1].str() : g.hires_checkpoint,
                                   titled ? lower(m[2].str()) : "", all, hash_of, models_dir, plan.notes);
    }
  } catch (const Cancelled&) {
    cache.save();  // the files hashed before the cancel are not hashed again
    throw;
  }
  if (progress && progress->on_file) progress->on_file(static_cast<int>(looked_up.size()), total, {});
  cache.save();
  for (const std::string& w : cache.warnings()) plan.notes.push_back(w);
  plan.hashed_files = cache.hashed() - hashed_before;
  map_onto_run_config(plan);
  return plan;
}

std::string describe(const ReproducePlan& plan) {
  return describe_run(plan) + "\nCannot be reproduced:\n" + describe_not_reproducible(plan);
}

std::string describe_not_reproducible(const ReproducePlan& plan) {
  std::string s;
  if (plan.not_reproducible.empty()) s += "  nothing: every setting the image records is reproduced\n";
  for (const NotReproducible& n : plan.not_reproducible) s += "  - " + n.reason + "\n";
  return s;
}

std::string describe_run(const ReproducePlan& plan) {
  const ForeignGeneration& g = plan.generation;
  std::string s = "Image made by " + std::string(foreign_tool_name(g.tool)) +
                  (g.version.empty() ? "" : " " + g.version) + "\n\nWhat will run:\n";
  for (const std::string& set : plan.sets()) {
    // Quoted for a shell when it holds anything but plain characters.
    const bool plain = set.find_first_of(" \t\n'\"\\$`!*?;&|<>()[]{}#~") == std::string::npos;
    std::string quoted = "'";
    for (char ch : set) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    s += "  --set " + (plain ? set : quoted + "'") + "\n";
  }
  s += "\nFiles:\n";
  auto file = [&](const FoundFile& f) {
    if (f.role.empty()) return;
    s += "  " + f.role + " " + f.wanted + ": ";
    s += f.path.empty() ? f.how : f.path.string() + " (by " + f.how + ")";
    s += "\n";
  };
  file(plan.checkpoint);
  if (plan.vae.role.empty()) {
    s += "  VAE: the model's own\n";
  } else {
    file(plan.vae);
  }
  for (const FoundFile& f : plan.loras) file(f);
  file(plan.hires_checkpoint);  // not run: the not-reproducible list says so
  s += "  (" + std::to_string(plan.hashed_files) + " file(s) hashed now; the others' hashes came from the cache)\n";
  for (const std::string& n : plan.notes) s += "  note: " + n + "\n";
  return s;
}

json to_json(const ReproducePlan& plan) {
  json j;
  j["generation"] = to_json(plan.generation);
  j["models_dir"] = plan.models_dir.string();
  j["sets"] = plan.sets();
  auto file = [](const FoundFile& f) {
    return json{{"role", f.role}, {"wanted", f.wanted}, {"path", f.path.string()}, {"how", f.how}};
  };
  j["files"] = json::array();
  j["files"].push_back(file(plan.checkpoint));
  if (!plan.vae.role.empty()) j["files"].push_back(file(plan.vae));
  for (const auto& f : plan.loras) j["files"].push_back(file(f));
  if (!plan.hires_checkpoint.role.empty()) j["files"].push_back(file(plan.hires_checkpoint));
  j["not_reproducible"] = json::array();
  for (const auto& n : plan.not_reproducible) j["not_reproducible"].push_back({{"what", n.what}, {"reason", n.reason}});
  j["notes"] = plan.notes;
  j["hashed_files"] = plan.hashed_files;
  j["runnable"] = plan.runnable();
  return j;
}

}  // namespace nanscope::studies
