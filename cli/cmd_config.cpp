// `nanscope-cli config keys [--json]`: the settings table (config/settings.hpp)
// as users need it: every key `--set` takes and presets store, its type,
// default, allowed values or range, help, and its A1111 field where it has one;
// then the per-module override form.
#include <nlohmann/json.hpp>

#include <iostream>

#include "common.hpp"
#include "config/settings.hpp"

namespace nanscope::cli {

namespace {

nlohmann::json row_json(const Setting& s) {
  nlohmann::json j = {
      {"key", s.key},
      {"type", std::string(setting_type_name(s.type))},
      {"default", s.default_json()},
      {"allowed", s.allowed()},
      {"help", s.help},
      {"preset_path", s.path()},
      {"a1111", s.a1111.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.a1111)},
  };
  if (s.ranged()) {
    // Whole numbers print as such; cfg_scale's range stays a number.
    j["min"] = s.type == SettingType::number ? nlohmann::json(s.min) : nlohmann::json(static_cast<long long>(s.min));
    j["max"] = s.type == SettingType::number ? nlohmann::json(s.max) : nlohmann::json(static_cast<long long>(s.max));
  }
  if (s.type == SettingType::seed_list) j["max_seeds"] = static_cast<long long>(s.max);
  if (s.type == SettingType::choice) j["choices"] = s.choices;
  return j;
}

std::string field_names() {
  std::string s;
  for (const PrecisionField& f : precision_fields()) s += (s.empty() ? "" : ", ") + f.spec.key;
  return s;
}

constexpr const char* kOverrideForm = "COMPONENT.PATTERN.FIELD";
constexpr const char* kOverrideExample = "unet.up_blocks.*.attentions.*.attn1.accumulate=f32";

int run_keys(bool json) {
  if (json) {
    nlohmann::json out;
    out["keys"] = nlohmann::json::array();
    for (const Setting& s : settings()) out["keys"].push_back(row_json(s));
    nlohmann::json fields = nlohmann::json::array();
    for (const PrecisionField& f : precision_fields()) fields.push_back(row_json(f.spec));
    out["overrides"] = {{"key", kOverrideForm},
                        {"example", kOverrideExample},
                        {"help",
                         "Per-module precision: FIELD for the modules PATTERN matches (module_pattern.hpp); "
                         "an empty value removes the field"},
                        {"fields", fields}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "Every KEY that `--set KEY=VALUE` takes, with its default, allowed values and help.\n"
               "Presets store the same settings (at the preset path shown where it differs from the key).\n\n";
  for (const Setting& s : settings()) {
    std::cout << s.key << " = " << (s.default_value.empty() ? "\"\"" : s.default_value) << "\n";
    std::cout << "    " << s.allowed();  // names the type too ("an integer from 1 to 10000")
    if (s.path() != s.key) std::cout << "; preset path " << s.path();
    if (!s.a1111.empty()) std::cout << "; A1111 \"" << s.a1111 << "\"";
    std::cout << "\n    " << s.help << "\n";
  }
  std::cout << "\n"
            << kOverrideForm << " = VALUE   (e.g. " << kOverrideExample << ")\n"
            << "    per-module precision: FIELD (" << field_names()
            << ") for the modules PATTERN matches, values as for unet.FIELD above; an empty value removes it\n";
  return 0;
}

}  // namespace

void add_config_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* cmd = app.add_subcommand("config", "Run settings: the keys --set takes and presets store");
  cmd->require_subcommand(1);
  auto* keys = cmd->add_subcommand("keys", "List every setting: type, default, allowed values or range, help");
  auto json = std::make_shared<bool>(false);
  keys->add_flag("--json", *json, "Print the table as JSON");
  keys->callback([&action, json] { action = [json] { return run_keys(*json); }; });
}

}  // namespace nanscope::cli
