#pragma once
// The LoRAs a run applies, as text: the `lora` setting's "FILE:WEIGHT" list
// and A1111's <lora:NAME:WEIGHT> prompt syntax, looked up in `lora_dir`.
// (The files themselves are read by models/lora.hpp.)

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/run_config.hpp"

namespace nanscope {

// "a.safetensors:0.8, /x/b.safetensors, c.safetensors:0.5:1" -> entries (weight
// 1 when absent; FILE:TE:UNET gives the text encoder and the UNet their own
// weights, as A1111's <lora:NAME:TE:UNET>). The weights are the texts after
// the last one or two ':' that are numbers, so a Windows path
// "C:\l\a.safetensors" keeps its drive. Entries are separated by commas.
// Throws ConfigError naming `key` for an empty path or a weight that is not a
// finite number from -100 to 100.
std::vector<LoraRef> parse_lora_list(std::string_view text, std::string_view key = "lora");
// parse_lora_list(format(x)) == x; a weight of 1 is left out, a UNet weight when it is the same.
std::string format_lora_list(const std::vector<LoraRef>& loras);

// Appends the entries of `text` to config.loras (the CLI's repeatable --lora FILE[:WEIGHT[:UNET]]).
void add_loras(RunConfig& config, std::string_view text, std::string_view key);

// A1111's extra-network syntax (modules/extra_networks.py: re_extra_net
// "<(\w+):([^>]+)>", arguments split on ':', an argument with one '=' named):
// <lora:NAME>, <lora:NAME:WEIGHT>, <lora:NAME:TE:UNET>, and the named forms
// te=W and unet=W (extensions-builtin/Lora/extra_networks_lora.py: te is the
// second argument or 1, unet the third or te; te= and unet= override them).
struct PromptLora {
  std::string name;
  double weight = 1.0;                  // the text encoder's
  std::optional<double> unet_weight{};  // nullopt: the same as weight
  double unet() const { return unet_weight.value_or(weight); }
  std::string tag;  // the whole "<lora:...>" text
};
// The prompt's <lora:...> tags; ConfigError for a malformed one, and for
// A1111's dynamic rank (a fourth argument or dyn=N), which NaNscope does not do.
std::vector<PromptLora> prompt_loras(std::string_view prompt);
// The prompt without its <lora:...> tags: what the tokenizer sees, as in A1111.
std::string strip_lora_tags(std::string_view prompt);

// Every LoRA of a run, in order: the `lora` list, then the prompt's tags,
// each tag found in lora_dir (recursively) as NAME.safetensors.
struct RunLora {
  std::string path;
  double weight = 1.0;                  // the text encoder's
  std::optional<double> unet_weight{};  // nullopt: the same as weight
  std::string origin;                   // "lora setting" or the prompt's tag
  friend bool operator==(const RunLora&, const RunLora&) = default;
};
// Throws ConfigError when a tag has no lora_dir to look in, or its file is
// missing or ambiguous (the candidates listed).
std::vector<RunLora> run_loras(const RunConfig& config);

}  // namespace nanscope
