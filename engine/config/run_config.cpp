#include "config/run_config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "config/module_pattern.hpp"
#include "core/error.hpp"

namespace nanscope {

namespace {

constexpr std::array<std::string_view, 16> kTopKeys = {
    "model",      "vae",   "prompt", "negative_prompt", "steps", "cfg_scale", "seed",      "seeds",
    "batch_size", "width", "height", "sampler",         "noise", "device",    "clip_skip", "nan_policy"};

constexpr std::array<std::string_view, 5> kFields = {"dtype", "accumulate", "attention.softmax", "attention.impl",
                                                     "attention.slice_size"};

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

template <typename Int>
std::optional<Int> parse_integer(std::string_view v) {
  Int out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) return std::nullopt;
  return out;
}

long long int_value(std::string_view key, std::string_view v, long long lo, long long hi) {
  const auto n = parse_integer<long long>(v);
  if (!n)
    config_detail::fail(
        key, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", found " + quoted(v));
  config_detail::check_int(key, *n, lo, hi);
  return *n;
}

std::uint64_t seed_value(std::string_view key, std::string_view v) {
  const auto n = parse_integer<std::uint64_t>(v);
  if (!n) config_detail::fail(key, "expected a seed from 0 to 18446744073709551615, found " + quoted(v));
  return *n;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits a precision key into (pattern, field); field is "" when the key is not one.
std::pair<std::string, std::string> split_field(std::string_view key) {
  for (std::string_view f : kFields) {
    if (key.size() > f.size() + 1 && key.substr(key.size() - f.size()) == f && key[key.size() - f.size() - 1] == '.') {
      return {std::string(key.substr(0, key.size() - f.size() - 1)), std::string(f)};
    }
  }
  return {std::string(key), ""};
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

void check_int(std::string_view key, long long v, long long lo, long long hi) {
  if (v < lo || v > hi) {
    fail(key, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", found " +
                  std::to_string(v));
  }
}

void check_size(std::string_view key, long long v) {
  if (v != 0 && (v < 8 || v > 16384 || v % 8 != 0)) {
    fail(key, "expected 0 (the model's default) or a multiple of 8 from 8 to 16384, found " + std::to_string(v));
  }
}

void check_cfg(std::string_view key, double v) {
  if (!std::isfinite(v) || v < 0.0 || v > 100.0) {
    fail(key, "expected a number from 0 to 100, found " + std::to_string(v));
  }
}

template <typename T, typename Parser>
T enum_value(std::string_view key, std::string_view v, Parser parse, std::string_view field) {
  if (auto r = parse(v)) return *r;
  fail(key, quoted(v) + " is not allowed; use one of: " + allowed_values(field));
}

DType dtype_value(std::string_view key, std::string_view v) { return enum_value<DType>(key, v, parse_dtype, "dtype"); }
Accumulate accumulate_value(std::string_view key, std::string_view v) {
  return enum_value<Accumulate>(key, v, parse_accumulate, "accumulate");
}
SoftmaxPrecision softmax_value(std::string_view key, std::string_view v) {
  return enum_value<SoftmaxPrecision>(key, v, parse_softmax, "attention.softmax");
}
AttentionImpl impl_value(std::string_view key, std::string_view v) {
  return enum_value<AttentionImpl>(key, v, parse_attention_impl, "attention.impl");
}
SamplerId sampler_value(std::string_view key, std::string_view v) {
  return enum_value<SamplerId>(key, v, parse_sampler, "sampler");
}
NoiseKind noise_value(std::string_view key, std::string_view v) {
  return enum_value<NoiseKind>(key, v, parse_noise, "noise");
}
NanPolicy nan_policy_value(std::string_view key, std::string_view v) {
  return enum_value<NanPolicy>(key, v, NanPolicy::parse, "nan_policy");
}

}  // namespace config_detail

using namespace config_detail;

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
    case SamplerId::dpmpp_2m_karras: return "dpmpp_2m_karras";
  }
  return "?";
}

std::string_view sampler_a1111_name(SamplerId s) {
  switch (s) {
    case SamplerId::euler: return "Euler";
    case SamplerId::euler_a: return "Euler a";
    case SamplerId::ddim: return "DDIM";
    case SamplerId::dpmpp_2m: return "DPM++ 2M";
    case SamplerId::dpmpp_2m_karras: return "DPM++ 2M Karras";
  }
  return "?";
}

