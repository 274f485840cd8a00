#include "config/png_metadata.hpp"

#include "config/a1111.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "core/version.hpp"

namespace nanscope {

using io::PngContents;
using io::PngText;
using io::RgbImage;

using nlohmann::json;

std::vector<PngText> run_png_texts(const RunConfig& config, const json& extra) {
  if (!extra.is_object())
    throw ConfigError("PNG metadata: the extra data must be a JSON object, found " + extra.dump());
  json chunk = {{"nanscope_png", kPngMetadataVersion},
                {"nanscope_version", std::string(version())},
                {"nanscope_commit", git_commit().empty() ? json() : json(std::string(git_commit()))},
                {"config", to_json(config)}};
  for (const auto& [k, v] : extra.items()) {
    if (chunk.contains(k)) throw ConfigError("PNG metadata: the extra key \"" + k + "\" is reserved");
    chunk[k] = v;
  }
  return {{"parameters", a1111_parameters(config)}, {"nanscope", chunk.dump()}, {"Software", version_line("NaNscope")}};
}

void write_run_png(const std::filesystem::path& path, const RgbImage& image, const RunConfig& config,
                   const json& extra) {
  write_png(path, image, run_png_texts(config, extra));
}

std::optional<json> nanscope_chunk(const PngContents& png, std::string_view source) {
  const std::string* text = png.find("nanscope");
  if (!text) return std::nullopt;
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FileError(std::string(source) + ": the \"nanscope\" text chunk is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw FileError(std::string(source) + ": the \"nanscope\" text chunk is not a JSON object");
  return j;
}

std::optional<RunConfig> config_from_png(const PngContents& png, std::string_view source) {
  if (auto chunk = nanscope_chunk(png, source)) {
    if (!chunk->contains("config")) {
      throw FileError(std::string(source) + ": the \"nanscope\" text chunk has no \"config\"");
    }
    // A chunk without a version is read as version 1 (the first format had none).
    const json version = chunk->value("nanscope_png", json(kPngMetadataVersion));
    if (!version.is_number_integer() || version.get<long long>() > kPngMetadataVersion) {
      throw FileError(std::string(source) + ": the \"nanscope\" text chunk has version " + version.dump() +
                      "; this NaNscope reads version " + std::to_string(kPngMetadataVersion));
    }
    return run_config_from_json((*chunk)["config"], std::string(source) + " (nanscope chunk)");
  }
  if (const std::string* params = png.find("parameters")) {
    try {
      return run_config_from_a1111(*params);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string(source) + ": " + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace nanscope
