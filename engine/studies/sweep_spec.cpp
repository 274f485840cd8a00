#include "studies/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "config/preset.hpp"
#include "core/error.hpp"

namespace nanscope::studies {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> strings(const nlohmann::json& j, const std::string& key) {
  std::vector<std::string> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) throw ConfigError("sweep: \"" + key + "\" must be a list of strings");
  for (const auto& v : j[key]) {
    if (!v.is_string()) throw ConfigError("sweep: \"" + key + "\" must be a list of strings, found " + v.dump());
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

SweepSpec SweepSpec::read(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw FileError(file.string() + ": cannot read the sweep spec");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FileError(file.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("nanscope_sweep") || j["nanscope_sweep"] != 1)
    throw ConfigError(file.string() + ": expected an object with \"nanscope_sweep\": 1");
  for (const auto& [k, v] : j.items()) {
    static const char* known[] = {"nanscope_sweep", "preset", "set", "configs", "seeds", "sizes", "devices", "out"};
    if (std::find(std::begin(known), std::end(known), k) == std::end(known))
      throw ConfigError(file.string() + ": unknown key \"" + k +
                        "\" (known: preset, set, configs, seeds, sizes, devices, out)");
  }
  SweepSpec s;
  s.file = file;
  const fs::path dir = file.parent_path();
  const auto text = [&](const char* key, const std::string& fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_string()) {
      throw ConfigError(file.string() + ": \"" + key + "\" must be a path (a string), found " + j[key].dump());
    }
    return j[key].get<std::string>();
  };
  s.out = dir / text("out", "sweep-out");
  RunConfig base;
  if (j.contains("preset")) {
    const fs::path p(text("preset", ""));
    base = load_preset(p.is_absolute() || fs::exists(p) ? p : dir / p);
  }
  for (const auto& a : strings(j, "set")) base.set(a);
  std::vector<std::pair<std::string, std::vector<std::string>>> configs;
  if (j.contains("configs")) {
    if (!j["configs"].is_object()) throw ConfigError("sweep: \"configs\" must map names to lists of key=value");
    for (const auto& [name, v] : j["configs"].items()) configs.emplace_back(name, strings(j["configs"], name));
  }
  if (configs.empty()) configs.emplace_back("base", std::vector<std::string>{});
  std::vector<std::uint64_t> seeds;
  if (j.contains("seeds")) {
    if (!j["seeds"].is_array()) throw ConfigError("sweep: \"seeds\" must be a list of whole numbers >= 0");
    for (const auto& v : j["seeds"]) {
      if (!v.is_number_unsigned()) throw ConfigError("sweep: \"seeds\" must be a list of whole numbers >= 0");
      seeds.push_back(v.get<std::uint64_t>());
    }
  }
  if (seeds.empty()) seeds.push_back(base.seed);
  auto sizes = strings(j, "sizes");
  if (sizes.empty()) sizes.push_back("");
  auto devices = strings(j, "devices");
  if (devices.empty()) devices.push_back(base.device);
  // Each cell is a run someone waits for and a full config in memory: a product
  // beyond kMaxSweepCells is a slip (a seed range pasted twice), refused before
  // anything is expanded.
  const std::uint64_t total = static_cast<std::uint64_t>(configs.size()) * seeds.size() * sizes.size() * devices.size();
  if (total > kMaxSweepCells) {
    throw ConfigError("sweep " + file.string() + ": " + std::to_string(configs.size()) + " configs x " +
                      std::to_string(seeds.size()) + " seeds x " + std::to_string(sizes.size()) + " sizes x " +
                      std::to_string(devices.size()) + " devices make " + std::to_string(total) +
                      " cells, more than the " + std::to_string(kMaxSweepCells) +
                      " a sweep may have; split it into several sweeps");
  }
  int index = 0;
  std::map<std::string, int> ids;
  for (const auto& [name, sets] : configs)
    for (auto seed : seeds)
      for (const auto& size : sizes)
        for (const auto& device : devices) {
          SweepCell c;
          c.index = index++;
          c.config_name = name;
          c.seed = seed;
          c.size = size;
          c.device = device;
          c.config = base;
          for (const auto& a : sets) c.config.set(a);
          c.config.set("seed", std::to_string(seed));
          if (!size.empty()) {
            const auto x = size.find('x');
            if (x == std::string::npos)
              throw ConfigError("sweep: size \"" + size + "\": expected WIDTHxHEIGHT, e.g. 64x64");
            c.config.set("width", size.substr(0, x));
            c.config.set("height", size.substr(x + 1));
          }
          c.config.device = device;
          c.id = name + "-seed" + std::to_string(seed) + (size.empty() ? "" : "-" + size) +
                 (device.empty() ? "" : "-" + device);
          for (char& ch : c.id)
            if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') ch = '_';
          // The id names the cell's report: two cells with one id would share it.
          if (const auto [it, fresh] = ids.emplace(c.id, c.index); !fresh) {
            throw ConfigError("sweep " + file.string() + ": cells " + std::to_string(it->second) + " and " +
                              std::to_string(c.index) + " are both \"" + c.id +
                              "\" (a seed, size or device listed twice, or config names that differ only in "
                              "characters a file name cannot hold); each cell needs its own report");
          }
          s.cells.push_back(std::move(c));
        }
  return s;
}

}  // namespace nanscope::studies
