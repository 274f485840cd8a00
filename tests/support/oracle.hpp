#pragma once
// Running the Python oracles in tests/oracles through the project's venv.
//
// The python is $NANSCOPE_PYTHON, else the repo's .venv (NANSCOPE_DEFAULT_PYTHON).
// When it is missing a test skips with "run tools/setup.sh to create .venv" —
// except when $CI is set: then it fails, so CI cannot pass by skipping.
// Data goes both ways through safetensors files in a TempDir: the C++ side
// writes inputs, the oracle writes outputs.

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanscope::test {

std::filesystem::path tests_dir();
std::filesystem::path oracle_script(std::string_view name);  // tests/oracles/<name>

std::optional<std::filesystem::path> find_python();
std::string python_missing_message();
// True when $CI is set and not "0"/"false": missing prerequisites fail instead of skipping.
bool in_ci();

// Skips (or, under CI, fails) the current test when the oracle python is missing.
#define NANSCOPE_REQUIRE_PYTHON()                                   \
  do {                                                              \
    if (!::nanscope::test::find_python()) {                         \
      if (::nanscope::test::in_ci()) {                              \
        FAIL() << ::nanscope::test::python_missing_message();       \
      } else {                                                      \
        GTEST_SKIP() << ::nanscope::test::python_missing_message(); \
      }                                                             \
    }                                                               \
  } while (0)

// A fresh directory under $TMPDIR, removed with its content on destruction
// (kept when $NANSCOPE_KEEP_TEMP is set, for looking at oracle files).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  double seconds = 0.0;
};

// Runs argv[0] (a path) with posix_spawn, stdout and stderr captured. Adds
// HF_HUB_OFFLINE=1 and PYTHONDONTWRITEBYTECODE=1 to the environment.
ProcessResult run_process(const std::vector<std::string>& argv);

// Runs `python tests/oracles/<script> args...`. Throws std::runtime_error with
// the command line and the oracle's stderr when it exits non-zero. Call only
// after NANSCOPE_REQUIRE_PYTHON().
ProcessResult run_oracle(std::string_view script, const std::vector<std::string>& args);

// A tiny SD 1.x diffusers pipeline with seeded random weights, made once per
// process by pipeline_oracle.py (`make`) in a TempDir. Call only after
// NANSCOPE_REQUIRE_PYTHON().
const std::filesystem::path& tiny_sd_pipeline_dir();

}  // namespace nanscope::test
