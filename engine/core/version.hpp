#pragma once
// Which NaNscope this is: the project version (project(VERSION) in the top
// CMakeLists.txt) and the git commit it was built from. The commit is taken at
// build time by cmake/version_info.cmake and linked into the programs
// (nanscope, nanscope-cli) only; a build from a tree that is not a git
// checkout has none, and neither do the test executables. `--version`, the
// PNG metadata, the JSON reports and the workbench's About box all say the same.

#include <string>
#include <string_view>

namespace nanscope {

// "0.1.0"
std::string_view version();

// The short commit ("20587d2c1f"), or "" when the build had no git checkout
// (and in executables other than the programs).
std::string_view git_commit();

// "<program> 0.1.0 (git 20587d2c1f)", or "<program> 0.1.0" without a commit.
std::string version_line(std::string_view program);

}  // namespace nanscope
