#pragma once
// A diffusers pipeline folder's model_index.json: the pipeline class and which
// components it has ({"_class_name": "StableDiffusionPipeline",
// "text_encoder": ["transformers", "CLIPTextModel"], ...}).

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace nanscope::pipeline {

struct ModelIndex {
  std::string class_name = "StableDiffusionPipeline";
  // A component is present when its entry names a library and class; SDXL has text_encoder_2.
  bool xl = false;
  // SDXL pipelines encode an empty prompt as zeros (default: true for SDXL).
  bool force_zeros_for_empty_prompt = false;

  // `origin` names the file in errors: ConfigError naming the key for a value
  // of the wrong type, and for a document that is not a JSON object.
  static ModelIndex from_json(const nlohmann::json& j, const std::string& origin);
  // Reads and parses the file; FileError when it cannot be read or is not JSON.
  static ModelIndex load(const std::filesystem::path& path);
};

}  // namespace nanscope::pipeline
