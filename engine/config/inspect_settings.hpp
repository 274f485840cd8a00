#pragma once
// The inspector's settings for one run (inspect::InspectSettings, in
// inspect/fault_emulation.hpp), read from RunConfig::inspect through the
// settings table's inspect.* rows (config/settings.cpp), which hold their
// defaults, ranges and help (`--set inspect.trace=always`).

#include <nlohmann/json.hpp>

#include "inspect/fault_emulation.hpp"

namespace nanscope {

// Reads RunConfig::inspect (null: the defaults); throws ConfigError naming the
// key (inspect.NAME) for a key the table does not have or a value it does not allow.
inspect::InspectSettings inspect_settings(const nlohmann::json& inspect);

}  // namespace nanscope
