#pragma once
// Helpers shared by the benches: wall clock, medians, and running a PyTorch
// baseline script as a well-set-up user would run it (OpenBLAS with
// OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset, GLIBC_TUNABLES=glibc.malloc.hugetlb=1,
// HF_HUB_OFFLINE=1), reading the JSON object it prints last.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanscope::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
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

// Runs bench/SCRIPT with the oracle venv's Python (NANSCOPE_PYTHON overrides)
// and ARGS (already shell-quoted where needed), as run_json_command does.
inline std::optional<nlohmann::json> run_python_baseline(const std::string& script, const std::string& args) {
  const char* py_env = std::getenv("NANSCOPE_PYTHON");
  const std::string py = py_env ? py_env : NANSCOPE_SOURCE_DIR "/.venv/bin/python";
  const std::string cmd =
      "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "
      "HF_HUB_OFFLINE=1 '" +
      py + "' '" NANSCOPE_SOURCE_DIR "/bench/" + script + "' " + args;
  return run_json_command(cmd, "PyTorch baseline " + script + " (is .venv set up? run tools/setup.sh)");
}

}  // namespace nanscope::bench
