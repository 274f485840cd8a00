// The fuzz corpus replayed by the normal suite (docs/fuzzing.md): every file of
// tests/fuzz/corpus/<target>/ (the seeds and every input a fuzzer found a bug
// with) goes through the same function the libFuzzer program calls, so a
// finding that was fixed stays fixed in the gcc build too. Any exception
// outside the engine's error family, or a broken check, fails the file.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <vector>

#include "core/log.hpp"
#include "fuzz_targets.hpp"

namespace nanscope {
namespace fuzz {
// gtest names the parameter of a failing case with this.
void PrintTo(const FuzzTarget& t, std::ostream* os) { *os << t.name; }
}  // namespace fuzz

namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(NANSCOPE_TESTS_DIR) / "fuzz" / "corpus";

std::vector<std::uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FuzzCorpus : public ::testing::TestWithParam<fuzz::FuzzTarget> {};

TEST_P(FuzzCorpus, EveryInputIsAcceptedOrRefusedWithAnEngineError) {
  const fuzz::FuzzTarget& target = GetParam();
  const fs::path dir = kCorpus / std::string(target.name);
  ASSERT_TRUE(fs::is_directory(dir)) << dir << ": every target needs a seed corpus";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir << " is empty";
  log::set_level("off");
  for (const auto& f : files) {
    const std::vector<std::uint8_t> data = read_bytes(f);
    try {
      target.run(data);
    } catch (const std::exception& e) {
      ADD_FAILURE() << target.name << ": " << f.filename() << ": " << e.what();
    }
  }
  log::set_level("info");
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(fuzz::fuzz_targets()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FuzzCorpus, EveryCorpusFolderIsATarget) {
  for (const auto& e : fs::directory_iterator(kCorpus)) {
    EXPECT_NE(fuzz::find_fuzz_target(e.path().filename().string()), nullptr)
        << e.path() << " belongs to no fuzz target (tests/fuzz/fuzz_targets.cpp)";
  }
}

}  // namespace
}  // namespace nanscope
