#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace nanscope::log {

namespace {
spdlog::level::level_enum parse_level(std::string_view s) {
  if (s == "trace") return spdlog::level::trace;
  if (s == "debug") return spdlog::level::debug;
  if (s == "info") return spdlog::level::info;
  if (s == "warn" || s == "warning") return spdlog::level::warn;
  if (s == "error") return spdlog::level::err;
  if (s == "off") return spdlog::level::off;
  throw ConfigError("unknown log level '" + std::string(s) + "'; use one of: trace, debug, info, warn, error, off");
}
}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto existing = spdlog::get("nanscope");
    if (existing) return existing;
    auto l = std::make_shared<spdlog::logger>("nanscope", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    l->set_level(spdlog::level::info);
    if (const char* env = std::getenv("NANSCOPE_LOG"); env && *env) {
      try {
        l->set_level(parse_level(env));
      } catch (const ConfigError& e) {
        l->warn("NANSCOPE_LOG: {}", e.what());
      }
    }
    spdlog::register_logger(l);
    return l;
  }();
  return instance;
}

void set_level(std::string_view level) { logger()->set_level(parse_level(level)); }

}  // namespace nanscope::log
