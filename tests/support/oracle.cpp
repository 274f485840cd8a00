#include "support/oracle.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace nanscope::test {

namespace {

std::string env_or(const char* name, std::string_view fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tail(const std::string& s, std::size_t n) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

}  // namespace

std::filesystem::path tests_dir() { return NANSCOPE_TESTS_DIR; }

std::filesystem::path oracle_script(std::string_view name) { return tests_dir() / "oracles" / std::string(name); }

std::optional<std::filesystem::path> find_python() {
  const std::filesystem::path p = env_or("NANSCOPE_PYTHON", NANSCOPE_DEFAULT_PYTHON);
  if (::access(p.c_str(), X_OK) != 0) return std::nullopt;
  return p;
}

std::string python_missing_message() {
  return "no oracle python at " + env_or("NANSCOPE_PYTHON", NANSCOPE_DEFAULT_PYTHON) +
         ": run tools/setup.sh to create .venv (or point NANSCOPE_PYTHON at a python with torch and safetensors)";
}

bool in_ci() {
  const std::string v = env_or("CI", "");
  return !v.empty() && v != "0" && v != "false";
}

TempDir::TempDir() {
  std::string templ = (std::filesystem::temp_directory_path() / "nanscope-test-XXXXXX").string();
  if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
  path_ = templ;
}

TempDir::~TempDir() {
  if (std::getenv("NANSCOPE_KEEP_TEMP")) {
    std::fprintf(stderr, "[nanscope] kept temp dir %s\n", path_.c_str());
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  TempDir io;
  const auto out_path = io / "stdout";
  const auto err_path = io / "stderr";

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string_view s(*e);
    if (s.starts_with("HF_HUB_OFFLINE=") || s.starts_with("PYTHONDONTWRITEBYTECODE=")) continue;
    env_strings.emplace_back(s);
  }
  env_strings.emplace_back("HF_HUB_OFFLINE=1");
  env_strings.emplace_back("PYTHONDONTWRITEBYTECODE=1");
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed for " + argv[0]);
  }
  ProcessResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

ProcessResult run_oracle(std::string_view script, const std::vector<std::string>& args) {
  const auto python = find_python();
  if (!python) throw std::runtime_error(python_missing_message());
  std::vector<std::string> argv{python->string(), oracle_script(script).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult r = run_process(argv);
  if (r.exit_code != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    throw std::runtime_error("oracle failed (exit " + std::to_string(r.exit_code) + "): " + cmd + "\n--- stderr ---\n" +
                             tail(r.err, 6000));
  }
  return r;
}

const std::filesystem::path& tiny_sd_pipeline_dir() {
  static TempDir dir;
  static std::filesystem::path made;
  if (made.empty()) {
    run_oracle("pipeline_oracle.py", {"make", (dir / "tiny-sd").string()});
    made = dir / "tiny-sd";
  }
  return made;
}

}  // namespace nanscope::test
