#include "config/preset.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "config/module_pattern.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace nanscope {

namespace {

using config_detail::fail;
using nlohmann::json;

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string list(std::initializer_list<std::string_view> keys) {
  std::string s;
  for (auto k : keys) s += (s.empty() ? "" : ", ") + std::string(k);
  return s;
}

void check_keys(const json& obj, const std::string& path, std::initializer_list<std::string_view> allowed) {
  for (const auto& [k, v] : obj.items()) {
    bool known = false;
    for (auto a : allowed) known = known || a == k;
    if (!known) fail(join(path, k), "unknown key; allowed here: " + list(allowed));
  }
}

const json& object(const json& v, const std::string& path) {
  if (!v.is_object()) fail(path, "expected an object, found " + v.dump());
  return v;
}

std::string string_value(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path, "expected a string, found " + v.dump());
  return v.get<std::string>();
}

long long int_value(const json& v, const std::string& path, long long lo, long long hi) {
  if (!v.is_number_integer()) {
    fail(path, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", found " + v.dump());
  }
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    fail(path, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", found " + v.dump());
  }
  const long long n = v.get<long long>();
  config_detail::check_int(path, n, lo, hi);
  return n;
}

std::uint64_t seed_value(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<long long>() >= 0) return static_cast<std::uint64_t>(v.get<long long>());
  fail(path, "expected a seed from 0 to 18446744073709551615, found " + v.dump());
}

json attention_json(const std::optional<SoftmaxPrecision>& softmax, const std::optional<AttentionImpl>& impl,
                    const std::optional<int>& slice_size) {
  json a = json::object();
  if (softmax) a["softmax"] = softmax_name(*softmax);
  if (impl) a["impl"] = attention_impl_name(*impl);
  if (slice_size) a["slice_size"] = *slice_size;
  return a;
}

// Reads {"dtype", "accumulate", "attention": {"softmax", "impl", "slice_size"}} into optionals.
void read_precision_fields(const json& j, const std::string& path, PrecisionOverride& out, bool allow_pattern) {
  if (allow_pattern) {
    check_keys(j, path, {"pattern", "dtype", "accumulate", "attention"});
  } else {
    check_keys(j, path, {"dtype", "accumulate", "attention"});
  }
  if (j.contains("dtype"))
    out.dtype = config_detail::dtype_value(join(path, "dtype"), string_value(j["dtype"], join(path, "dtype")));
  if (j.contains("accumulate")) {
    const std::string k = join(path, "accumulate");
    out.accumulate = config_detail::accumulate_value(k, string_value(j["accumulate"], k));
  }
  if (j.contains("attention")) {
    const std::string ap = join(path, "attention");
    const json& a = object(j["attention"], ap);
    check_keys(a, ap, {"softmax", "impl", "slice_size"});
    if (a.contains("softmax")) {
      out.softmax = config_detail::softmax_value(join(ap, "softmax"), string_value(a["softmax"], join(ap, "softmax")));
    }
    if (a.contains("impl"))
      out.impl = config_detail::impl_value(join(ap, "impl"), string_value(a["impl"], join(ap, "impl")));
    if (a.contains("slice_size"))
      out.slice_size = static_cast<int>(int_value(a["slice_size"], join(ap, "slice_size"), 1, 65536));
  }
}

