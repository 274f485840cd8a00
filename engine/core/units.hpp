#pragma once
// Byte counts as people read them in messages and logs.

#include <cstdint>
#include <cstdio>
#include <string>

namespace nanscope {

// "512.0 MiB"
inline std::string mib_text(std::uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace nanscope
