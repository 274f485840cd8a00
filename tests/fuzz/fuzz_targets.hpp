#pragma once
// The fuzz targets (docs/fuzzing.md): one plain function per reader, shared by
// the libFuzzer programs (fuzz_main.cpp, built with NANSCOPE_BUILD_FUZZERS=ON)
// and the normal suite (tests/test_fuzz_corpus.cpp), which replays every file
// of tests/fuzz/corpus/<target>/ through the same function.
//
// A target returns normally when the reader accepted the input or refused it
// with the engine's error family (nanscope::Error: the message names the file,
// the key and what to do). Anything else is a finding: another exception
// escapes (a std::out_of_range, a json::type_error...), a check on what the
// reader returned fails (FuzzFinding), or a sanitizer stops the process.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace nanscope::fuzz {

// A broken property of an accepted input (a preset that does not read back...).
class FuzzFinding : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct FuzzTarget {
  std::string_view name;  // the corpus folder and the program's suffix: fuzz_<name>
  std::string_view what;  // one line for docs and failure messages
  void (*run)(std::span<const std::uint8_t> input);
};

// Every target, in the order of docs/fuzzing.md.
const std::vector<FuzzTarget>& fuzz_targets();
// The target with this name, or null.
const FuzzTarget* find_fuzz_target(std::string_view name);

}  // namespace nanscope::fuzz
