#include "config_diff.hpp"

#include <sstream>

#include "config/preset.hpp"

namespace nanscope::gui {

namespace {

std::string number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

void precision_fields(const PrecisionOverride& o, std::vector<std::pair<std::string, std::string>>& out) {
  if (o.dtype) out.emplace_back("dtype", std::string(dtype_name(*o.dtype)));
  if (o.accumulate) out.emplace_back("accumulate", std::string(accumulate_name(*o.accumulate)));
  if (o.softmax) out.emplace_back("attention.softmax", std::string(softmax_name(*o.softmax)));
  if (o.impl) out.emplace_back("attention.impl", std::string(attention_impl_name(*o.impl)));
  if (o.slice_size) out.emplace_back("attention.slice_size", std::to_string(*o.slice_size));
}

}  // namespace

ConfigDiff config_diff(const RunConfig& base, const RunConfig& t) {
  ConfigDiff d;
  auto& s = d.sets;
  auto add = [&s](const std::string& k, const std::string& v) { s.push_back(k + "=" + v); };
  if (base.model != t.model) add("model", t.model);
  if (base.vae != t.vae) add("vae", t.vae);
  if (base.prompt != t.prompt) add("prompt", t.prompt);
  if (base.negative_prompt != t.negative_prompt) add("negative_prompt", t.negative_prompt);
  if (base.steps != t.steps) add("steps", std::to_string(t.steps));
  if (base.cfg_scale != t.cfg_scale) add("cfg_scale", number(t.cfg_scale));
  if (base.seed != t.seed) add("seed", std::to_string(t.seed));
  if (base.seeds != t.seeds || base.batch_size != t.batch_size) {
    if (t.seeds.empty()) {
      add("seeds", "");
      add("batch_size", std::to_string(t.batch_size));
    } else {
      std::string list;
      for (auto v : t.seeds) list += (list.empty() ? "" : ",") + std::to_string(v);
      add("seeds", list);
    }
  }
  if (base.width != t.width) add("width", std::to_string(t.width));
  if (base.height != t.height) add("height", std::to_string(t.height));
  if (base.sampler != t.sampler) add("sampler", std::string(sampler_name(t.sampler)));
  if (base.noise != t.noise) add("noise", std::string(noise_name(t.noise)));
  if (base.device != t.device) add("device", t.device);
  if (base.clip_skip != t.clip_skip) add("clip_skip", std::to_string(t.clip_skip));
  if (!(base.nan_policy == t.nan_policy)) add("nan_policy", t.nan_policy.to_string());
  for (Component c : kComponents) {
    const std::string n(component_name(c));
    const auto& a = base.component(c);
    const auto& b = t.component(c);
    if (a.precision.dtype != b.precision.dtype) add(n + ".dtype", std::string(dtype_name(b.precision.dtype)));
    if (a.precision.accumulate != b.precision.accumulate)
      add(n + ".accumulate", std::string(accumulate_name(b.precision.accumulate)));
    if (a.precision.softmax != b.precision.softmax)
      add(n + ".attention.softmax", std::string(softmax_name(b.precision.softmax)));
    if (a.attention.impl != b.attention.impl)
      add(n + ".attention.impl", std::string(attention_impl_name(b.attention.impl)));
    if (a.attention.slice_size != b.attention.slice_size)
      add(n + ".attention.slice_size", std::to_string(b.attention.slice_size));
  }
  if (base.overrides != t.overrides) {
    // Clear every field of the base's overrides, then set the target's in order.
    for (const auto& o : base.overrides) {
      std::vector<std::pair<std::string, std::string>> fields;
      precision_fields(o, fields);
      for (const auto& [k, v] : fields) add(o.pattern + "." + k, "");
    }
    for (const auto& o : t.overrides) {
      std::vector<std::pair<std::string, std::string>> fields;
      precision_fields(o, fields);
      for (const auto& [k, v] : fields) add(o.pattern + "." + k, v);
    }
  }
  if (base.inspect != t.inspect) {
    for (auto it = t.inspect.begin(); it != t.inspect.end(); ++it) {
      if (base.inspect.contains(it.key()) && base.inspect[it.key()] == it.value()) continue;
      add("inspect." + it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
    }
  }
  // Check: the assignments must rebuild the target exactly.
  try {
    RunConfig probe = base;
    for (const auto& a : s) probe.set(a);
    d.ok = to_json(probe) == to_json(t);
  } catch (const std::exception&) {
    d.ok = false;
  }
  return d;
}

}  // namespace nanscope::gui
