#pragma once
// RunConfig as versioned JSON: presets on disk and the `nanscope` PNG chunk.
//
//   {
//     "nanscope_preset": 1,
//     "model": "", "vae": "", "prompt": "...", "negative_prompt": "",
//     "steps": 20, "cfg_scale": 7.0, "seed": 1, "seeds": [], "batch_size": 1,
//     "width": 0, "height": 0, "sampler": "euler", "noise": "nanscope",
//     "device": "", "clip_skip": 0, "nan_policy": "report",
//     "precision": {
//       "unet": {"dtype": "f16", "accumulate": "f32",
//                "attention": {"softmax": "f32", "impl": "fused", "slice_size": 1}},
//       "text_encoder": {...}, "vae": {...}
//     },
//     "overrides": [
//       {"pattern": "unet.up_blocks.*.attentions.*.attn1", "accumulate": "f32",
//        "attention": {"softmax": "f32"}}
//     ],
//     "inspect": {"trace": "always"}
//   }
//
// Every key but "nanscope_preset" and "overrides" is a row of the settings
// table (config/settings.hpp), kept at the row's JSON path (`unet.dtype` at
// precision.unet.dtype); the table decides the keys, the values allowed and
// the order they are applied in. "inspect" holds only the inspector settings
// that differ from their defaults, so presets stay readable by versions that
// predate a newer inspector key.
//
// Reading overlays the file on the defaults (or on a given config): every key
// is optional except "nanscope_preset"; "overrides" and "inspect" replace the
// whole list / object. Unknown keys and bad values are ConfigErrors naming the
// file, the key path (e.g. "precision.unet.attention.impl", "overrides[1].pattern")
// and the allowed values; unreadable files and broken JSON are FileErrors.

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "config/run_config.hpp"

namespace nanscope {

inline constexpr int kPresetVersion = 1;

nlohmann::json to_json(const RunConfig& config);

// `source` names where the JSON came from in error messages (a file, "PNG chunk").
RunConfig run_config_from_json(const nlohmann::json& j, std::string_view source = "preset");
// Overlays the keys present in `j` on `config` (same rules and errors).
void apply_json(RunConfig& config, const nlohmann::json& j, std::string_view source = "preset");

// Atomic: written to a temporary file in the same folder, then renamed over
// `path`; a failed write leaves an existing file untouched. Throws FileError.
void save_preset(const RunConfig& config, const std::filesystem::path& path);
RunConfig load_preset(const std::filesystem::path& path);

}  // namespace nanscope
