// The settings table (config/settings.hpp) drives --set, presets, the A1111
// text, validation and `nanscope-cli config keys`: every row round-trips
// through all of them, every ranged row refuses values outside its range with
// a message naming the key and the range, and the shipped presets still load.

#include <gtest/gtest.h>
#include <spdlog/fmt/fmt.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "config/a1111.hpp"
#include "config/inspect_settings.hpp"
#include "config/preset.hpp"
#include "config/run_config.hpp"
#include "config/settings.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "support/errors.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::expect_contains;

// The message of the ConfigError fn throws.
template <typename Fn>
std::string error_of(Fn&& fn) {
  return test::error_of<ConfigError>(fn);
}

json::json_pointer pointer(const std::string& dotted) {
  std::string p = "/" + dotted;
  for (char& ch : p)
    if (ch == '.') ch = '/';
  return json::json_pointer(p);
}

std::string whole(double v) { return std::to_string(static_cast<long long>(v)); }

// `--set` texts the row allows, covering its range ends and every choice.
std::vector<std::string> allowed_texts(const Setting& row) {
  switch (row.type) {
    case SettingType::text: return {"", row.keep_spaces ? "  a cat, (masterpiece:1.2)\nline two " : "/models/x y"};
    case SettingType::integer: return {whole(row.min), whole(row.max), whole((row.min + row.max) / 2)};
    case SettingType::number:  // the ends of the row's range and a value between them
      return {fmt::format("{}", row.min), fmt::format("{}", row.max), fmt::format("{}", (row.min + row.max) / 2)};
    case SettingType::size: return {"0", whole(row.min), "1080", whole(row.max)};
    case SettingType::seed: return {"0", "18446744073709551615"};
    case SettingType::seed_list: return {"", "7", "18446744073709551615, 0, 42"};
    case SettingType::choice: {
      std::vector<std::string> out;
      for (const auto& c : row.choices) {
        const auto path = c.find("PATH");
        out.push_back(path == std::string::npos ? c : c.substr(0, path) + "/models/vae-fp16-fix");
      }
      return out;
    }
  }
  return {};
}

// A text the row allows that is not its default.
std::string other_text(const Setting& row) {
  for (const auto& t : allowed_texts(row))
    if (row.parse(t) != row.default_json()) return t;
  ADD_FAILURE() << row.key << ": no value besides the default";
  return {};
}

TEST(SettingsTable, KeysAreUniqueAndDefaultsAreRunConfigsDefaults) {
  std::set<std::string> keys, paths;
  const RunConfig defaults;
  for (const Setting& row : settings()) {
    EXPECT_TRUE(keys.insert(row.key).second) << "duplicate key " << row.key;
    EXPECT_TRUE(paths.insert(row.path()).second) << "duplicate preset path " << row.path();
    EXPECT_FALSE(row.help.empty()) << row.key;
    EXPECT_EQ(row.get(defaults), row.default_json()) << row.key << ": the row's default is not RunConfig{}'s";
    EXPECT_EQ(row.parse(row.format(row.default_json())), row.default_json()) << row.key;
    if (row.ranged()) {
      EXPECT_LT(row.min, row.max) << row.key;
    }
  }
  // The precision family: every component has every field.
  for (Component c : kComponents)
    for (const PrecisionField& f : precision_fields())
      EXPECT_NE(find_setting(std::string(component_name(c)) + "." + f.spec.key), nullptr);
  // InspectSettings{} is the table's defaults.
  const inspect::InspectSettings s;
  EXPECT_EQ(s.emulate_min_tokens, setting("inspect.emulate_min_tokens").default_json().get<int>());
  EXPECT_EQ(s.stats_every, setting("inspect.stats_every").default_json().get<int>());
  EXPECT_EQ(s.decode_every, setting("inspect.decode_every").default_json().get<int>());
  EXPECT_EQ(s.trace, inspect::TraceMode::automatic);
  EXPECT_FALSE(s.emulate_r0);
  EXPECT_EQ(s.f16_safety, setting("inspect.f16_safety").default_json() == "on");
}

