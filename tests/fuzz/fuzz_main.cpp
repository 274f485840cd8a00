// One libFuzzer program per target (NANSCOPE_FUZZ_TARGET names it): the
// engine's logs are silenced, every input goes to the target's function.

#include <cstdio>
#include <cstdlib>

#include "core/log.hpp"
#include "fuzz_targets.hpp"

namespace {

const nanscope::fuzz::FuzzTarget& target() {
  static const nanscope::fuzz::FuzzTarget* t = [] {
    const auto* found = nanscope::fuzz::find_fuzz_target(NANSCOPE_FUZZ_TARGET);
    if (!found) {
      std::fprintf(stderr, "no fuzz target named %s\n", NANSCOPE_FUZZ_TARGET);
      std::abort();
    }
    return found;
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nanscope::log::set_level("off");
  (void)target();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  target().run({data, size});
  return 0;
}
