# Precompiled headers. A NaNscope source preprocesses to 60-160 thousand lines,
# nine tenths of them the C++ standard library, nlohmann/json, spdlog/fmt and
# GoogleTest; parsing them is a third or more of a source's compile time. They
# are parsed once per target (once for all the test programs) instead of once
# per source. Only external headers are listed: editing NaNscope's own headers
# rebuilds what includes them and nothing more. -DNANSCOPE_PCH=OFF builds
# without them (every source still includes what it uses: clang-tidy's and the
# PCH-less build's view are the same).
option(NANSCOPE_PCH "Precompile the standard and third-party headers most sources include" ON)

set(NANSCOPE_PCH_HEADERS
    <algorithm> <array> <atomic> <chrono> <cmath> <cstdint> <cstdio> <cstdlib> <cstring> <filesystem>
    <fstream> <functional> <limits> <map> <memory> <mutex> <optional> <set> <span> <sstream> <string>
    <string_view> <thread> <unordered_map> <utility> <vector> <nlohmann/json.hpp> <spdlog/spdlog.h>)

# nanscope_precompile_headers(<target> [extra headers...]): the list above, plus
# the target's own (GoogleTest, Qt, CLI11).
function(nanscope_precompile_headers target)
  if(NANSCOPE_PCH)
    target_precompile_headers(${target} PRIVATE ${NANSCOPE_PCH_HEADERS} ${ARGN})
  endif()
endfunction()

# nanscope_reuse_precompiled_headers(<target> <from>): <target> compiles with
# the same flags as <from> (it links <from> and adds no definitions of its own)
# and uses <from>'s precompiled header instead of building one more.
function(nanscope_reuse_precompiled_headers target from)
  if(NANSCOPE_PCH)
    target_precompile_headers(${target} REUSE_FROM ${from})
  endif()
endfunction()
