#pragma once
// What NaNscope writes into an image's PNG, and how it reads a config back
// (config/ sits above io/: io reads and writes PNG files, this file gives
// their text chunks the meaning of a run configuration).
//
//   "parameters"  A1111-compatible text (config/a1111.hpp), for other tools
//   "nanscope"    JSON: {"nanscope_png": 1, "nanscope_version": "0.1.0",
//                 "nanscope_commit": "20587d2c1f" (null without one),
//                 "config": <preset JSON of the image's RunConfig>,
//                 ...whatever the caller adds, e.g. "inspector": {...},
//                 "report": {...}}
//   "Software"    the PNG standard keyword: "NaNscope 0.1.0 (git 20587d2c1f)"
//
// Restoring (GUI "open a PNG", nanscope-cli info) prefers the nanscope chunk
// and falls back to A1111 parameters, so PNGs from A1111 or ComfyUI's
// A1111-style exports open too.

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "config/run_config.hpp"
#include "io/png.hpp"

namespace nanscope {

inline constexpr int kPngMetadataVersion = 1;

// `extra` must be an object; its keys go next to "config" ("nanscope_png",
// "nanscope_version", "nanscope_commit" and "config" are reserved: ConfigError).
std::vector<io::PngText> run_png_texts(const RunConfig& config, const nlohmann::json& extra = nlohmann::json::object());

// write_png with run_png_texts, atomically.
void write_run_png(const std::filesystem::path& path, const io::RgbImage& image, const RunConfig& config,
                   const nlohmann::json& extra = nlohmann::json::object());

// The "nanscope" chunk as JSON; nullopt when the PNG has none. A chunk that is
// not valid JSON or not an object is a FileError naming `source`.
std::optional<nlohmann::json> nanscope_chunk(const io::PngContents& png, std::string_view source);

// The config the PNG records: from the nanscope chunk (a chunk without
// "nanscope_png" is read as version 1), else from A1111
// "parameters", else nullopt. Errors name `source` (ConfigError for bad values,
// FileError for a broken chunk).
std::optional<RunConfig> config_from_png(const io::PngContents& png, std::string_view source);

}  // namespace nanscope
