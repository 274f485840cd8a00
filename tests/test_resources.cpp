// The one lookup of bundled resources (core/resources.hpp): a user's folder
// from the environment wins, the source tree serves a build run from its
// tree, and a miss names every place looked at and what to do. The installed
// layout (<prefix>/bin beside <prefix>/share/nanscope) is checked by the
// package test, which runs the programs from an unpacked .deb.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "core/resources.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

TEST(Resources, TheEnvironmentWinsThenTheSourceTree) {
  test::TempDir mine;
  {
    const ScopedEnv env("NANSCOPE_TEST_RESOURCE_DIR", mine.path().string());
    EXPECT_EQ(find_resource("the presets", "presets", "NANSCOPE_TEST_RESOURCE_DIR", "hint"), mine.path());
  }
  // Unset (or pointing nowhere): the build's own source tree.
  const ScopedEnv nowhere("NANSCOPE_TEST_RESOURCE_DIR", (mine / "missing").string());
  EXPECT_EQ(find_resource("the presets", "presets", "NANSCOPE_TEST_RESOURCE_DIR", "hint"),
            fs::path(NANSCOPE_SOURCE_DIR) / "resources" / "presets");
}

TEST(Resources, AMissNamesEveryPlaceAndWhatToDo) {
  test::TempDir mine;
  const ScopedEnv env("NANSCOPE_TEST_RESOURCE_DIR", (mine / "missing").string());
  try {
    (void)find_resource("the test resource", "no-such-folder", "NANSCOPE_TEST_RESOURCE_DIR", "Set it right.");
    FAIL() << "found a folder that does not exist";
  } catch (const FileError& e) {
    const std::string what = e.what();
    for (const std::string& part :
         {std::string("the test resource was not found"), (mine / "missing").string(),
          std::string("share/nanscope/no-such-folder"), std::string(NANSCOPE_SOURCE_DIR) + "/resources/no-such-folder",
          std::string("Set it right.")}) {
      EXPECT_NE(what.find(part), std::string::npos) << "no \"" << part << "\" in: " << what;
    }
  }
}

}  // namespace
}  // namespace nanscope
