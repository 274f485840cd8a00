#include "config/run_config.hpp"

#include <algorithm>

#include "config/module_pattern.hpp"
#include "config/settings.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"

namespace nanscope {

namespace {

using config_detail::fail;
using nlohmann::json;

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits an override key into its pattern and its precision field; field is
// null when the key ends in none.
std::pair<std::string, const PrecisionField*> split_field(std::string_view key) {
  for (const PrecisionField& f : precision_fields()) {
    const std::string_view name = f.spec.key;
    if (key.size() > name.size() + 1 && key.ends_with(name) && key[key.size() - name.size() - 1] == '.') {
      return {std::string(key.substr(0, key.size() - name.size() - 1)), &f};
    }
  }
  return {std::string(key), nullptr};
}

std::string inspector_keys() {
  std::string s;
  for (const Setting& row : settings())
    if (row.key.starts_with("inspect.")) s += (s.empty() ? "" : ", ") + row.key;
  return s;
}

template <typename Fn>
void for_matching_overrides(const RunConfig& cfg, Component c, std::string_view module_path, Fn&& apply) {
  std::vector<std::string_view> path = split_module_path(module_path);
  path.insert(path.begin(), component_name(c));
  std::vector<std::pair<int, std::size_t>> hits;  // (specificity, index): applied in ascending order
  for (std::size_t i = 0; i < cfg.overrides.size(); ++i) {
    const ModulePattern p = ModulePattern::parse(cfg.overrides[i].pattern);
    if (p.matches(path)) hits.emplace_back(p.specificity(), i);
  }
  std::sort(hits.begin(), hits.end());
  for (const auto& h : hits) apply(cfg.overrides[h.second]);
}

}  // namespace

namespace config_detail {

void fail(std::string_view key, const std::string& what) { throw ConfigError("key " + quoted(key) + ": " + what); }

}  // namespace config_detail

std::string_view component_name(Component c) {
  switch (c) {
    case Component::text_encoder: return "text_encoder";
    case Component::unet: return "unet";
    case Component::vae: return "vae";
  }
  return "?";
}

std::optional<Component> parse_component(std::string_view s) {
  for (Component c : kComponents) {
    if (component_name(c) == s) return c;
  }
  return std::nullopt;
}

std::string_view sampler_name(SamplerId s) {
  switch (s) {
    case SamplerId::euler: return "euler";
    case SamplerId::euler_a: return "euler_a";
    case SamplerId::ddim: return "ddim";
    case SamplerId::dpmpp_2m: return "dpmpp_2m";
    case SamplerId::dpmpp_2m_sde: return "dpmpp_2m_sde";
    case SamplerId::dpmpp_sde: return "dpmpp_sde";
    case SamplerId::heun: return "heun";
    case SamplerId::lms: return "lms";
    case SamplerId::unipc: return "unipc";
    case SamplerId::ddpm: return "ddpm";
    case SamplerId::lcm: return "lcm";
  }
  return "?";
}

std::string_view sampler_a1111_name(SamplerId s) {
  switch (s) {
    case SamplerId::euler: return "Euler";
    case SamplerId::euler_a: return "Euler a";
    case SamplerId::ddim: return "DDIM";
    case SamplerId::dpmpp_2m: return "DPM++ 2M";
    case SamplerId::dpmpp_2m_sde: return "DPM++ 2M SDE";
    case SamplerId::dpmpp_sde: return "DPM++ SDE";
    case SamplerId::heun: return "Heun";
    case SamplerId::lms: return "LMS";
    case SamplerId::unipc: return "UniPC";
    case SamplerId::ddpm: return "DDPM";
    case SamplerId::lcm: return "LCM";
  }
  return "?";
}

std::optional<SamplerId> parse_sampler(std::string_view s) {
  for (SamplerId id : kSamplers) {
    if (sampler_name(id) == s) return id;
  }
  return std::nullopt;
}

std::string_view schedule_name(ScheduleId s) {
  switch (s) {
    case ScheduleId::class_default: return "default";
    case ScheduleId::karras: return "karras";
    case ScheduleId::exponential: return "exponential";
    case ScheduleId::sgm_uniform: return "sgm_uniform";
    case ScheduleId::simple: return "simple";
    case ScheduleId::normal: return "normal";
    case ScheduleId::ddim_uniform: return "ddim_uniform";
  }
  return "?";
}

std::string_view hires_upscaler_name(HiresUpscaler u) {
  switch (u) {
    case HiresUpscaler::latent: return "latent";
    case HiresUpscaler::latent_nearest: return "latent-nearest";
    case HiresUpscaler::latent_nearest_exact: return "latent-nearest-exact";
    case HiresUpscaler::lanczos: return "lanczos";
  }
  return "?";
}

std::string_view schedule_a1111_name(ScheduleId s) {
  switch (s) {
    case ScheduleId::class_default: return "Automatic";
    case ScheduleId::karras: return "Karras";
    case ScheduleId::exponential: return "Exponential";
    case ScheduleId::sgm_uniform: return "SGM Uniform";
    case ScheduleId::simple: return "Simple";
    case ScheduleId::normal: return "Normal";
    case ScheduleId::ddim_uniform: return "DDIM";
  }
  return "?";
}

std::string_view hires_upscaler_a1111_name(HiresUpscaler u) {
  switch (u) {
    case HiresUpscaler::latent: return "Latent";
    case HiresUpscaler::latent_nearest: return "Latent (nearest)";
    case HiresUpscaler::latent_nearest_exact: return "Latent (nearest-exact)";
    case HiresUpscaler::lanczos: return "Lanczos";
  }
  return "?";
}

std::optional<ScheduleId> parse_schedule(std::string_view s) {
  for (ScheduleId id : kSchedules) {
    if (schedule_name(id) == s) return id;
  }
  return std::nullopt;
}

std::optional<HiresUpscaler> parse_hires_upscaler(std::string_view s) {
  for (HiresUpscaler u : {HiresUpscaler::latent, HiresUpscaler::latent_nearest, HiresUpscaler::latent_nearest_exact,
                          HiresUpscaler::lanczos}) {
    if (hires_upscaler_name(u) == s) return u;
  }
  return std::nullopt;
}

std::string_view noise_name(NoiseKind n) {
  switch (n) {
    case NoiseKind::nanscope: return "nanscope";
    case NoiseKind::torch_cpu: return "torch-cpu";
    case NoiseKind::torch_cuda: return "torch-cuda";
  }
  return "?";
}

std::optional<NoiseKind> parse_noise(std::string_view s) {
  // torch_cuda / torch_cpu: the spelling of the same values.
  if (s == "nanscope") return NoiseKind::nanscope;
  if (s == "torch-cpu" || s == "torch_cpu") return NoiseKind::torch_cpu;
  if (s == "torch-cuda" || s == "torch_cuda") return NoiseKind::torch_cuda;
  return std::nullopt;
}

std::string_view torch_cpu_kernel_name(TorchCpuKernel k) {
  switch (k) {
    case TorchCpuKernel::automatic: return "auto";
    case TorchCpuKernel::avx2: return "avx2";
    case TorchCpuKernel::scalar: return "default";
  }
  return "?";
}

std::optional<TorchCpuKernel> parse_torch_cpu_kernel(std::string_view s) {
  for (TorchCpuKernel k : {TorchCpuKernel::automatic, TorchCpuKernel::avx2, TorchCpuKernel::scalar}) {
    if (torch_cpu_kernel_name(k) == s) return k;
  }
  return std::nullopt;
}

std::string NanPolicy::to_string() const {
  switch (kind) {
    case Kind::report: return "report";
    case Kind::stop: return "stop";
    case Kind::retry_vae_f32: return "retry-vae-f32";
    case Kind::retry_vae: return "retry-vae:" + vae_path;
    case Kind::retry_layer_f32: return "retry-layer-f32";
  }
  return "?";
}

std::optional<NanPolicy> NanPolicy::parse(std::string_view s) {
  if (s == "report") return NanPolicy{Kind::report, {}};
  if (s == "stop") return NanPolicy{Kind::stop, {}};
  if (s == "retry-vae-f32") return NanPolicy{Kind::retry_vae_f32, {}};
  if (s == "retry-layer-f32") return NanPolicy{Kind::retry_layer_f32, {}};
  constexpr std::string_view prefix = "retry-vae:";
  if (s.size() > prefix.size() && s.substr(0, prefix.size()) == prefix) {
    return NanPolicy{Kind::retry_vae, std::string(s.substr(prefix.size()))};
  }
  return std::nullopt;
}

Precision RunConfig::resolve(Component c, std::string_view module_path) const {
  Precision p = component(c).precision;
  for_matching_overrides(*this, c, module_path, [&p](const PrecisionOverride& o) {
    if (o.dtype) p.dtype = *o.dtype;
    if (o.accumulate) p.accumulate = *o.accumulate;
    if (o.softmax) p.softmax = *o.softmax;
  });
  return p;
}

std::optional<DType> RunConfig::override_dtype(Component c, std::string_view module_path) const {
  std::optional<DType> d;
  for_matching_overrides(*this, c, module_path, [&d](const PrecisionOverride& o) {
    if (o.dtype) d = *o.dtype;
  });
  return d;
}

bool RunConfig::has_dtype_overrides(Component c) const {
  return std::any_of(overrides.begin(), overrides.end(), [c](const PrecisionOverride& o) {
    return o.dtype && ModulePattern::parse(o.pattern).component() == component_name(c);
  });
}

AttentionConfig RunConfig::resolve_attention(Component c, std::string_view module_path) const {
  AttentionConfig a = component(c).attention;
  for_matching_overrides(*this, c, module_path, [&a](const PrecisionOverride& o) {
    if (o.impl) a.impl = *o.impl;
    if (o.slice_size) a.slice_size = *o.slice_size;
  });
  return a;
}

void RunConfig::set(std::string_view assignment) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    throw ConfigError("--set " + quoted(assignment) + ": expected key=value, e.g. unet.dtype=f16");
  }
  set(trim(assignment.substr(0, eq)), assignment.substr(eq + 1));
}

