#include "studies/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "config/preset.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_file.hpp"
#include "studies/scenario.hpp"

namespace nanscope::studies {

using namespace inspect;  // the inspector's values and detectors

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

std::string csv_field(std::string s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

SweepSpec SweepSpec::load(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw FileError(file.string() + ": cannot read the sweep spec");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw FileError(file.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || j.value("nanscope_sweep", 0) != 1)
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
  s.out = dir / j.value("out", std::string("sweep-out"));
  RunConfig base;
  if (j.contains("preset")) {
    const fs::path p(j["preset"].get<std::string>());
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
          resolve_vae_path(c.config);
          s.cells.push_back(std::move(c));
        }
  return s;
}

bool run_sweep_cell(const SweepSpec& spec, int index) {
  if (index < 0 || index >= static_cast<int>(spec.cells.size()))
    throw ConfigError("sweep: cell " + std::to_string(index) + " does not exist; the spec has " +
                      std::to_string(spec.cells.size()) + " cells (0.." + std::to_string(spec.cells.size() - 1) + ")");
  const SweepCell& c = spec.cells[static_cast<std::size_t>(index)];
  const fs::path report = spec.report_path(c);
  if (fs::exists(report)) {
    log::info("sweep cell {} ({}): report exists, skipped", index, c.id);
    return false;
  }
  fs::create_directories(report.parent_path());
  pipeline::Session session;
  InspectedRun run = run_inspected(session, c.config);
  run.report["cell"] = {{"index", c.index}, {"id", c.id},     {"config", c.config_name},
                        {"seed", c.seed},   {"size", c.size}, {"device", c.device}};
  io::write_file_atomic(report, run.report.dump(2) + "\n");
  log::info("sweep cell {} ({}): {}", index, c.id, run.summary);
  return true;
}

int merge_sweep(const SweepSpec& spec) {
  std::ostringstream csv, md;
  csv << "cell,id,config,seed,size,device,verdict,origin,first_bad_step,sampling_s,decode_s,summary\n";
  md << "| cell | config | seed | size | device | verdict | origin | first bad step "
        "|\n|---|---|---|---|---|---|---|---|\n";
  int done = 0;
  for (const auto& c : spec.cells) {
    const fs::path p = spec.report_path(c);
    std::string verdict = "not run", origin, first, sampling, decode, summary;
    if (fs::exists(p)) {
      std::ifstream in(p);
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded()) {
        ++done;
        verdict = j.value("verdict", "");
        origin = j["origin"].is_string() ? j["origin"].get<std::string>() : "";
        first = j["first_bad_step"].is_number() ? std::to_string(j["first_bad_step"].get<int>()) : "";
        summary = j.value("summary", "");
        if (j.contains("timings")) {
          sampling = std::to_string(j["timings"].value("sampling", 0.0));
          decode = std::to_string(j["timings"].value("decode", 0.0));
        }
      } else {
        verdict = "unreadable report";
      }
    }
    csv << c.index << ',' << csv_field(c.id) << ',' << csv_field(c.config_name) << ',' << c.seed << ','
        << csv_field(c.size) << ',' << csv_field(c.device) << ',' << csv_field(verdict) << ',' << csv_field(origin)
        << ',' << first << ',' << sampling << ',' << decode << ',' << csv_field(summary) << '\n';
    md << "| " << c.index << " | " << c.config_name << " | " << c.seed << " | " << (c.size.empty() ? "default" : c.size)
       << " | " << (c.device.empty() ? "default" : c.device) << " | " << verdict << " | "
       << (origin.empty() ? "" : "`" + origin + "`") << " | " << first << " |\n";
  }
  fs::create_directories(spec.out);
  io::write_file_atomic(spec.out / "summary.csv", csv.str());
  io::write_file_atomic(spec.out / "summary.md", md.str());
  return done;
}

}  // namespace nanscope::studies
