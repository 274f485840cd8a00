#include "config/inspect_settings.hpp"

#include "config/settings.hpp"
#include "core/error.hpp"

namespace nanscope {

namespace {

// The value of inspect.NAME in a checked `inspect`, or the table's default.
nlohmann::json value(const nlohmann::json& inspect, const std::string& name) {
  const Setting& row = setting("inspect." + name);
  if (!inspect.contains(name)) return row.default_json();
  return row.check(inspect.at(name), row.key);
}

}  // namespace

inspect::InspectSettings inspect_settings(const nlohmann::json& inspect) {
  inspect::InspectSettings s;
  if (inspect.is_null()) return s;
  if (!inspect.is_object()) {
    throw ConfigError("inspect: expected an object of inspector settings, found " + inspect.dump());
  }
  RunConfig probe;  // validate() names an unknown key and lists the known ones
  probe.inspect = inspect;
  probe.validate();
  s.emulate_r0 = value(inspect, "emulate") == "r0";
  s.emulate_min_tokens = value(inspect, "emulate_min_tokens").get<int>();
  const std::string trace = value(inspect, "trace").get<std::string>();
  s.trace = trace == "always" ? inspect::TraceMode::always
            : trace == "off"  ? inspect::TraceMode::off
                              : inspect::TraceMode::automatic;
  s.decode_every = value(inspect, "decode_every").get<int>();
  s.stats_every = value(inspect, "stats_every").get<int>();
  s.layer_retry_limit = value(inspect, "layer_retry_limit").get<int>();
  s.f16_safety = value(inspect, "f16_safety") == "on";
  return s;
}

}  // namespace nanscope
