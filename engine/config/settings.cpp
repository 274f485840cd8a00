#include "config/settings.hpp"

#include <spdlog/fmt/fmt.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <regex>

#include "config/a1111.hpp"
#include "config/lora_list.hpp"
#include "config/sampler_names.hpp"
#include "config/setting_rows.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/file_hash.hpp"

namespace nanscope {

namespace {

using config_detail::fail;
using nlohmann::json;
using namespace setting_rows;

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

template <typename Int>
std::optional<Int> parse_integer(std::string_view v) {
  Int out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) return std::nullopt;
  return out;
}

std::string integer_text(double v) { return std::to_string(static_cast<long long>(v)); }

// An inspector setting: kept in RunConfig::inspect under its name (the key
// without "inspect."), and absent there while it holds its default, so that
// presets leave it out and configs that differ only in spelling out a default
// compare equal.
Setting inspector(Setting s) {
  const std::string name = s.key.substr(std::string_view("inspect.").size());
  const json def = s.default_json();
  s.omit_default = true;
  s.get = [name, def](const RunConfig& c) {
    return c.inspect.is_object() && c.inspect.contains(name) ? c.inspect.at(name) : def;
  };
  s.put = [name, def](RunConfig& c, const json& v) {
    if (!c.inspect.is_object()) c.inspect = json::object();
    if (v == def) {
      c.inspect.erase(name);
    } else {
      c.inspect[name] = v;
    }
  };
  return s;
}

template <typename Part, typename T>
PrecisionField field(Setting spec, Part ComponentPrecision::*part, T Part::*m, std::optional<T> PrecisionOverride::*o,
                     std::function<json(T)> to, std::function<T(const json&)> from) {
  PrecisionField f;
  f.spec = std::move(spec);
  f.get = [=](const ComponentPrecision& cp) { return to((cp.*part).*m); };
  f.put = [=](ComponentPrecision& cp, const json& v) { (cp.*part).*m = from(v); };
  f.get_override = [=](const PrecisionOverride& po) { return po.*o ? to(*(po.*o)) : json(); };
  f.put_override = [=](PrecisionOverride& po, const json& v) {
    if (v.is_null()) {
      (po.*o).reset();
    } else {
      po.*o = from(v);
    }
  };
  return f;
}

template <typename Part, typename E>
PrecisionField enum_field(Setting spec, const Codec<E>& codec, Part ComponentPrecision::*part, E Part::*m,
                          std::optional<E> PrecisionOverride::*o) {
  spec.type = SettingType::choice;
  spec.choices = codec.names();
  spec.canonical = codec.canonical();
  return field<Part, E>(
      std::move(spec), part, m, o, [codec](E e) { return codec.to_json(e); },
      [codec](const json& v) { return codec.from_json(v); });
}

// ---------------------------------------------------------------- the table

std::vector<PrecisionField> build_precision_fields() {
  std::vector<PrecisionField> f;
  f.push_back(enum_field({.key = "dtype", .default_value = "f32", .help = "Storage type of weights and activations"},
                         kDTypeCodec, &ComponentPrecision::precision, &Precision::dtype, &PrecisionOverride::dtype));
  f.push_back(enum_field({.key = "accumulate",
                          .default_value = "f32",
                          .help = "Sums in matmul, convolution and attention: f32, or rounded to the storage type at "
                                  "every partial sum, as half-precision hardware accumulation does (report R1)"},
                         kAccumulateCodec, &ComponentPrecision::precision, &Precision::accumulate,
                         &PrecisionOverride::accumulate));
  f.push_back(enum_field({.key = "attention.softmax",
                          .default_value = "f32",
                          .help = "Attention scores and softmax: upcast to f32, or kept in the storage type"},
                         kSoftmaxCodec, &ComponentPrecision::precision, &Precision::softmax,
                         &PrecisionOverride::softmax));
  f.push_back(enum_field({.key = "attention.impl",
                          .default_value = "fused",
                          .help = "Attention algorithm: fused (one pass, online softmax), bmm (the full score "
                                  "matrix), sliced (the score matrix in slices of slice_size heads)"},
                         kImplCodec, &ComponentPrecision::attention, &AttentionConfig::impl, &PrecisionOverride::impl));
  f.push_back(field<AttentionConfig, int>(
      {.key = "attention.slice_size",
       .type = SettingType::integer,
       .default_value = "1",
       .min = 1,
       .max = 65536,
       .help = "Heads per slice for the sliced attention implementation"},
      &ComponentPrecision::attention, &AttentionConfig::slice_size, &PrecisionOverride::slice_size,
      [](int n) { return json(n); }, [](const json& v) { return v.get<int>(); }));
  return f;
}

std::string_view component_label(Component c) {
  switch (c) {
    case Component::text_encoder: return "text encoder";
    case Component::unet: return "UNet";
    case Component::vae: return "VAE";
  }
  return "?";
}

// One row per component and precision field: `unet.dtype`, kept at precision.unet.dtype.
void add_precision_rows(std::vector<Setting>& t) {
  for (Component comp : kComponents) {
    for (const PrecisionField& f : precision_fields()) {
      Setting s = f.spec;
      s.key = std::string(component_name(comp)) + "." + f.spec.key;
      s.json_path = "precision." + s.key;
      s.help = f.spec.help + " (" + std::string(component_label(comp)) + ")";
      s.get = [comp, get = f.get](const RunConfig& c) { return get(c.component(comp)); };
      s.put = [comp, put = f.put](RunConfig& c, const json& v) { put(c.component(comp), v); };
      t.push_back(std::move(s));
    }
  }
}

// "Clip skip: N" counts the last layer as 1; clip_skip counts the layers skipped.
void clip_skip_from_a1111(RunConfig& c, const std::string& value, const A1111Fields&) {
  const double most = setting("clip_skip").max + 1;
  const auto n = parse_integer<long long>(trim(value));
  if (!n || *n < 1 || *n > most) throw ConfigError("expected an integer from 1 to " + integer_text(most));
  c.set("clip_skip", std::to_string(*n - 1));
}

// A1111 writes "DPM++ 2M Karras" or, since 1.9, "DPM++ 2M" with "Schedule
// type: Karras"; both set the sampler and the schedule (config/sampler_names.hpp).
void sampler_row_from_a1111(RunConfig& c, const std::string& value, const A1111Fields& all) {
  const auto sched = all.find("Schedule type");
  const std::string type = sched == all.end() ? std::string() : sched->second;
  if (const auto choice = sampler_from_a1111(value, type)) {
    c.sampler = choice->sampler;
    c.schedule = choice->schedule;
    // A plain name without "Schedule type" is also what NaNscope writes for
    // schedule=default (A1111 has no name for it): read it back as default, so
    // the text round-trips. sampler_from_a1111() says what A1111 itself ran
    // for such a name (k-diffusion's own spacing) for callers reproducing it.
    if (type.empty() && value == sampler_a1111_name(choice->sampler)) c.schedule = ScheduleId::class_default;
    return;
  }
  log::warn("A1111 sampler \"{}\"{} has no NaNscope counterpart; keeping {} with the {} schedule", value,
            type.empty() ? "" : " with schedule type \"" + type + "\"", sampler_name(c.sampler),
            schedule_name(c.schedule));
}

// The sampler row: one of the samplers, or "dpmpp_2m_karras", the name
// earlier versions wrote for dpmpp_2m with the karras schedule (presets, PNGs
// and --set keep loading; the schedule row, applied after, may override it).
Setting sampler_row(Setting s) {
  s.type = SettingType::choice;
  s.choices = kSamplerCodec.names();
  s.canonical = [](std::string_view v) -> std::optional<std::string> {
    if (v == "dpmpp_2m_karras") return std::string(v);
    if (auto id = parse_sampler(v)) return std::string(sampler_name(*id));
    return std::nullopt;
  };
  s.get = [](const RunConfig& c) { return json(std::string(sampler_name(c.sampler))); };
  s.put = [](RunConfig& c, const json& v) {
    const std::string name = v.get<std::string>();
    if (name == "dpmpp_2m_karras") {
      c.sampler = SamplerId::dpmpp_2m;
      c.schedule = ScheduleId::karras;
      return;
    }
    c.sampler = *parse_sampler(name);
  };
  return s;
}

void size_from_a1111(RunConfig& c, const std::string& value, const A1111Fields&) {
  static const std::regex size_re(R"((\d+)x(\d+))");
  std::smatch m;
  if (!std::regex_match(value, m, size_re)) throw ConfigError("expected WxH");
  c.set("width", m[1].str());
  c.set("height", m[2].str());
}

std::vector<Setting> build_table() {
  std::vector<Setting> t;
  const std::string size_help = " in pixels; 0: the size the model was trained at";
  t.push_back(member(&RunConfig::prompt, {.key = "prompt",
                                          .max = kMaxPromptBytes,
                                          .help = "What to draw (kept as written, spaces included)",
                                          .keep_spaces = true}));
  t.push_back(member(&RunConfig::negative_prompt, {.key = "negative_prompt",
                                                   .max = kMaxPromptBytes,
                                                   .help = "What to steer away from; empty: nothing",
                                                   .keep_spaces = true}));
  t.push_back(member(&RunConfig::steps, {.key = "steps",
                                         .type = SettingType::integer,
                                         .default_value = "20",
                                         .min = 1,
                                         .max = 10000,
                                         .help = "Sampling steps",
                                         .a1111 = "Steps"}));
  t.push_back(sampler_row({.key = "sampler",
                           .default_value = "euler",
                           .help = "The sampler (A1111: Euler, Euler a, DDIM, DPM++ 2M, DPM++ 2M SDE, DPM++ SDE, Heun, "
                                   "LMS, UniPC, DDPM, LCM); heun and dpmpp_sde call the model twice per step. "
                                   "dpmpp_2m_karras is read as dpmpp_2m with schedule=karras",
                           .a1111 = "Sampler",
                           .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                             return std::string(sampler_a1111_name(c.sampler));
                           },
                           .from_a1111 = sampler_row_from_a1111}));
  t.push_back(enum_member(&RunConfig::schedule, kScheduleCodec,
                          {.key = "schedule",
                           .default_value = "default",
                           .help = "The noise levels the sampler visits (A1111's Schedule type, ComfyUI's scheduler): "
                                   "default (the sampler's diffusers class, from the model's scheduler_config.json), "
                                   "karras, exponential, sgm_uniform, simple, normal (k-diffusion's own spacing), "
                                   "ddim_uniform. Sigma samplers take any; ddim, ddpm and lcm only default",
                           .a1111 = "Schedule type",
                           .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                             if (auto label = a1111_schedule_label(c.schedule)) return std::string(*label);
                             return std::nullopt;
                           },
                           // Read with the sampler (the sampler row sees every field).
                           .from_a1111 = [](RunConfig&, const std::string&, const A1111Fields&) {}}));
  t.push_back(member(&RunConfig::cfg_scale,
                     {.key = "cfg_scale",
                      .type = SettingType::number,
                      .default_value = "7",
                      .min = 0,
                      .max = 100,
                      .help = "Classifier-free guidance scale; 1 or below turns guidance off (one UNet pass per step)",
                      .a1111 = "CFG scale"}));
  Setting seed{.key = "seed",
               .type = SettingType::seed,
               .default_value = "1",
               .help =
                   "Seed of the first image (the others take seed+1, seed+2, ...); setting it drops an "
                   "explicit seeds list",
               .a1111 = "Seed"};
  seed.get = [](const RunConfig& c) { return json(c.seed); };
  seed.put = [](RunConfig& c, const json& v) {
    c.seed = v.get<std::uint64_t>();
    c.seeds.clear();
  };
  t.push_back(std::move(seed));
  // Applied before batch_size (presets apply rows in table order): seeds sets
  // the batch size, and a batch_size given beside it must agree.
  Setting seeds{.key = "seeds",
                .type = SettingType::seed_list,
                .max = 64,
                .help =
                    "Explicit per-image seeds; sets batch_size to their count and seed to the first. "
                    "Empty: seed, seed+1, ..."};
  seeds.get = [](const RunConfig& c) { return json(c.seeds); };
  seeds.put = [](RunConfig& c, const json& v) {
    c.seeds = v.get<std::vector<std::uint64_t>>();
    if (!c.seeds.empty()) {
      c.seed = c.seeds.front();
      c.batch_size = static_cast<int>(c.seeds.size());
    }
  };
  t.push_back(std::move(seeds));
  Setting batch{.key = "batch_size",
                .type = SettingType::integer,
                .default_value = "1",
                .min = 1,
                .max = 64,
                .help = "Images per run, with seeds seed, seed+1, ... (an explicit seeds list fixes it)"};
  batch.get = [](const RunConfig& c) { return json(c.batch_size); };
  batch.put = [](RunConfig& c, const json& v) {
    const int n = v.get<int>();
    if (!c.seeds.empty() && static_cast<std::size_t>(n) != c.seeds.size()) {
      fail("batch_size", std::to_string(n) + " conflicts with the " + std::to_string(c.seeds.size()) +
                             " explicit seeds; set seeds= (empty) first, or set seeds to " + std::to_string(n) +
                             " values");
    }
    c.batch_size = n;
  };
  t.push_back(std::move(batch));
  t.push_back(member(&RunConfig::width, {.key = "width",
                                         .type = SettingType::size,
                                         .default_value = "0",
                                         .min = 8,
                                         .max = 16384,
                                         .help = "Image width" + size_help,
                                         .a1111 = "Size",
                                         .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                                           if (c.width <= 0 || c.height <= 0) return std::nullopt;
                                           return std::to_string(c.width) + "x" + std::to_string(c.height);
                                         },
                                         .from_a1111 = size_from_a1111}));
  t.push_back(member(&RunConfig::height, {.key = "height",
                                          .type = SettingType::size,
                                          .default_value = "0",
                                          .min = 8,
                                          .max = 16384,
                                          .help = "Image height" + size_help,
                                          .a1111 = "Size"}));
  t.push_back(
      member(&RunConfig::model,
             {.key = "model",
              .help = "A diffusers model folder or a single-file checkpoint (.safetensors); empty: the "
                      "embedded model",
              .a1111 = "Model",
              .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> { return model_display_name(c.model); },
              .a1111_read = false}));
  t.push_back(member(&RunConfig::vae, {.key = "vae",
                                       .help = "A VAE folder or file that replaces the model's own; empty: the "
                                               "model's own",
                                       .a1111 = "VAE",
                                       .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                                         if (c.vae.empty()) return std::nullopt;
                                         return model_display_name(c.vae);
                                       },
                                       .a1111_read = false}));
  t.push_back(member(&RunConfig::clip_skip,
                     {.key = "clip_skip",
                      .type = SettingType::integer,
                      .default_value = "0",
                      .min = 0,
                      .max = 24,
                      .help = "Text encoder layers skipped from the end, as diffusers' clip_skip (0: the last layer; "
                              "A1111's \"Clip skip: N\" is N-1 here)",
                      .a1111 = "Clip skip",
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (c.clip_skip < 1) return std::nullopt;
                        return std::to_string(c.clip_skip + 1);
                      },
                      .from_a1111 = clip_skip_from_a1111}));
  t.push_back(enum_member(&RunConfig::noise, kNoiseCodec,
                          {.key = "noise",
                           .default_value = "nanscope",
                           .help = "Initial and per-step noise: nanscope (the same on every device), torch-cpu "
                                   "(torch.randn on the CPU: diffusers, A1111's CPU RNG) or torch-cuda "
                                   "(torch.randn on a CUDA device: A1111's default GPU RNG and its NV source)",
                           .a1111 = "RNG",
                           .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                             if (c.noise == NoiseKind::torch_cpu) return "CPU";
                             if (c.noise == NoiseKind::torch_cuda) return "NV";
                             return std::nullopt;
                           },
                           // A1111's NV source reproduces its GPU one on any device.
                           .from_a1111 =
                               [](RunConfig& c, const std::string& v, const A1111Fields&) {
                                 if (v == "CPU") c.noise = NoiseKind::torch_cpu;
                                 if (v == "NV" || v == "GPU") c.noise = NoiseKind::torch_cuda;
                               }}));
  t.push_back(enum_member(&RunConfig::torch_cpu_kernel, kTorchCpuKernelCodec,
                          {.key = "noise.torch_cpu_kernel",
                           .default_value = "auto",
                           .help = "Which of torch's CPU normal kernels torch-cpu noise matches (they differ in the "
                                   "last bits): auto (the one torch picks on this CPU), avx2, or default (CPUs "
                                   "without AVX2, or torch run with ATEN_CPU_CAPABILITY=default)",
                           .json_path = "torch_cpu_kernel",  // "noise" itself is a string in presets
                           .omit_default = true}));
  t.push_back(member(&RunConfig::eta_seed_delta,
                     {.key = "noise.eta_seed_delta",
                      .type = SettingType::integer,
                      .default_value = "0",
                      .min = -2147483648.0,
                      .max = 2147483647.0,
                      .help = "A1111's Eta noise seed delta (ENSD, e.g. 31337): when not 0, the noise samplers add at "
                              "each step (euler_a, ddpm, lcm, the SDE samplers) comes from a new generator of the "
                              "noise kind seeded seed + this; 0: the initial noise's own stream continues",
                      .a1111 = "ENSD",
                      .json_path = "eta_seed_delta",  // "noise" itself is a string in presets
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (c.eta_seed_delta == 0) return std::nullopt;
                        return std::to_string(c.eta_seed_delta);
                      }}));
  // UniPC's implementation and options (pipeline/unipc_reference.hpp).
  t.push_back(member(&RunConfig::unipc_implementation,
                     {.key = "unipc.implementation",
                      .type = SettingType::choice,
                      .default_value = "diffusers",
                      .choices = {"diffusers", "a1111", "comfyui"},
                      .help = "Which UniPC the unipc sampler runs: diffusers (UniPCMultistepScheduler, the model's "
                              "scheduler_config.json), a1111 (A1111's \"UniPC\": the UniPC reference code on "
                              "continuous time steps, unipc.skip_type) or comfyui (uni_pc / uni_pc_bh2: the reference "
                              "code on the run's schedule of sigmas)",
                      .omit_default = true}));
  t.push_back(member(&RunConfig::unipc_variant,
                     {.key = "unipc.variant",
                      .type = SettingType::choice,
                      .default_value = "auto",
                      .choices = {"auto", "bh1", "bh2"},
                      .help = "UniPC's B(h): bh1 or bh2; auto: the scheduler config's solver_type for diffusers "
                              "(bh2 by default), bh1 for a1111 and comfyui (A1111's UniPC variant, ComfyUI's uni_pc; "
                              "uni_pc_bh2 is bh2)",
                      .omit_default = true}));
  t.push_back(member(&RunConfig::unipc_order,
                     {.key = "unipc.order",
                      .type = SettingType::integer,
                      .default_value = "0",
                      .min = 0,
                      .max = 3,
                      .help = "UniPC's order, 1 to 3; 0 (auto): the scheduler config's solver_order for diffusers "
                              "(2 by default), 3 for a1111 (A1111's UniPC order) and comfyui (which runs "
                              "min(order, steps - 1))",
                      .omit_default = true}));
  t.push_back(member(&RunConfig::unipc_lower_order_final,
                     {.key = "unipc.lower_order_final",
                      .type = SettingType::choice,
                      .default_value = "auto",
                      .choices = {"auto", "on", "off"},
                      .help = "UniPC's lower-order final steps (A1111's UniPC lower order final); auto: the scheduler "
                              "config's for diffusers, on for a1111 and comfyui",
                      .omit_default = true}));
  t.push_back(member(&RunConfig::unipc_skip_type,
                     {.key = "unipc.skip_type",
                      .type = SettingType::choice,
                      .default_value = "time_uniform",
                      .choices = {"time_uniform", "time_quadratic", "logSNR"},
                      .help = "unipc.implementation=a1111: how the steps divide the time from 1 to 1/1000 (A1111's "
                              "UniPC skip type)",
                      .omit_default = true}));
  // LoRAs (config/lora_list.hpp, models/lora.hpp).
  Setting lora{.key = "lora",
               .help =
                   "LoRA files to apply, FILE:WEIGHT entries separated by commas (weight 1 when left out); "
                   "<lora:NAME:WEIGHT> in the prompt adds NAME.safetensors from lora_dir",
               .a1111 = "Lora hashes",
               .omit_default = true};
  lora.get = [](const RunConfig& c) { return json(format_lora_list(c.loras)); };
  lora.put = [](RunConfig& c, const json& v) { c.loras = parse_lora_list(v.get<std::string>()); };
  // A1111's "Lora hashes: \"name: 12 hex digits, ...\"" (written for people and tools that find
  // files by hash; the LoRAs come back from the prompt's tags and the nanscope chunk).
  lora.to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
    std::string s;
    try {
      for (const auto& l : run_loras(c)) {
        const std::filesystem::path p(l.path);
        std::error_code ec;
        if (!std::filesystem::is_regular_file(p, ec)) continue;
        const std::string entry = p.stem().string() + ": " + io::a1111_lora_short_hash(p);
        if (s.find(entry) == std::string::npos) s += (s.empty() ? "" : ", ") + entry;  // once per file, as A1111
      }
    } catch (const Error&) {
      // An unreadable file or an unresolvable tag: the run itself reports it.
    }
    if (s.empty()) return std::nullopt;
    return s;
  };
  lora.a1111_read = false;
  t.push_back(std::move(lora));
  t.push_back(member(&RunConfig::lora_dir,
                     {.key = "lora_dir",
                      .help = "The folder (searched recursively) where <lora:NAME:WEIGHT> in the prompt finds "
                              "NAME.safetensors; the tags are removed from the text the tokenizer sees, as A1111 does",
                      .omit_default = true}));
  Setting lora_mode{.key = "lora.mode",
                    .type = SettingType::choice,
                    .default_value = "merge",
                    .choices = {"merge", "unmerged"},
                    .help =
                        "merge: W += weight * alpha/rank * up@down in f32, stored at the component's dtype (an "
                        "f16 overflow shows as the module's own fault); unmerged: each LoRA runs as its own ops "
                        "beside the module's, traced as <module>.lora, so its overflow is told from the model's",
                    .json_path = "lora_mode",  // "lora" itself is a string in presets
                    .omit_default = true};
  lora_mode.get = [](const RunConfig& c) { return json(c.lora_unmerged ? "unmerged" : "merge"); };
  lora_mode.put = [](RunConfig& c, const json& v) { c.lora_unmerged = v.get<std::string>() == "unmerged"; };
  t.push_back(std::move(lora_mode));
  t.push_back(member(&RunConfig::device, {.key = "device",
                                          .help = "Device to run on: index, id, name or part of a name; empty: the "
                                                  "default device"}));
  Setting policy{.key = "nan_policy",
                 .type = SettingType::choice,
                 .default_value = "report",
                 .choices = {"report", "stop", "retry-vae-f32", "retry-vae:PATH", "retry-layer-f32"},
                 .help =
                     "When the latent or the decoded image holds NaN or Inf: report it and keep going, stop at "
                     "the first non-finite step, decode again in f32, decode again with the VAE at PATH, or upcast "
                     "only the module that broke to f32 and redo the failed UNet call or decode (repeated for each "
                     "module that breaks, up to inspect.layer_retry_limit)"};
  policy.get = [](const RunConfig& c) { return json(c.nan_policy.to_string()); };
  policy.put = [](RunConfig& c, const json& v) { c.nan_policy = *NanPolicy::parse(v.get<std::string>()); };
  policy.canonical = [](std::string_view s) -> std::optional<std::string> {
    if (auto p = NanPolicy::parse(s)) return p->to_string();
    return std::nullopt;
  };
  t.push_back(std::move(policy));

  add_precision_rows(t);

  // VAE tiling (models/vae_tiling.hpp). Presets keep them beside "vae" (a string there).
  t.push_back(member(&RunConfig::vae_tiling,
                     {.key = "vae.tiling",
                      .type = SettingType::choice,
                      .default_value = "off",
                      .choices = {"off", "on", "auto"},
                      .help = "Decode the latent in overlapping tiles blended at the seams (as A1111's and "
                              "ComfyUI's tiled VAE), so a large image needs one tile's memory: off, on, or auto "
                              "(tiles only when the whole decode would not fit the device)",
                      .json_path = "vae_tiling",
                      .omit_default = true}));
  t.push_back(member(&RunConfig::vae_tile_size,
                     {.key = "vae.tile_size",
                      .type = SettingType::integer,
                      .default_value = "512",
                      .min = 64,
                      .max = 16384,
                      .help = "VAE tiling: the side of a tile in image pixels (rounded down to the VAE's factor)",
                      .json_path = "vae_tile_size",
                      .omit_default = true}));
  t.push_back(member(&RunConfig::vae_tile_overlap,
                     {.key = "vae.tile_overlap",
                      .type = SettingType::integer,
                      .default_value = "64",
                      .min = 0,
                      .max = 4096,
                      .help = "VAE tiling: how many image pixels neighbouring tiles share; the seam is blended "
                              "linearly across them (at most just under half a tile: a larger value is used as "
                              "that)",
                      .json_path = "vae_tile_overlap",
                      .omit_default = true}));

  // Inspector settings (config/inspect_settings.hpp reads them for a run).
  t.push_back(inspector({.key = "inspect.emulate",
                         .type = SettingType::choice,
                         .default_value = "none",
                         .choices = {"none", "r0"},
                         .help = "Reproduce a device's fault on this device so the detectors can be seen working: "
                                 "none (real numerics) or r0 (report R0's bands). Everything an emulated run shows "
                                 "is labelled EMULATED",
                         // Earlier versions ran an empty value as none: configs and PNGs they wrote keep loading.
                         .canonical = [](std::string_view v) -> std::optional<std::string> {
                           if (v.empty() || v == "none") return "none";
                           if (v == "r0") return "r0";
                           return std::nullopt;
                         }}));
  t.push_back(inspector({.key = "inspect.emulate_min_tokens",
                         .type = SettingType::integer,
                         .default_value = "256",
                         .min = 1,
                         .max = 16777216,
                         .help = "R0 emulation: the smallest attention query count the emulated fault hits"}));
  t.push_back(inspector({.key = "inspect.trace",
                         .type = SettingType::choice,
                         .default_value = "auto",
                         .choices = {"auto", "always", "off"},
                         .help = "When to record every op's output statistics and name the first op that broke: "
                                 "auto (when something breaks), always (also the last step's UNet call and the "
                                 "decode), off"}));
  t.push_back(inspector({.key = "inspect.decode_every",
                         .type = SettingType::integer,
                         .default_value = "0",
                         .min = 0,
                         .max = 10000,
                         .help = "Every N steps, also decode the sampler's prediction of the final image with the "
                                 "VAE (one VAE decode each time) and show it instead of the latent preview; 0: off"}));
  t.push_back(inspector({.key = "inspect.stats_every",
                         .type = SettingType::integer,
                         .default_value = "1",
                         .min = 0,
                         .max = 10000,
                         .help = "Per-step statistics (counts, moments, mask, bands, preview) every N steps and at "
                                 "the last step; 0: off, only the decoded image is checked. They are reduced on the "
                                 "device and cost about 1% of a step"}));
  t.push_back(inspector({.key = "inspect.layer_retry_limit",
                         .type = SettingType::integer,
                         .default_value = "8",
                         .min = 0,
                         .max = 64,
                         .help = "How many modules the retry-layer-f32 NaN policy may upcast to f32 in one image "
                                 "(each one a redo of the failed UNet call or decode) before it gives up and "
                                 "reports what is still broken; 0: never upcast"}));
  t.push_back(inspector({.key = "inspect.f16_safety",
                         .type = SettingType::choice,
                         .default_value = "off",
                         .choices = {"off", "on"},
                         .help = "Before the run: one UNet call and one VAE decode in f32 at the run's size, every "
                                 "module's largest |x| against the f16 limit, and the per-module overrides that "
                                 "keep an f16 run finite (in the report; nanscope-cli probe --f16-safety alone): "
                                 "off or on"}));
  add_img2img_rows(t);
  add_hires_pass_rows(t);
  return t;
}

}  // namespace