TEST(SettingsTable, EveryKeyRoundTripsThroughSetJsonAndPreset) {
  test::TempDir dir;
  RunConfig all;  // every row at a value other than its default
  for (const Setting& row : settings()) {
    for (const std::string& text : allowed_texts(row)) {
      SCOPED_TRACE(row.key + "=" + text);
      RunConfig c;
      c.set(row.key, text);
      EXPECT_EQ(row.get(c), row.parse(text));
      EXPECT_EQ(row.parse(row.format(row.get(c))), row.get(c)) << "format() does not read back";
      EXPECT_NO_THROW(c.validate());
      const json j = to_json(c);
      const RunConfig back = run_config_from_json(json::parse(j.dump()));
      EXPECT_EQ(back, c) << j.dump(2);
      EXPECT_EQ(row.get(back), row.get(c));
    }
    if (row.key != "seed" && row.key != "batch_size") all.set(row.key, other_text(row));
  }
  all.set("seed", "99");  // after seeds, which set seed and batch_size: a plain seed and batch now
  all.set("batch_size", "5");
  for (const Setting& row : settings()) {
    if (row.key == "seeds") continue;  // seed cleared it
    EXPECT_NE(row.get(all), row.default_json()) << row.key;
  }
  save_preset(all, dir / "all.json");
  const RunConfig loaded = load_preset(dir / "all.json");
  EXPECT_EQ(loaded, all);
  // Presets keep every row at its path.
  std::ifstream in(dir / "all.json");
  const json file = json::parse(in);
  for (const Setting& row : settings()) {
    ASSERT_TRUE(file.contains(pointer(row.path()))) << row.path() << " not in " << file.dump(2);
    EXPECT_EQ(row.check(file.at(pointer(row.path())), row.path()), row.get(all)) << row.key;
  }
}

TEST(SettingsTable, ValuesOutsideARangeNameTheKeyAndTheRange) {
  for (const Setting& row : settings()) {
    if (!row.ranged()) continue;
    const bool number = row.type == SettingType::number;
    const std::string range =
        number ? fmt::format("from {} to {}", row.min, row.max) : "from " + whole(row.min) + " to " + whole(row.max);
    std::vector<std::string> bad = {number ? fmt::format("{}", row.max + 0.5) : whole(row.max + 1),
                                    row.type == SettingType::size ? "4" : whole(row.min - 1)};
    if (row.type == SettingType::size) bad.push_back("12");  // not a multiple of 8
    for (const std::string& text : bad) {
      SCOPED_TRACE(row.key + "=" + text);
      RunConfig c;
      expect_contains(error_of([&] { c.set(row.key, text); }), {"\"" + row.key + "\"", range, text});
      EXPECT_EQ(c, RunConfig{}) << "a refused value changed the config";
      // The same value in a preset names the preset's key path.
      json j = to_json(RunConfig{});
      j[pointer(row.path())] = json::parse(text);
      expect_contains(error_of([&] { run_config_from_json(j, "p.json"); }),
                      {"p.json", "\"" + row.path() + "\"", range});
    }
    expect_contains(error_of([&] { RunConfig().set(row.key, "many"); }), {"\"" + row.key + "\"", range, "\"many\""});
  }
  // Too many seeds names the key and the most allowed.
  std::string many;
  for (int i = 0; i < 65; ++i) many += std::to_string(i) + ",";
  expect_contains(error_of([&] { RunConfig().set("seeds", many); }), {"\"seeds\"", "at most 64"});
  // An absurd prompt (10 MB) is refused before any work, naming the limit; 64 KiB is accepted.
  for (const char* key : {"prompt", "negative_prompt"}) {
    RunConfig c;
    EXPECT_NO_THROW(c.set(key, std::string(65536, 'a')));
    expect_contains(error_of([&] { RunConfig().set(key, std::string(10 << 20, 'a')); }),
                    {"\"" + std::string(key) + "\"", "at most 65536 bytes", "10485760 bytes"});
    json j = to_json(RunConfig{});
    j[key] = std::string(65537, 'a');
    expect_contains(error_of([&] { run_config_from_json(j, "p.json"); }), {"p.json", "at most 65536 bytes"});
  }
  // Overrides check their fields against the same rows.
  expect_contains(error_of([&] { RunConfig().set("unet.up_blocks.*.attention.slice_size", "65537"); }),
                  {"\"unet.up_blocks.*.attention.slice_size\"", "from 1 to 65536"});
}

TEST(SettingsTable, ChoiceAliasesAreStoredByTheirName) {
  RunConfig c;
  c.set("unet.dtype", "fp16");
  c.set("vae.dtype", "bfloat16");
  EXPECT_EQ(c.component(Component::unet).precision.dtype, DType::f16);
  EXPECT_EQ(to_json(c)["precision"]["vae"]["dtype"], "bf16");
  c.set("unet.up_blocks.*.dtype", "half");
  EXPECT_EQ(to_json(c)["overrides"][0]["dtype"], "f16");
}