void RunConfig::set(std::string_view key, std::string_view value) {
  // Configs are written as JSON (presets, the PNG chunk, reports), which holds UTF-8 only.
  if (const auto bad = invalid_utf8_offset(value)) {
    fail(key, "the value is not valid UTF-8 (" + describe_invalid_utf8(value, *bad) +
                  "); save the text as UTF-8 and set it again");
  }
  if (const Setting* row = find_setting(key)) {
    row->put(*this, row->parse(value));  // parse() throws before anything changes; put() checks before storing
    return;
  }
  if (key.starts_with("inspect.")) fail(key, "unknown inspector setting; use one of: " + inspector_keys());
  // A per-module override: COMPONENT.PATTERN.FIELD (COMPONENT.FIELD is a table row).
  const auto [pattern, field] = split_field(key);
  const std::size_t dot = pattern.find('.');
  const auto comp = parse_component(std::string_view(pattern).substr(0, dot));
  if (!comp || !field || dot == std::string::npos) fail(key, "unknown key; use one of: " + allowed_keys());
  try {
    ModulePattern::parse(pattern);
  } catch (const ConfigError& e) {
    fail(key, e.what());
  }
  const std::string_view v = value.find_first_not_of(" \t") == std::string_view::npos ? std::string_view() : value;
  Setting spec = field->spec;  // messages name the whole key
  spec.key = std::string(key);
  const json parsed = v.empty() ? json() : spec.parse(v);  // empty: remove the field
  auto it = std::find_if(overrides.begin(), overrides.end(),
                         [&pattern = pattern](const PrecisionOverride& o) { return o.pattern == pattern; });
  PrecisionOverride o;
  if (it != overrides.end()) o = *it;
  o.pattern = pattern;
  field->put_override(o, parsed);
  if (it != overrides.end()) overrides.erase(it);
  if (!o.empty()) overrides.push_back(std::move(o));  // last: the newest setting wins ties
}