void apply(RunConfig& c, const json& j) {
  object(j, "(top level)");
  check_keys(j, "", {"nanscope_preset", "model",      "vae",       "prompt",    "negative_prompt",
                     "steps",           "cfg_scale",  "seed",      "seeds",     "batch_size",
                     "width",           "height",     "sampler",   "noise",     "device",
                     "clip_skip",       "nan_policy", "precision", "overrides", "inspect"});
  if (!j.contains("nanscope_preset")) {
    fail("nanscope_preset",
         "missing: not a NaNscope preset (expected \"nanscope_preset\": " + std::to_string(kPresetVersion) + ")");
  }
  const long long version = int_value(j["nanscope_preset"], "nanscope_preset", 1, 1 << 30);
  if (version > kPresetVersion) {
    fail("nanscope_preset", "version " + std::to_string(version) + " is newer than this NaNscope reads (" +
                                std::to_string(kPresetVersion) + "); update NaNscope");
  }
  auto str = [&](const char* key, std::string& out) {
    if (j.contains(key)) out = string_value(j[key], key);
  };
  str("model", c.model);
  str("vae", c.vae);
  str("prompt", c.prompt);
  str("negative_prompt", c.negative_prompt);
  str("device", c.device);
  if (j.contains("steps")) c.steps = static_cast<int>(int_value(j["steps"], "steps", 1, 10000));
  if (j.contains("cfg_scale")) {
    if (!j["cfg_scale"].is_number())
      fail("cfg_scale", "expected a number from 0 to 100, found " + j["cfg_scale"].dump());
    c.cfg_scale = j["cfg_scale"].get<double>();
    config_detail::check_cfg("cfg_scale", c.cfg_scale);
  }
  if (j.contains("width")) c.width = static_cast<int>(int_value(j["width"], "width", 0, 16384));
  if (j.contains("height")) c.height = static_cast<int>(int_value(j["height"], "height", 0, 16384));
  config_detail::check_size("width", c.width);
  config_detail::check_size("height", c.height);
  if (j.contains("clip_skip")) c.clip_skip = static_cast<int>(int_value(j["clip_skip"], "clip_skip", 0, 24));
  if (j.contains("sampler")) c.sampler = config_detail::sampler_value("sampler", string_value(j["sampler"], "sampler"));
  if (j.contains("noise")) c.noise = config_detail::noise_value("noise", string_value(j["noise"], "noise"));
  if (j.contains("nan_policy")) {
    c.nan_policy = config_detail::nan_policy_value("nan_policy", string_value(j["nan_policy"], "nan_policy"));
  }

  // Seeds: an explicit list fixes the batch size and the first seed.
  if (j.contains("seed")) {
    c.seed = seed_value(j["seed"], "seed");
    c.seeds.clear();
  }
  if (j.contains("batch_size")) c.batch_size = static_cast<int>(int_value(j["batch_size"], "batch_size", 1, 64));
  if (j.contains("seeds")) {
    const json& s = j["seeds"];
    if (!s.is_array() || s.size() > 64) fail("seeds", "expected a list of at most 64 seeds, found " + s.dump());
    c.seeds.clear();
    for (std::size_t i = 0; i < s.size(); ++i) c.seeds.push_back(seed_value(s[i], "seeds[" + std::to_string(i) + "]"));
    if (!c.seeds.empty()) {
      if (j.contains("batch_size") && static_cast<std::size_t>(c.batch_size) != c.seeds.size()) {
        fail("batch_size", std::to_string(c.batch_size) + " conflicts with the " + std::to_string(c.seeds.size()) +
                               " seeds in \"seeds\"");
      }
      if (j.contains("seed") && c.seed != c.seeds.front()) {
        fail("seed",
             std::to_string(c.seed) + " is not the first of \"seeds\" (" + std::to_string(c.seeds.front()) + ")");
      }
      c.batch_size = static_cast<int>(c.seeds.size());
      c.seed = c.seeds.front();
    }
  }

  if (j.contains("precision")) {
    const json& p = object(j["precision"], "precision");
    check_keys(p, "precision", {"text_encoder", "unet", "vae"});
    for (Component comp : kComponents) {
      const std::string name(component_name(comp));
      if (!p.contains(name)) continue;
      const std::string path = "precision." + name;
      PrecisionOverride fields;
      read_precision_fields(object(p[name], path), path, fields, false);
      ComponentPrecision& cp = c.component(comp);
      if (fields.dtype) cp.precision.dtype = *fields.dtype;
      if (fields.accumulate) cp.precision.accumulate = *fields.accumulate;
      if (fields.softmax) cp.precision.softmax = *fields.softmax;
      if (fields.impl) cp.attention.impl = *fields.impl;
      if (fields.slice_size) cp.attention.slice_size = *fields.slice_size;
    }
  }
  if (j.contains("overrides")) {
    const json& list_json = j["overrides"];
    if (!list_json.is_array())
      fail("overrides", "expected a list of {\"pattern\": ..., fields...}, found " + list_json.dump());
    std::vector<PrecisionOverride> list;
    for (std::size_t i = 0; i < list_json.size(); ++i) {
      const std::string path = "overrides[" + std::to_string(i) + "]";
      const json& o = object(list_json[i], path);
      PrecisionOverride po;
      if (!o.contains("pattern")) fail(path + ".pattern", "missing (e.g. \"unet.up_blocks.*.attentions.*.attn1\")");
      po.pattern = string_value(o["pattern"], path + ".pattern");
      try {
        ModulePattern::parse(po.pattern);
      } catch (const ConfigError& e) {
        fail(path + ".pattern", e.what());
      }
      read_precision_fields(o, path, po, true);
      if (po.empty()) fail(path, "sets no field; use dtype, accumulate or attention.{softmax, impl, slice_size}");
      list.push_back(std::move(po));
    }
    c.overrides = std::move(list);
  }
  if (j.contains("inspect")) c.inspect = object(j["inspect"], "inspect");
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path.string() + ": cannot open the preset: " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

json to_json(const RunConfig& c) {
  json j;
  j["nanscope_preset"] = kPresetVersion;
  j["model"] = c.model;
  j["vae"] = c.vae;
  j["prompt"] = c.prompt;
  j["negative_prompt"] = c.negative_prompt;
  j["steps"] = c.steps;
  j["cfg_scale"] = c.cfg_scale;
  j["seed"] = c.seed;
  j["seeds"] = c.seeds;
  j["batch_size"] = c.batch_size;
  j["width"] = c.width;
  j["height"] = c.height;
  j["sampler"] = sampler_name(c.sampler);
  j["noise"] = noise_name(c.noise);
  j["device"] = c.device;
  j["clip_skip"] = c.clip_skip;
  j["nan_policy"] = c.nan_policy.to_string();
  json p = json::object();
  for (Component comp : kComponents) {
    const ComponentPrecision& cp = c.component(comp);
    p[std::string(component_name(comp))] = {
        {"dtype", dtype_name(cp.precision.dtype)},
        {"accumulate", accumulate_name(cp.precision.accumulate)},
        {"attention", attention_json(cp.precision.softmax, cp.attention.impl, cp.attention.slice_size)}};
  }
  j["precision"] = p;
  json overrides = json::array();
  for (const PrecisionOverride& o : c.overrides) {
    json e = {{"pattern", o.pattern}};
    if (o.dtype) e["dtype"] = dtype_name(*o.dtype);
    if (o.accumulate) e["accumulate"] = accumulate_name(*o.accumulate);
    json a = attention_json(o.softmax, o.impl, o.slice_size);
    if (!a.empty()) e["attention"] = a;
    overrides.push_back(e);
  }
  j["overrides"] = overrides;
  j["inspect"] = c.inspect;
  return j;
}

void apply_json(RunConfig& config, const json& j, std::string_view source) {
  RunConfig next = config;  // all or nothing: a bad key leaves `config` as it was
  try {
    apply(next, j);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(source) + ": " + e.what());
  }
  config = std::move(next);
}

RunConfig run_config_from_json(const json& j, std::string_view source) {
  RunConfig c;
  apply_json(c, j, source);
  return c;
}

void save_preset(const RunConfig& config, const std::filesystem::path& path) {
  try {
    config.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": not saved: " + e.what());
  }
  io::write_file_atomic(path, to_json(config).dump(2) + "\n");
}

RunConfig load_preset(const std::filesystem::path& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::parse_error& e) {
    throw FileError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
  return run_config_from_json(j, path.string());
}

}  // namespace nanscope
