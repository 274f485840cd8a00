#pragma once
// Helpers shared by the benches: wall clock, medians, and running a PyTorch
// baseline script as a well-set-up user would run it (OpenBLAS with the
// fastest OPENBLAS_CORETYPE for this CPU, measured, and OPENBLAS_L2_SIZE
// unset; GLIBC_TUNABLES=glibc.malloc.hugetlb=1; HF_HUB_OFFLINE=1), reading the
// JSON object it prints last.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanscope::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The middle value; of an even count, the mean of the middle two.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// bench_unet --rounds: each round's a / b from two rows' "call_rounds" (one call per round, null where that
// round's process failed); nullopt where either failed. Empty unless both list the same rounds, more than one.
inline std::vector<std::optional<double>> round_ratios(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::optional<double>> out;
  if (!a.contains("call_rounds") || !b.contains("call_rounds")) return out;
  const nlohmann::json &ra = a["call_rounds"], &rb = b["call_rounds"];
  if (ra.size() != rb.size() || ra.size() < 2) return out;
  for (std::size_t i = 0; i < ra.size(); ++i)
    out.push_back(ra[i].is_null() || rb[i].is_null() ? std::nullopt
                                                     : std::optional(ra[i].get<double>() / rb[i].get<double>()));
  return out;
}

// --json FILE of every bench: its measurements as one JSON object (what
// bench_report reads to judge the speed targets). False, with a message on
// stderr, when the file cannot be written.
inline bool write_json_file(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return true;
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) {
    std::fprintf(stderr, "cannot write the results to %s\n", path.c_str());
    return false;
  }
  return true;
}

// Runs a shell command and returns the last JSON object it printed (on a line
// of its own, or as its whole output), or nullopt with a message naming
// `what` on stderr when it failed.
inline std::optional<nlohmann::json> run_json_command(const std::string& cmd, const std::string& what) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) text += buf;
  if (pclose(p) != 0) {
    std::fprintf(stderr, "%s failed\n", what.c_str());
    return std::nullopt;
  }
  const auto brace = text.rfind("\n{");
  try {
    return nlohmann::json::parse(text.substr(brace == std::string::npos ? 0 : brace + 1));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s printed no JSON result (%s)\n", what.c_str(), e.what());
    return std::nullopt;
  }
}

inline std::string python_command(const std::string& env, const std::string& script, const std::string& args) {
  const char* py_env = std::getenv("NANSCOPE_PYTHON");
  const std::string py = py_env ? py_env : NANSCOPE_SOURCE_DIR "/.venv/bin/python";
  return "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE " + env +
         " GLIBC_TUNABLES=glibc.malloc.hugetlb=1 HF_HUB_OFFLINE=1 '" + py + "' '" NANSCOPE_SOURCE_DIR "/bench/" +
         script + "' " + args;
}

// The OpenBLAS core type PyTorch multiplies fastest with on this CPU, measured
// once per bench process on a 2048 SGEMM with 2 threads per candidate: Debian's
// OpenBLAS does not know every new CPU and then falls back to a generic kernel
// (measured: 64 GFLOP/s as "Prescott" against 301 as "SkylakeX" on a new Xeon).
// `report` (printed by every bench under its table) names the winner and each
// candidate's speed. Empty when PyTorch or OpenBLAS is missing: the default.
struct CoreTypeChoice {
  std::string env_value;  // "" = let OpenBLAS detect
  std::string report;
};
inline const CoreTypeChoice& best_openblas_coretype() {
  static const CoreTypeChoice choice = [] {
    CoreTypeChoice c;
    double best = 0;
    std::string table;
    for (const char* cand : {"", "SkylakeX", "Cooperlake", "Zen", "Haswell"}) {
      const std::string env = *cand ? std::string("OPENBLAS_CORETYPE=") + cand : std::string();
      const auto j = run_json_command(python_command(env, "openblas_coretype.py", "2"),
                                      std::string("OpenBLAS core type ") + (*cand ? cand : "auto"));
      if (!j) continue;
      const double gf = j->value("gflops", 0.0);
      const std::string name = std::string(*cand ? cand : "auto") + " (" + j->value("core", "?") + ")";
      char line[160];
      std::snprintf(line, sizeof line, "%s%s %.0f", table.empty() ? "" : ", ", name.c_str(), gf);
      table += line;
      if (gf > best) best = gf, c.env_value = cand, c.report = name;
    }
    if (!table.empty()) {
      c.report =
          "PyTorch ran with OpenBLAS core type " + c.report + ", the fastest 2048 SGEMM here (GFLOP/s: " + table + ")";
    }
    return c;
  }();
  return choice;
}

// Runs bench/SCRIPT with the oracle venv's Python (NANSCOPE_PYTHON overrides)
// and ARGS (already shell-quoted where needed), as run_json_command does, under
// the fastest OpenBLAS core type.
inline std::optional<nlohmann::json> run_python_baseline(const std::string& script, const std::string& args) {
  const CoreTypeChoice& core = best_openblas_coretype();
  const std::string env = core.env_value.empty() ? std::string() : "OPENBLAS_CORETYPE=" + core.env_value;
  return run_json_command(python_command(env, script, args),
                          "PyTorch baseline " + script + " (is .venv set up? run tools/setup.sh)");
}

// The benches' own venv for the CPU inference engines NaNscope is timed
// against besides PyTorch (ONNX Runtime, OpenVINO), made by tools/bench_venv.sh;
// kept apart from the oracle venv so that neither sees the other's packages.
inline std::string bench_venv_python() { return NANSCOPE_SOURCE_DIR "/.venv-bench/bin/python"; }

// Runs bench/peer_onnx.py ENGINE EXPORT_DIR RUNS THREADS in .venv-bench: one
// call of the ONNX graph bench/export_onnx.py wrote, in ONNX Runtime or
// OpenVINO on the CPU, its output checked against PyTorch's first.
inline std::optional<nlohmann::json> run_peer(const std::string& engine, const std::string& export_dir, int runs,
                                              unsigned threads) {
  return run_json_command("env GLIBC_TUNABLES=glibc.malloc.hugetlb=1 '" + bench_venv_python() +
                              "' '" NANSCOPE_SOURCE_DIR "/bench/peer_onnx.py' " + engine + " '" + export_dir + "' " +
                              std::to_string(runs) + " " + std::to_string(threads),
                          "bench/peer_onnx.py " + engine);
}

}  // namespace nanscope::bench