std::optional<SamplerId> parse_sampler(std::string_view s) {
  for (SamplerId id :
       {SamplerId::euler, SamplerId::euler_a, SamplerId::ddim, SamplerId::dpmpp_2m, SamplerId::dpmpp_2m_karras}) {
    if (sampler_name(id) == s) return id;
  }
  return std::nullopt;
}

std::string_view noise_name(NoiseKind n) { return n == NoiseKind::nanscope ? "nanscope" : "torch-cpu"; }

std::optional<NoiseKind> parse_noise(std::string_view s) {
  if (s == "nanscope") return NoiseKind::nanscope;
  if (s == "torch-cpu") return NoiseKind::torch_cpu;
  return std::nullopt;
}

std::string NanPolicy::to_string() const {
  switch (kind) {
    case Kind::report: return "report";
    case Kind::stop: return "stop";
    case Kind::retry_vae_f32: return "retry-vae-f32";
    case Kind::retry_vae: return "retry-vae:" + vae_path;
  }
  return "?";
}

std::optional<NanPolicy> NanPolicy::parse(std::string_view s) {
  if (s == "report") return NanPolicy{Kind::report, {}};
  if (s == "stop") return NanPolicy{Kind::stop, {}};
  if (s == "retry-vae-f32") return NanPolicy{Kind::retry_vae_f32, {}};
  constexpr std::string_view prefix = "retry-vae:";
  if (s.size() > prefix.size() && s.substr(0, prefix.size()) == prefix) {
    return NanPolicy{Kind::retry_vae, std::string(s.substr(prefix.size()))};
  }
  return std::nullopt;
}

