#pragma once
// The inspector's values as JSON (the pieces of the JSON report,
// studies/report_json.hpp, which documents the keys). JSON has no NaN or
// Inf: non-finite numbers are written as null.

#include <nlohmann/json.hpp>

#include "inspect/inspect.hpp"

namespace nanscope::inspect {

nlohmann::json to_json(const Stats& s);
nlohmann::json to_json(const MapStats& m);
nlohmann::json to_json(const StepStats& s);
nlohmann::json to_json(const OpRecord& r);
nlohmann::json to_json(const LayerTrace& t);

}  // namespace nanscope::inspect
