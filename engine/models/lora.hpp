#pragma once
// LoRA files: low-rank weight deltas for the text encoder(s) and the UNet,
// W' = W + weight * (alpha / rank) * up @ down, applied while a model loads;
// `weight` is the text encoders' and, unless unet_weight is set, the UNet's
// (A1111's <lora:NAME:TE:UNET>: networks.py scales a module by te_multiplier
// when it belongs to a text encoder, else by unet_multiplier).
//
// Formats read (key forms checked against the sources named):
//   kohya / A1111   lora_unet_<module>.lora_down.weight, .lora_up.weight, .alpha;
//                   lora_te_ (SD 1.x/2.x text encoder), lora_te1_ / lora_te2_ (SDXL's two);
//                   <module> is the diffusers module path with '.' -> '_'
//                   (kohya-ss sd-scripts networks/lora.py, LoRANetwork.create_modules:
//                   lora_name = prefix + "." + name + "." + child_name, then "." -> "_"),
//                   or the LDM path for the UNet (lora_unet_input_blocks_1_1_proj_in,
//                   the original-layout naming some trainers use). Linear LoRA and conv
//                   LoRA ("LoCon": a down conv with the module's kernel, 1x1 or 3x3, and a
//                   1x1 up conv).
//   diffusers/PEFT  unet.<module>.lora_A.weight / .lora_B.weight, text_encoder.…,
//                   text_encoder_2.…, optionally <module>.alpha (diffusers
//                   loaders/lora_pipeline.py save_lora_weights; PEFT LoraLayer:
//                   scaling = lora_alpha / r, lora_alpha = r when the file has no alpha; each
//                   module's own r here, where diffusers 0.31 takes the first module's r for
//                   all, which differs only for files with mixed ranks and no alphas).
//   older diffusers <block>.processor.to_q_lora.down.weight / .up.weight (to_k, to_v,
//                   to_out -> to_out.0; text encoder to_q_lora -> q_proj, to_out_lora ->
//                   out_proj), <module>.lora.down/.up and .lora_linear_layer.down/.up
//                   (diffusers loaders/lora_conversion_utils.py, 0.31).
// LyCORIS LoHa/LoKr/Tucker and DoRA keys are refused by name.
//
// The kohya names are matched from the model's side: every Linear and Conv2d
// the model loads asks for the LoRA entries under its own diffusers path, its
// '_'-joined form and (UNet) its LDM name from models/ldm_checkpoint's table.
// Entries no module claimed are an error with their count and examples; a
// LoRA for another family (SDXL's lora_te2_, a 2048-wide cross-attention on a
// 768 model) is refused naming the file and both families.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"
#include "models/weights.hpp"

namespace nanscope::models {

struct UNetConfig;
class LdmNameMap;

struct LoraSpec {
  std::filesystem::path path;
  double weight = 1.0;                  // the text encoder(s)'
  std::optional<double> unet_weight{};  // nullopt: the same as weight
  double weight_for(std::string_view component) const {
    return component == "unet" ? unet_weight.value_or(weight) : weight;
  }
  std::string origin;  // "lora setting", "prompt <lora:name:0.8>": for messages and the report
};

// What a loaded LoRA did, for the run report and the PNG.
struct LoraSummary {
  std::string path, name;    // name: the file's stem (A1111's "Lora hashes" names it so)
  double weight = 1.0;       // the text encoder(s)'
  double unet_weight = 1.0;  // the UNet's (the same as weight unless the LoRA gave it apart)
  std::string origin;
  std::string format;      // "kohya", "kohya (LDM names)", "diffusers/PEFT", "diffusers (old)"
  std::string short_hash;  // A1111's (io/file_hash.hpp)
  int modules = 0;         // modules patched
  int rank = 0;            // the largest rank
  // Merge mode: modules whose merged weight overflowed the storage dtype ("unet.…attn2.to_k: 12 Inf").
  std::vector<std::string> overflows;
  std::vector<std::string> overflow_modules;  // the same modules' full paths ("unet.down_blocks.0.….to_q")
};

// One file's entries, parsed and checked against themselves (down/up pairs,
// ranks, alpha): host tensors in f32.
struct LoraEntry {
  std::string component;  // "unet", "text_encoder", "text_encoder_2"
  std::string name;       // as the file names the module: dotted (diffusers) or '_'-joined (kohya)
  std::string key;        // the file's key of the down weight, for messages
  HostTensor down, up;    // down [r, in] or [r, in, k, k]; up [out, r] or [out, r, 1, 1]
  float alpha = 0;        // rank when the file has none
  std::int64_t rank() const { return down.shape.front(); }
  bool claimed = false;
};

struct LoraFileData {
  LoraSpec spec;
  std::string format;
  std::vector<LoraEntry> entries;
  LoraSummary summary;
};

// Reads and checks one LoRA file (shapes of each pair, key forms). Throws
// FileError naming the file and the key.
LoraFileData read_lora_file(const LoraSpec& spec);

class LoraSet {
 public:
  // unmerged: each patched module keeps the LoRA as its own branch (W x + s up(down(x))),
  // traced as <module>.lora (<module>.lora.<i> with several LoRAs); else merged in f32
  // into the weight, then stored at the component's dtype.
  LoraSet(std::vector<LoraSpec> specs, bool unmerged);
  ~LoraSet();
  LoraSet(const LoraSet&) = delete;
  LoraSet& operator=(const LoraSet&) = delete;

  bool unmerged() const { return unmerged_; }
  bool empty() const { return files_.empty(); }
  // Refuses (FileError naming the file) a LoRA with entries for a component
  // the model lacks: SDXL's text_encoder_2 on an SD 1.x/2.x model.
  void require_components(const std::vector<std::string>& present, std::string_view model_desc) const;
  // The view a component's WeightLoader patches through. `unet`: the UNet's
  // config, for the LDM-named kohya form. Valid while this set lives.
  WeightPatch* component(const std::string& component, const UNetConfig* unet = nullptr, std::string family = "");
  // After every component loaded: throws FileError naming each file with
  // entries no module claimed (count and examples). Frees the host tensors.
  void finish(std::string_view model_desc);
  std::vector<LoraSummary> summaries() const;

 private:
  class Component;
  std::vector<LoraFileData> files_;
  std::vector<std::unique_ptr<Component>> components_;
  bool unmerged_ = false;
};

}  // namespace nanscope::models
