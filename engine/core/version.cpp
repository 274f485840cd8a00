#include "core/version.hpp"

namespace nanscope {

std::string_view version() { return NANSCOPE_VERSION; }

// Overridden by the programs' build-info object (engine/core/git_commit.cpp.in,
// written at every build); executables without it (the tests) report no commit.
__attribute__((weak)) std::string_view git_commit() { return {}; }

std::string version_line(std::string_view program) {
  std::string line = std::string(program) + " " + std::string(version());
  if (!git_commit().empty()) line += " (git " + std::string(git_commit()) + ")";
  return line;
}

}  // namespace nanscope