std::string_view setting_type_name(SettingType t) {
  switch (t) {
    case SettingType::text: return "text";
    case SettingType::integer: return "integer";
    case SettingType::number: return "number";
    case SettingType::size: return "size";
    case SettingType::seed: return "seed";
    case SettingType::seed_list: return "seed list";
    case SettingType::choice: return "choice";
  }
  return "?";
}

bool Setting::ranged() const {
  return type == SettingType::integer || type == SettingType::number || type == SettingType::size;
}

std::string Setting::allowed() const {
  switch (type) {
    case SettingType::text: return max > 0 ? "text of at most " + integer_text(max) + " bytes" : "any text";
    case SettingType::integer: return "an integer from " + integer_text(min) + " to " + integer_text(max);
    case SettingType::number: return "a number from " + number_text(min) + " to " + number_text(max);
    case SettingType::size:
      return "0 (the model's default) or a multiple of 8 from " + integer_text(min) + " to " + integer_text(max);
    case SettingType::seed: return "a seed from 0 to 18446744073709551615";
    case SettingType::seed_list:
      return "a list of at most " + integer_text(max) + " seeds (from 0 to 18446744073709551615)";
    case SettingType::choice: return "one of: " + join(choices);
  }
  return "?";
}

json Setting::parse(std::string_view text) const {
  const std::string_view v = keep_spaces ? text : trim(text);
  auto bad = [&](std::string_view found) { fail(key, "expected " + allowed() + ", found " + in_quotes(found)); };
  switch (type) {
    case SettingType::text:
    case SettingType::choice: return check(json(std::string(v)), key);
    case SettingType::integer:
    case SettingType::size: {
      const auto n = parse_integer<long long>(v);
      if (!n) bad(v);
      return check(json(*n), key);
    }
    case SettingType::number: {
      const std::string s(v);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) bad(v);
      return check(json(d), key);
    }
    case SettingType::seed: {
      const auto n = parse_integer<std::uint64_t>(v);
      if (!n) bad(v);
      return json(*n);
    }
    case SettingType::seed_list: {
      json list = json::array();
      std::string_view rest = v;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string_view item = trim(rest.substr(0, comma));
        const auto n = parse_integer<std::uint64_t>(item);
        if (!n) {
          fail(key, "expected seeds from 0 to 18446744073709551615 separated by commas, found " + in_quotes(item));
        }
        list.push_back(*n);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
      return check(list, key);
    }
  }
  return json();
}

