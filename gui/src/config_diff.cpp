#include "config_diff.hpp"

#include "config/preset.hpp"
#include "config/settings.hpp"

namespace nanscope::gui {

namespace {

// The fields an override sets, as (field, --set text).
std::vector<std::pair<std::string, std::string>> override_fields(const PrecisionOverride& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const PrecisionField& f : precision_fields()) {
    const nlohmann::json v = f.get_override(o);
    if (!v.is_null()) out.emplace_back(f.spec.key, f.spec.format(v));
  }
  return out;
}

}  // namespace

ConfigDiff config_diff(const RunConfig& base, const RunConfig& t) {
  ConfigDiff d;
  auto& s = d.sets;
  auto add = [&s](const std::string& k, const std::string& v) { s.push_back(k + "=" + v); };
  // Every row that differs, in table order: seed comes before seeds (which
  // sets seed and batch_size) and seeds before batch_size, so the assignments
  // compose (an empty seeds= clears the list before batch_size is set).
  for (const Setting& row : settings()) {
    const nlohmann::json want = row.get(t);
    if (row.get(base) != want) add(row.key, row.format(want));
  }
  if (base.overrides != t.overrides) {
    // Clear every field of the base's overrides, then set the target's in order.
    for (const auto& o : base.overrides)
      for (const auto& [k, v] : override_fields(o)) add(o.pattern + "." + k, "");
    for (const auto& o : t.overrides)
      for (const auto& [k, v] : override_fields(o)) add(o.pattern + "." + k, v);
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
