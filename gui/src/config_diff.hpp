#pragma once
// The `key=value` assignments (RunConfig::set grammar) that turn one config
// into another: how the GUI carries the user's edits onto a scenario preset
// that the engine runs in its own environment (R1's stress model, R4's cold cache).

#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace nanscope::gui {

// Assignments that, applied in order to `base`, give `target`; nullopt-like
// empty result with ok=false when the difference cannot be expressed (e.g.
// overrides in another order).
struct ConfigDiff {
  std::vector<std::string> sets;
  bool ok = true;
};
ConfigDiff config_diff(const RunConfig& base, const RunConfig& target);

}  // namespace nanscope::gui
