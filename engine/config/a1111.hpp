#pragma once
// The AUTOMATIC1111 "parameters" text that image viewers, A1111's PNG Info tab
// and civitai-style sites read from a PNG:
//
//   a photo of a cat
//   Negative prompt: blurry
//   Steps: 20, Sampler: Euler a, CFG scale: 7, Seed: 1, Size: 512x512, Model: nanscope-tiny
//
// The "Negative prompt" line is left out when there is none; "Size" when the
// config leaves the size to the model (width/height 0: pass the resolved
// config); "Clip skip: N" appears for clip_skip >= 1 (A1111 counts the last
// layer as 1, so N = clip_skip + 1); "VAE: name" for a VAE override;
// "RNG: CPU" for torch-cpu noise (A1111's CPU generator draws the same
// numbers). Values holding ',', ':' or a newline are JSON-quoted, as A1111's
// quote() does.
//
// The fields are the settings table's rows that name an A1111 field
// (config/settings.hpp: Setting::a1111), written and read in table order;
// a row's to_a1111 / from_a1111 say how, where the text is not its --set text.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_config.hpp"

namespace nanscope {

std::string a1111_parameters(const RunConfig& config);

// The model's display name: a folder's or file's name without extension; the
// embedded model for "".
std::string model_display_name(std::string_view model_path);

// A1111 parameters text split as A1111's parse_generation_parameters
// (modules/infotext_utils.py) splits it: the prompt lines, the lines after
// "Negative prompt:", and the last line's "Key: value" pairs when it holds at
// least 3 of them (re_param), in order, JSON-quoted values unquoted (a value
// that does not unquote stays as written, as A1111 keeps it). Throws
// ConfigError for text that is not UTF-8.
struct A1111Text {
  std::string prompt;
  std::string negative_prompt;
  std::vector<std::pair<std::string, std::string>> fields;
};
A1111Text parse_a1111_text(std::string_view parameters);

// Parses A1111 parameters text (A1111's parse_generation_parameters rules)
// onto `base`: prompt, negative prompt, and the table's A1111 fields (Steps,
// Sampler (+ Schedule type), CFG scale, Seed, Size, Clip skip, RNG). Model and
// VAE names are not paths and are ignored. Throws ConfigError naming the field
// for a bad value.
RunConfig run_config_from_a1111(std::string_view parameters, const RunConfig& base = {});

}  // namespace nanscope