json Setting::check(const json& value, std::string_view where) const {
  auto bad = [&](const std::string& found) { fail(where, "expected " + allowed() + ", found " + found); };
  switch (type) {
    case SettingType::text:
      if (!value.is_string()) fail(where, "expected a string, found " + value.dump());
      if (max > 0 && static_cast<double>(value.get_ref<const std::string&>().size()) > max) {
        fail(where, "expected text of at most " + integer_text(max) + " bytes, found " +
                        std::to_string(value.get_ref<const std::string&>().size()) +
                        " bytes (the text encoder reads the first 77 tokens)");
      }
      return value;
    case SettingType::integer:
    case SettingType::size: {
      if (!value.is_number_integer()) bad(value.dump());
      if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) bad(value.dump());
      const long long n = value.get<long long>();
      const bool in_range = n >= min && n <= max;
      if (type == SettingType::integer ? !in_range : n != 0 && (!in_range || n % 8 != 0)) bad(std::to_string(n));
      return json(n);
    }
    case SettingType::number: {
      if (!value.is_number()) bad(value.dump());
      const double d = value.get<double>();
      if (!std::isfinite(d) || d < min || d > max) bad(number_text(d));
      return json(d);
    }
    case SettingType::seed:
      if (value.is_number_unsigned()) return value;
      if (value.is_number_integer() && value.get<long long>() >= 0) return json(value.get<std::uint64_t>());
      bad(value.dump());
      break;
    case SettingType::seed_list: {
      if (!value.is_array()) bad(value.dump());
      if (static_cast<double>(value.size()) > max) bad(std::to_string(value.size()) + " seeds");
      json list = json::array();
      const Setting one{.key = key, .type = SettingType::seed};
      for (std::size_t i = 0; i < value.size(); ++i)
        list.push_back(one.check(value[i], std::string(where) + "[" + std::to_string(i) + "]"));
      return list;
    }
    case SettingType::choice: {
      if (!value.is_string()) fail(where, "expected a string, found " + value.dump());
      const std::string s = value.get<std::string>();
      std::optional<std::string> c;
      if (canonical) {
        c = canonical(s);
      } else {
        for (const auto& choice : choices)
          if (choice == s) c = s;
      }
      if (!c) fail(where, in_quotes(s) + " is not allowed; use one of: " + join(choices));
      return json(*c);
    }
  }
  return value;
}

