#pragma once
// Logging goes through spdlog. The engine logs to the "nanscope" logger;
// front ends add sinks (the GUI's log panel, a file).

#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>

namespace nanscope::log {

// The engine's logger (created on first use, stderr sink, level from
// NANSCOPE_LOG if set: trace, debug, info, warn, error, off).
std::shared_ptr<spdlog::logger> logger();

// Sets the level by name; throws ConfigError for an unknown name.
void set_level(std::string_view level);

template <typename... Args>
void debug(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger()->debug(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void info(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger()->info(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger()->warn(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void error(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger()->error(fmt, std::forward<Args>(args)...);
}

}  // namespace nanscope::log
