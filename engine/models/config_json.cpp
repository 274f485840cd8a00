#include "models/config_json.hpp"

#include <fstream>

#include "core/error.hpp"

namespace nanscope::models {

ConfigJson ConfigJson::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw FileError("cannot open " + path.string() + "; the model folder is incomplete");
  try {
    return ConfigJson(nlohmann::json::parse(in), path.string());
  } catch (const nlohmann::json::exception& e) {
    throw FileError(path.string() + " is not valid JSON: " + e.what());
  }
}

const nlohmann::json& ConfigJson::at(const std::string& key) const {
  if (!has(key)) throw ConfigError(origin_ + ": required key '" + key + "' is missing");
  return j_[key];
}

std::int64_t ConfigJson::get_int(const std::string& key, std::int64_t fallback) const {
  return has(key) ? require_int(key) : fallback;
}

std::int64_t ConfigJson::require_int(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_number_integer()) throw ConfigError(origin_ + ": '" + key + "' must be an integer, found " + v.dump());
  return v.get<std::int64_t>();
}

double ConfigJson::get_float(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_number()) throw ConfigError(origin_ + ": '" + key + "' must be a number, found " + v.dump());
  return v.get<double>();
}

bool ConfigJson::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_boolean()) throw ConfigError(origin_ + ": '" + key + "' must be true or false, found " + v.dump());
  return v.get<bool>();
}

std::string ConfigJson::get_string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_string()) throw ConfigError(origin_ + ": '" + key + "' must be a string, found " + v.dump());
  return v.get<std::string>();
}

std::vector<std::string> ConfigJson::require_strings(const std::string& key) const {
  const auto& v = at(key);
  std::vector<std::string> out;
  if (!v.is_array()) throw ConfigError(origin_ + ": '" + key + "' must be a list of strings, found " + v.dump());
  for (const auto& e : v) {
    if (!e.is_string()) throw ConfigError(origin_ + ": '" + key + "' must be a list of strings, found " + v.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<std::int64_t> ConfigJson::require_ints(const std::string& key) const {
  const auto& v = at(key);
  std::vector<std::int64_t> out;
  if (!v.is_array()) throw ConfigError(origin_ + ": '" + key + "' must be a list of integers, found " + v.dump());
  for (const auto& e : v) {
    if (!e.is_number_integer())
      throw ConfigError(origin_ + ": '" + key + "' must be a list of integers, found " + v.dump());
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

std::vector<std::int64_t> ConfigJson::int_or_list(const std::string& key, std::size_t n, std::int64_t fallback) const {
  if (!has(key)) return std::vector<std::int64_t>(n, fallback);
  const auto& v = j_[key];
  if (v.is_number_integer()) return std::vector<std::int64_t>(n, v.get<std::int64_t>());
  auto out = require_ints(key);
  if (out.size() != n) {
    throw ConfigError(origin_ + ": '" + key + "' has " + std::to_string(out.size()) + " entries but the model has " +
                      std::to_string(n) + " blocks");
  }
  return out;
}

void ConfigJson::unsupported(const std::string& key, const std::string& why) const {
  const std::string value = has(key) ? j_[key].dump() : "(missing)";
  throw ConfigError(origin_ + ": " + key + " = " + value + " is not supported (" + why + ")");
}

}  // namespace nanscope::models