TEST(SettingsTable, InspectorSettingsAreRowsCheckedOnSetAndOnRead) {
  RunConfig c;
  expect_contains(error_of([&] { c.set("inspect.trace", "sometimes"); }),
                  {"\"inspect.trace\"", "\"sometimes\"", "auto, always, off"});
  expect_contains(error_of([&] { c.set("inspect.tracing", "on"); }),
                  {"\"inspect.tracing\"", "unknown inspector setting", "inspect.trace", "inspect.layer_retry_limit"});
  expect_contains(error_of([&] { c.set("inspect.decode_every", "-1"); }),
                  {"\"inspect.decode_every\"", "from 0 to 10000"});
  // Defaults are not kept (presets stay readable by older versions); other values are.
  c.set("inspect.stats_every", "1");
  c.set("inspect.trace", "always");
  EXPECT_EQ(c.inspect, json::parse(R"({"trace": "always"})"));
  EXPECT_EQ(to_json(c)["inspect"], json::parse(R"({"trace": "always"})"));
  c.set("inspect.trace", "auto");
  EXPECT_EQ(c.inspect, json::object());
  // JSON assigned directly (front ends, older code) is checked by validate() and by the run's reader.
  c.inspect = json::parse(R"({"trace": "sometimes"})");
  expect_contains(error_of([&] { c.validate(); }), {"\"inspect.trace\"", "auto, always, off"});
  expect_contains(error_of([&] { inspect_settings(c.inspect); }), {"\"inspect.trace\""});
  c.inspect = json::parse(R"({"preview": {"every": 5}})");
  expect_contains(error_of([&] { c.validate(); }), {"\"inspect.preview\"", "unknown inspector setting"});
  // A preset's inspect object is checked key by key.
  auto preset_error = [](const char* text) { return error_of([&] { run_config_from_json(json::parse(text)); }); };
  expect_contains(preset_error(R"({"nanscope_preset": 1, "inspect": {"decode_every": "2"}})"),
                  {"\"inspect.decode_every\"", "from 0 to 10000", "\"2\""});
  expect_contains(preset_error(R"({"nanscope_preset": 1, "inspect": {"emulation": "r0"}})"),
                  {"\"inspect.emulation\"", "unknown key", "emulate, emulate_min_tokens, trace"});
  const auto s = inspect_settings(json::parse(R"({"emulate": "r0", "trace": "off", "stats_every": 4})"));
  EXPECT_TRUE(s.emulate_r0);
  EXPECT_EQ(s.trace, inspect::TraceMode::off);
  EXPECT_EQ(s.stats_every, 4);
}

// A key is one row: checked, stored in presets and listed (the retry-layer-f32
// NaN policy reads this one through inspect_settings).
TEST(SettingsTable, LayerRetryLimitIsOneRow) {
  const Setting& row = setting("inspect.layer_retry_limit");
  EXPECT_EQ(row.type, SettingType::integer);
  EXPECT_EQ(row.default_value, "8");
  EXPECT_EQ(row.min, 0);
  EXPECT_EQ(row.max, 64);
  EXPECT_NE(row.help.find("retry-layer-f32"), std::string::npos) << row.help;
  RunConfig c;
  expect_contains(error_of([&] { c.set("inspect.layer_retry_limit", "65"); }),
                  {"\"inspect.layer_retry_limit\"", "from 0 to 64"});
  c.set("inspect.layer_retry_limit", "3");
  const json j = to_json(c);
  EXPECT_EQ(j["inspect"]["layer_retry_limit"], 3);
  EXPECT_EQ(run_config_from_json(j), c);
  EXPECT_FALSE(to_json(RunConfig{})["inspect"].contains("layer_retry_limit"));  // the default is left out
}

