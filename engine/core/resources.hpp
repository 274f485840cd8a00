#pragma once
// Bundled resources (the embedded default model, the scenario presets): one
// lookup that works in the build tree and in an installed layout.

#include <filesystem>
#include <string_view>

namespace nanscope {

// The folder `relative` (e.g. "models/nanscope-tiny", "presets") of the
// resources, looked for in order at:
//   $env_var, when set (a user's own copy);
//   <executable>/../share/nanscope/<relative> (the installed layout: bin/ and share/ side by side);
//   <source tree>/resources/<relative> (a build run from its tree).
// Throws FileError naming `what`, every place looked at, and `hint`.
std::filesystem::path find_resource(std::string_view what, std::string_view relative, const char* env_var,
                                    std::string_view hint);

}  // namespace nanscope