std::string allowed_values(std::string_view field) {
  if (field == "dtype") return "f32, f16, bf16";
  if (field == "accumulate" || field == "attention.softmax") return "f32, native";
  if (field == "attention.impl") return "fused, bmm, sliced";
  if (field == "attention.slice_size") return "an integer from 1 to 65536";
  if (field == "sampler") return "euler, euler_a, ddim, dpmpp_2m, dpmpp_2m_karras";
  if (field == "noise") return "nanscope, torch-cpu";
  if (field == "nan_policy") return "report, stop, retry-vae-f32, retry-vae:PATH";
  if (field == "component") return "text_encoder, unet, vae";
  if (field == "key") {
    std::string s;
    for (auto k : kTopKeys) s += std::string(s.empty() ? "" : ", ") + std::string(k);
    return s +
           ", COMPONENT[.PATTERN].FIELD (COMPONENT: text_encoder, unet, vae; FIELD: dtype, accumulate, "
           "attention.softmax, attention.impl, attention.slice_size), inspect.NAME";
  }
  return "";
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
  const std::string_view v = trim(value);
  if (key == "model") {
    model = std::string(v);
  } else if (key == "vae") {
    vae = std::string(v);
  } else if (key == "prompt") {
    prompt = std::string(value);  // prompts keep their spaces
  } else if (key == "negative_prompt") {
    negative_prompt = std::string(value);
  } else if (key == "steps") {
    steps = static_cast<int>(int_value(key, v, 1, 10000));
  } else if (key == "cfg_scale") {
    char* end = nullptr;
    const std::string s(v);
    const double d = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) fail(key, "expected a number from 0 to 100, found " + quoted(v));
    check_cfg(key, d);
    cfg_scale = d;
  } else if (key == "seed") {
    seed = seed_value(key, v);
    seeds.clear();
  } else if (key == "seeds") {
    std::vector<std::uint64_t> list;
    std::string_view rest = v;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      list.push_back(seed_value(key, trim(rest.substr(0, comma))));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    check_int(key, static_cast<long long>(list.size()), 0, 64);
    seeds = list;
    if (!seeds.empty()) {
      seed = seeds.front();
      batch_size = static_cast<int>(seeds.size());
    }
  } else if (key == "batch_size") {
    const int n = static_cast<int>(int_value(key, v, 1, 64));
    if (!seeds.empty() && static_cast<std::size_t>(n) != seeds.size()) {
      fail(key, std::to_string(n) + " conflicts with the " + std::to_string(seeds.size()) +
                    " explicit seeds; set seeds= (empty) first, or set seeds to " + std::to_string(n) + " values");
    }
    batch_size = n;
  } else if (key == "width" || key == "height") {
    const auto n = parse_integer<long long>(v);
    if (!n) fail(key, "expected 0 (the model's default) or a multiple of 8 from 8 to 16384, found " + quoted(v));
    check_size(key, *n);
    (key == "width" ? width : height) = static_cast<int>(*n);
  } else if (key == "sampler") {
    sampler = sampler_value(key, v);
  } else if (key == "noise") {
    noise = noise_value(key, v);
  } else if (key == "device") {
    device = std::string(v);
  } else if (key == "clip_skip") {
    clip_skip = static_cast<int>(int_value(key, v, 0, 24));
  } else if (key == "nan_policy") {
    nan_policy = nan_policy_value(key, v);
  } else if (key.substr(0, 8) == "inspect.") {
    const auto path = split_module_path(key.substr(8));
    if (path.empty()) fail(key, "expected inspect.NAME");
    nlohmann::json* node = &inspect;
    for (std::size_t i = 0; i < path.size(); ++i) {
      if (path[i].empty()) fail(key, "empty name after \"inspect\"");
      if (!node->is_object()) *node = nlohmann::json::object();
      node = &(*node)[std::string(path[i])];
    }
    *node = nlohmann::json::accept(v) ? nlohmann::json::parse(v) : nlohmann::json(std::string(v));
  } else {
    const auto [pattern, field] = split_field(key);
    const std::size_t dot = pattern.find('.');
    const auto comp = parse_component(std::string_view(pattern).substr(0, dot));
    if (!comp || field.empty()) fail(key, "unknown key; use one of: " + allowed_values("key"));
    if (dot == std::string::npos) {  // the component's default
      ComponentPrecision& cp = component(*comp);
      if (field == "dtype") cp.precision.dtype = dtype_value(key, v);
      if (field == "accumulate") cp.precision.accumulate = accumulate_value(key, v);
      if (field == "attention.softmax") cp.precision.softmax = softmax_value(key, v);
      if (field == "attention.impl") cp.attention.impl = impl_value(key, v);
      if (field == "attention.slice_size") cp.attention.slice_size = static_cast<int>(int_value(key, v, 1, 65536));
      return;
    }
    try {
      ModulePattern::parse(pattern);
    } catch (const ConfigError& e) {
      fail(key, e.what());
    }
    auto it = std::find_if(overrides.begin(), overrides.end(),
                           [&pattern = pattern](const PrecisionOverride& o) { return o.pattern == pattern; });
    PrecisionOverride o;
    if (it != overrides.end()) o = *it;
    o.pattern = pattern;
    const bool clear = v.empty();
    if (field == "dtype") o.dtype = clear ? std::nullopt : std::optional(dtype_value(key, v));
    if (field == "accumulate") o.accumulate = clear ? std::nullopt : std::optional(accumulate_value(key, v));
    if (field == "attention.softmax") o.softmax = clear ? std::nullopt : std::optional(softmax_value(key, v));
    if (field == "attention.impl") o.impl = clear ? std::nullopt : std::optional(impl_value(key, v));
    if (field == "attention.slice_size") {
      o.slice_size = clear ? std::nullopt : std::optional(static_cast<int>(int_value(key, v, 1, 65536)));
    }
    if (it != overrides.end()) overrides.erase(it);
    if (!o.empty()) overrides.push_back(std::move(o));  // last: the newest setting wins ties
  }
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
  check_int("steps", steps, 1, 10000);
  check_cfg("cfg_scale", cfg_scale);
  check_int("batch_size", batch_size, 1, 64);
  check_int("seeds", static_cast<long long>(seeds.size()), 0, 64);
  if (!seeds.empty() && seeds.size() != static_cast<std::size_t>(batch_size)) {
    fail("batch_size",
         std::to_string(batch_size) + " conflicts with the " + std::to_string(seeds.size()) + " explicit seeds");
  }
  check_size("width", width);
  check_size("height", height);
  check_int("clip_skip", clip_skip, 0, 24);
  if (nan_policy.kind == NanPolicy::Kind::retry_vae && nan_policy.vae_path.empty()) {
    fail("nan_policy", "retry-vae needs a path (retry-vae:PATH)");
  }
  for (Component c : kComponents) {
    const std::string key = std::string(component_name(c)) + ".attention.slice_size";
    check_int(key, component(c).attention.slice_size, 1, 65536);
  }
  for (const PrecisionOverride& o : overrides) {
    ModulePattern::parse(o.pattern);
    if (o.empty()) fail(o.pattern, "an override must set at least one field (" + std::string(kFields[0]) + ", ...)");
    if (o.slice_size) check_int(o.pattern + ".attention.slice_size", *o.slice_size, 1, 65536);
  }
  if (!inspect.is_object()) fail("inspect", "expected an object, found " + inspect.dump());
}

}  // namespace nanscope
