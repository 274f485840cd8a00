#include "pipeline/model_index.hpp"

#include <fstream>

#include "core/error.hpp"
#include "models/config_json.hpp"

namespace nanscope::pipeline {

ModelIndex ModelIndex::from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) {
    throw ConfigError(origin + ": expected a JSON object mapping component names to [library, class], found " +
                      std::string(j.type_name()) + "; re-download the model folder");
  }
  const models::ConfigJson c(j, origin);
  ModelIndex m;
  m.class_name = c.get_string("_class_name", m.class_name);
  const auto present = [&](const char* key) {
    return j.contains(key) && j[key].is_array() && !j[key].empty() && !j[key][0].is_null();
  };
  m.xl = present("text_encoder_2");
  m.force_zeros_for_empty_prompt = c.get_bool("force_zeros_for_empty_prompt", m.xl);
  return m;
}

ModelIndex ModelIndex::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw FileError("cannot open " + path.string() + "; the model folder is incomplete");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(path.string() + " is not valid JSON: " + e.what());
  }
  return from_json(j, path.string());
}

}  // namespace nanscope::pipeline
