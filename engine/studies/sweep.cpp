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

std::string csv_field(std::string s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

SweepSpec SweepSpec::load(const fs::path& file) {
  SweepSpec s = read(file);
  for (auto& c : s.cells) resolve_vae_path(c.config);
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
