#pragma once
// Reading diffusers/transformers config.json files: typed getters whose errors
// name the file and the key, and the int-or-list convention diffusers uses.

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanscope::models {

class ConfigJson {
 public:
  static ConfigJson load(const std::filesystem::path& path);
  ConfigJson(nlohmann::json j, std::string origin) : j_(std::move(j)), origin_(std::move(origin)) {}

  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  std::int64_t require_int(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<std::string> require_strings(const std::string& key) const;
  std::vector<std::int64_t> require_ints(const std::string& key) const;
  // An int or a list of ints, expanded to `n` entries (diffusers' convention).
  std::vector<std::int64_t> int_or_list(const std::string& key, std::size_t n, std::int64_t fallback) const;
  // Throws ConfigError naming the file and key: "<file>: <key> = <value> is not supported (<why>)".
  [[noreturn]] void unsupported(const std::string& key, const std::string& why) const;
  const nlohmann::json& raw() const { return j_; }
  const std::string& origin() const { return origin_; }

 private:
  const nlohmann::json& at(const std::string& key) const;
  nlohmann::json j_;
  std::string origin_;
};

}  // namespace nanscope::models
