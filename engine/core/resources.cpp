#include "core/resources.hpp"

#include <cstdlib>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope {

namespace fs = std::filesystem;

fs::path find_resource(std::string_view what, std::string_view relative, const char* env_var, std::string_view hint) {
  std::vector<fs::path> tried;
  const auto found = [&](const fs::path& p, const char* how) {
    if (fs::is_directory(p)) {
      log::debug("{}: {} ({})", what, p.string(), how);
      return true;
    }
    tried.push_back(p);
    return false;
  };
  if (const char* env = std::getenv(env_var); env && *env) {
    if (found(env, env_var)) return env;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "nanscope" / relative;
    if (found(installed, "installed beside the executable")) return installed;
  }
  const fs::path source = fs::path(NANSCOPE_SOURCE_DIR) / "resources" / relative;
  if (found(source, "the source tree this build came from")) return source;
  std::string where;
  for (const auto& t : tried) where += "\n  " + t.string();
  throw FileError(std::string(what) + " was not found; looked in:" + where + "\n" + std::string(hint));
}

}  // namespace nanscope