std::vector<std::uint64_t> RunConfig::image_seeds() const {
  if (!seeds.empty()) return seeds;
  std::vector<std::uint64_t> out;
  for (int i = 0; i < batch_size; ++i) out.push_back(seed + static_cast<std::uint64_t>(i));  // wraps like A1111's
  return out;
}

RunConfig RunConfig::image_config(std::size_t index) const {
  const auto all = image_seeds();
  if (index >= all.size()) {
    throw ConfigError("image " + std::to_string(index) + " is outside the batch of " + std::to_string(all.size()));
  }
  RunConfig c = *this;
  c.seed = all[index];
  c.seeds.clear();
  c.batch_size = 1;
  return c;
}

void RunConfig::validate() const {
  if (!inspect.is_object()) fail("inspect", "expected an object, found " + inspect.dump());
  for (const auto& [name, value] : inspect.items()) {
    if (!find_setting("inspect." + name))
      fail("inspect." + name, "unknown inspector setting; use one of: " + inspector_keys());
  }
  for (const Setting& row : settings()) row.check(row.get(*this), row.key);
  if (!seeds.empty() && seeds.size() != static_cast<std::size_t>(batch_size)) {
    fail("batch_size",
         std::to_string(batch_size) + " conflicts with the " + std::to_string(seeds.size()) + " explicit seeds");
  }
  for (const PrecisionOverride& o : overrides) {
    ModulePattern::parse(o.pattern);
    if (o.empty()) {
      fail(o.pattern, "an override must set at least one field (" + precision_fields()[0].spec.key + ", ...)");
    }
    for (const PrecisionField& f : precision_fields()) {
      const json v = f.get_override(o);
      if (!v.is_null()) f.spec.check(v, o.pattern + "." + f.spec.key);
    }
  }
}

}  // namespace nanscope