std::string Setting::format(const json& value) const {
  switch (type) {
    case SettingType::text:
    case SettingType::choice: return value.get<std::string>();
    case SettingType::number: return number_text(value.get<double>());
    case SettingType::seed_list: {
      std::vector<std::string> items;
      for (const auto& v : value) items.push_back(v.dump());
      return join(items, ",");
    }
    case SettingType::integer:
    case SettingType::size:
    case SettingType::seed: return value.dump();
  }
  return value.dump();
}

json Setting::default_json() const { return parse(default_value); }

const std::vector<PrecisionField>& precision_fields() {
  static const std::vector<PrecisionField> fields = build_precision_fields();
  return fields;
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = build_table();
  return table;
}

const Setting* find_setting(std::string_view key) {
  for (const Setting& s : settings())
    if (s.key == key) return &s;
  return nullptr;
}

const Setting& setting(std::string_view key) {
  if (const Setting* s = find_setting(key)) return *s;
  throw ConfigError("no setting " + in_quotes(key) + " in the settings table");
}

std::string allowed_keys() {
  std::vector<std::string> plain, fields, components, inspect;
  for (const Setting& s : settings()) {
    if (s.key.find('.') == std::string::npos) plain.push_back(s.key);
    if (s.key.starts_with("inspect.")) inspect.push_back(s.key.substr(8));
  }
  for (const PrecisionField& f : precision_fields()) fields.push_back(f.spec.key);
  for (Component c : kComponents) components.emplace_back(component_name(c));
  return join(plain) + ", COMPONENT[.PATTERN].FIELD (COMPONENT: " + join(components) + "; FIELD: " + join(fields) +
         "), inspect.NAME (NAME: " + join(inspect) + ")";
}

}  // namespace nanscope
