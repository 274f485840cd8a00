#pragma once
// The settings table: every key a user can `--set`, each listed once with its
// type, default, allowed values or range, help text and (where A1111 has one)
// its infotext name, and how it is read from and written to a RunConfig.
//
// Everything that handles settings walks this table instead of listing keys:
// RunConfig::set and validate (config/run_config.hpp), presets in and out
// (config/preset.hpp), the A1111 text (config/a1111.hpp), the inspector
// settings (config/inspect_settings.hpp), `nanscope-cli config keys`, the
// GUI's config diff and its spin-box ranges and tooltips. A new setting is one
// row in settings.cpp plus the code that uses it.
//
// Values travel as JSON, the form presets keep them in: a string, a number, a
// list of seeds. parse() turns `--set` text into that form, check() holds a
// value against the row (every path: --set, presets, validate), format()
// turns it back into `--set` text, and get/put move it in and out of a
// RunConfig. Every message names the key (or the preset's key path) and what
// is allowed.
//
// The precision keys are a family: precision_fields() lists the fields once
// (dtype, accumulate, attention.softmax, attention.impl,
// attention.slice_size), and the table holds one row per component and field
// (`unet.dtype`). Per-module overrides (`unet.up_blocks.*.attn1.accumulate`)
// use the same fields with the pattern logic of module_pattern.hpp; they are
// not rows because their patterns are the user's.

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/run_config.hpp"

namespace nanscope {

enum class SettingType : std::uint8_t {
  text,       // any string
  integer,    // a whole number from min to max
  number,     // a finite number from min to max
  size,       // 0 (the model's default) or a multiple of 8 from min to max
  seed,       // a whole number from 0 to 2^64-1
  seed_list,  // seeds separated by commas (JSON: a list), at most max of them
  choice,     // one of `choices`
};
std::string_view setting_type_name(SettingType t);  // "integer"

// The "Key: value" fields of an A1111 parameters line, unquoted.
using A1111Fields = std::map<std::string, std::string, std::less<>>;

struct Setting {
  std::string key{};  // as `--set` takes it: "steps", "unet.attention.slice_size", "inspect.trace"
  SettingType type = SettingType::text;
  std::string default_value{};  // the `--set` text of the default
  double min = 0, max = 0;      // integer, number, size; seed_list: the most seeds; text: the most bytes (0: any)
  // choice: the allowed values as listed to users ("retry-vae:PATH" stands for
  // a family); `canonical` (below) decides what is accepted.
  std::vector<std::string> choices{};
  std::string help{};
  std::string a1111{};       // A1111 infotext name ("Steps"); "" when A1111 has none
  std::string json_path{};   // where presets keep it ("precision.unet.dtype"); "" means the key itself
  bool keep_spaces = false;  // text: leading and trailing spaces belong to the value (prompts)
  // Presets leave it out while it holds its default, so that presets stay
  // readable by versions that predate the key (the inspector settings).
  bool omit_default = false;

  std::function<nlohmann::json(const RunConfig&)> get{};
  // Stores a value check() accepted. May throw ConfigError naming the key when
  // the value conflicts with another setting (batch_size against seeds).
  std::function<void(RunConfig&, const nlohmann::json&)> put{};
  // choice: the value `text` stands for (aliases such as fp16 -> f16), or
  // nullopt when it is not allowed. Unset: exactly one of `choices`.
  std::function<std::optional<std::string>(std::string_view text)> canonical{};

  // A1111, where its text is not the `--set` text. to_a1111: the infotext
  // value, nullopt to leave the field out (unset: format(get())). from_a1111:
  // stores the field's value, seeing every field (unset: RunConfig::set). Rows
  // that share a name (width, height: "Size") are written and read by the
  // first one. a1111_read false: written for people only (Model and VAE are
  // names, not paths).
  std::function<std::optional<std::string>(const RunConfig&)> to_a1111{};
  std::function<void(RunConfig&, const std::string& value, const A1111Fields& all)> from_a1111{};
  bool a1111_read = true;

  const std::string& path() const { return json_path.empty() ? key : json_path; }
  bool ranged() const;  // has a min..max range (integer, number, size)
  // "an integer from 1 to 10000", "one of: f32, f16, bf16", ...
  std::string allowed() const;
  // `--set` text -> a checked value; throws ConfigError naming the key.
  nlohmann::json parse(std::string_view text) const;
  // Throws ConfigError naming `where` (the key, or a preset's key path) unless
  // `value` is allowed; returns it in canonical form (choice aliases resolved).
  nlohmann::json check(const nlohmann::json& value, std::string_view where) const;
  // A value -> its `--set` text (parse(format(v)) == v).
  std::string format(const nlohmann::json& value) const;
  nlohmann::json default_json() const;
};

// One precision field, for a component's default and for per-module overrides.
struct PrecisionField {
  Setting spec;  // key: the field ("attention.softmax"); type, default, allowed values, help
  std::function<nlohmann::json(const ComponentPrecision&)> get;
  std::function<void(ComponentPrecision&, const nlohmann::json&)> put;
  std::function<nlohmann::json(const PrecisionOverride&)> get_override;         // null: the override leaves it unset
  std::function<void(PrecisionOverride&, const nlohmann::json&)> put_override;  // null: unset it
};

// Every row, in the order `config keys` lists them and presets and the A1111
// text are written (A1111's own order: Steps, Sampler, CFG scale, Seed, Size,
// Model, VAE, Clip skip, RNG).
const std::vector<Setting>& settings();
// The row of `key`, or null (per-module override keys have none).
const Setting* find_setting(std::string_view key);
// The row of `key`; throws ConfigError for a key that is not one (a programming error).
const Setting& setting(std::string_view key);
const std::vector<PrecisionField>& precision_fields();

// All keys, for "unknown key" messages: the rows outside the families, then
// the families ("COMPONENT[.PATTERN].FIELD (...)", "inspect.NAME (...)").
std::string allowed_keys();

}  // namespace nanscope