TEST(SettingsTable, A1111TextRoundTripsTheKeysWithA1111Names) {
  RunConfig c;
  for (const Setting& row : settings())
    if (!row.a1111.empty() && row.a1111_read) c.set(row.key, other_text(row));
  c.set("width", "832");  // Size needs both
  c.set("height", "1216");
  c.set("model", "/models/sd15.safetensors");
  c.set("vae", "/models/vae-ft-mse/");
  // Lora hashes are the files' hashes: written for a LoRA that exists.
  test::TempDir lora_dir;
  io::write_safetensors(lora_dir / "style.safetensors",
                        {{"lora_unet_x.lora_down.weight", HostTensor::from_f32({1, 1}, {1.0f})}});
  c.set("lora", (lora_dir / "style.safetensors").string() + ":0.5");
  const std::string text = a1111_parameters(c);
  std::set<std::string> names;
  for (const Setting& row : settings()) {
    if (row.a1111.empty()) continue;
    names.insert(row.a1111);
    // A1111 writes "Hires upscale" or, with a target size (hires.width/height set here), "Hires resize".
    if (row.a1111 == "Hires upscale") continue;
    EXPECT_NE(text.find(row.a1111 + ": "), std::string::npos) << row.a1111 << " not in: " << text;
  }
  const RunConfig back = run_config_from_a1111(text);
  for (const Setting& row : settings()) {
    if (row.a1111.empty() || !row.a1111_read) continue;
    // A1111 has one "Denoising strength": img2img's strength, or (with "Hires upscale") the hires pass's
    // denoise. This text has the hires fix on, so it carries hires.denoise and not strength.
    if (row.key == "strength") continue;
    if (row.key == "hires.scale") continue;  // not written beside Hires resize (below without it)
    EXPECT_EQ(row.get(back), row.get(c)) << row.key << " (" << row.a1111 << ") in: " << text;
  }
  RunConfig scaled = c;
  scaled.hires_width = scaled.hires_height = 0;
  EXPECT_EQ(run_config_from_a1111(a1111_parameters(scaled)).hires_scale, c.hires_scale);
  // Model and VAE are names for people, not paths: written, not read back.
  EXPECT_NE(text.find("Model: sd15"), std::string::npos) << text;
  EXPECT_EQ(back.model, "");
  // The defaults round-trip too (Size is left out while the model decides it).
  const RunConfig plain = run_config_from_a1111(a1111_parameters(RunConfig{}));
  for (const Setting& row : settings()) {
    if (!row.a1111.empty() && row.a1111_read) {
      EXPECT_EQ(row.get(plain), row.default_json()) << row.key;
    }
  }
  // A bad value names the A1111 field and the range of the row behind it.
  expect_contains(error_of([&] { run_config_from_a1111("p\nSteps: 0, Sampler: Euler, Seed: 1"); }),
                  {"Steps: 0", "\"steps\"", "from 1 to 10000"});
  expect_contains(error_of([&] { run_config_from_a1111("p\nSteps: 3, Clip skip: 26, Seed: 1"); }),
                  {"Clip skip: 26", "from 1 to 25"});
}

TEST(SettingsTable, ConfigKeysListsEveryKey) {
  const auto r = test::run_process({NANSCOPE_CLI_PATH, "config", "keys", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  std::map<std::string, json> listed;
  for (const json& k : out.at("keys")) listed[k.at("key").get<std::string>()] = k;
  EXPECT_EQ(listed.size(), settings().size());
  for (const Setting& row : settings()) {
    SCOPED_TRACE(row.key);
    ASSERT_TRUE(listed.contains(row.key));
    const json& k = listed[row.key];
    EXPECT_EQ(k.at("type"), std::string(setting_type_name(row.type)));
    EXPECT_EQ(k.at("default"), row.default_json());
    EXPECT_EQ(k.at("allowed"), row.allowed());
    EXPECT_EQ(k.at("help"), row.help);
    EXPECT_EQ(k.at("preset_path"), row.path());
    EXPECT_EQ(k.at("a1111"), row.a1111.empty() ? json(nullptr) : json(row.a1111));
    if (row.ranged()) {
      EXPECT_EQ(k.at("min").get<double>(), row.min);
      EXPECT_EQ(k.at("max").get<double>(), row.max);
    }
    if (row.type == SettingType::choice) {
      EXPECT_EQ(k.at("choices"), json(row.choices));
    }
  }
  EXPECT_EQ(listed["inspect.layer_retry_limit"].at("default"), 8);
  EXPECT_EQ(out.at("overrides").at("fields").size(), precision_fields().size());

  // The text form names every key with its allowed values.
  const auto text = test::run_process({NANSCOPE_CLI_PATH, "config", "keys"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const Setting& row : settings()) {
    EXPECT_NE(text.out.find("\n" + row.key + " = "), std::string::npos) << row.key;
    EXPECT_NE(text.out.find(row.allowed()), std::string::npos) << row.key;
  }
  EXPECT_NE(text.out.find("COMPONENT.PATTERN.FIELD"), std::string::npos);
}

TEST(SettingsTable, ShippedPresetsStillLoad) {
  const fs::path dir = fs::path(NANSCOPE_SOURCE_DIR) / "resources" / "presets";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    ++n;
    RunConfig c;
    ASSERT_NO_THROW(c = load_preset(e.path()));
    EXPECT_NO_THROW(c.validate());
    EXPECT_EQ(run_config_from_json(to_json(c)), c);
    EXPECT_NO_THROW(inspect_settings(c.inspect));
  }
  EXPECT_GE(n, 11);
}

}  // namespace
}  // namespace nanscope
