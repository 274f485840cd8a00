#pragma once
// Module-path patterns for per-module precision overrides.
//
// A module path is the diffusers module name with the component in front,
// segments joined by '.':  unet.up_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q
//
// A pattern is a list of segments; each is a literal name ([A-Za-z0-9_]+) or
// `*`, which matches ONE OR MORE whole segments (never part of a segment). The
// first segment is the component: text_encoder, unet or vae. A pattern applies
// to a module when it matches the module's path or one of its leading parts,
// so an override of `unet.up_blocks.*.attentions.*.attn1` reaches attn1's
// to_q/to_k/to_v/to_out.0 and the attention op itself:
//   unet.up_blocks.*.attentions.*.attn1  matches  unet.up_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q
//   unet.mid_block                       matches  unet.mid_block.resnets.0.conv1
//   unet.up_blocks.*                     matches  unet.up_blocks.3.resnets.0 (not unet.up_blocks itself)
// Specificity is the number of literal segments (the component counts): the
// most specific matching pattern wins; on a tie the later entry wins.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanscope {

class ModulePattern {
 public:
  // Throws ConfigError naming the pattern and what is wrong with it.
  static ModulePattern parse(std::string_view text);

  // `path` is a full module path (component first), e.g. "unet.mid_block.attentions.0".
  bool matches(std::string_view path) const;
  bool matches(const std::vector<std::string_view>& path_segments) const;
  int specificity() const { return literals_; }
  const std::string& text() const { return text_; }
  std::string_view component() const { return segments_.front(); }

 private:
  std::string text_;
  std::vector<std::string> segments_;
  int literals_ = 0;
};

// "a.b.c" -> {"a", "b", "c"}; views into `path`.
std::vector<std::string_view> split_module_path(std::string_view path);

}  // namespace nanscope
