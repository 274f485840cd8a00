#pragma once
// Single-file checkpoints in the original (LDM / CompVis / SGM) layout, as
// A1111, ComfyUI and the model hubs distribute them: one .safetensors holding
// the UNet (model.diffusion_model.*), the VAE (first_stage_model.*) and the
// text encoder(s) (cond_stage_model.* or conditioner.embedders.N.*).
//
// The family is detected from key names, the component configs are the
// standard SD 1.5 / SD 2.1 / SDXL base configs with the channel and layer
// counts read from the tensors, and one name table per family maps every
// diffusers module path to its LDM name. The tables are built from the block
// structure, as diffusers' loaders/single_file_utils.py (0.31) does, and are
// applied once, at load: the models only ever see diffusers names.
//
// Heads cannot be read from weights: SD 1.x uses 8 heads per UNet level, SD
// 2.x and SDXL 64-channel heads, every CLIP text encoder 64-channel heads.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"
#include "models/clip_text.hpp"
#include "models/unet.hpp"
#include "models/vae.hpp"
#include "models/weights.hpp"

namespace nanscope::models {

// The model families NaNscope runs, for single files, diffusers folders and
// the pipeline alike.
enum class ModelFamily : std::uint8_t { sd1, sd2, sdxl };
std::string_view model_family_name(ModelFamily f);  // "SD 1.x", "SD 2.x", "SDXL"

// How the leaves under a mapped module are renamed (and transformed).
enum class LeafRule : std::uint8_t {
  same,            // identical leaf names (transformers, attention blocks, convs)
  unet_resnet,     // norm1 <-> in_layers.0, conv1 <-> in_layers.2, time_emb_proj <-> emb_layers.1, ...
  vae_resnet,      // conv_shortcut <-> nin_shortcut
  vae_attention,   // group_norm <-> norm, to_q <-> q, ..., to_out.0 <-> proj_out; 1x1 conv <-> linear
  openclip_layer,  // layer_norm1 <-> ln_1, fc1 <-> c_fc, q/k/v_proj <-> thirds of attn.in_proj_*
  transpose,       // one tensor stored transposed (OpenCLIP text_projection)
};

// One row of a family's table: a diffusers module path (component-prefixed:
// "unet.down_blocks.0.resnets.0.") and the LDM one ("model.diffusion_model.input_blocks.1.0.").
// Paths ending in '.' are module prefixes; others name one tensor.
struct ModuleMap {
  std::string diffusers, ldm;
  LeafRule rule = LeafRule::same;
};

// The block structure a table is built from.
struct LdmStructure {
  ModelFamily family = ModelFamily::sd1;
  UNetConfig unet;
  VaeConfig vae;
  int text_layers = 0;                            // text_encoder's layers
  int text_2_layers = 0;                          // SDXL's text_encoder_2 (OpenCLIP bigG)
  std::string vae_prefix = "first_stage_model.";  // "" for a VAE-only file
};

class LdmNameMap {
 public:
  explicit LdmNameMap(const LdmStructure& s);

  // "unet.conv_in.weight" -> model.diffusion_model.input_blocks.0.0.weight; nullopt when no row covers it.
  std::optional<TensorRef> to_ldm(std::string_view diffusers) const;
  struct Target {
    std::string diffusers;
    TensorRef ref;
  };
  // Every diffusers tensor an LDM key holds: one, or three for a fused OpenCLIP in_proj. Empty when unknown.
  std::vector<Target> from_ldm(std::string_view ldm) const;
  // Keys real files carry that the diffusers models do not use (position_ids
  // buffers, SD 2.x's unused last text layer and projection, logit_scale).
  bool ignored(std::string_view ldm) const;
  const std::vector<ModuleMap>& rows() const { return rows_; }
  ModelFamily family() const { return family_; }

 private:
  ModelFamily family_;
  std::vector<ModuleMap> rows_;
  std::vector<std::string> ignored_prefixes_;
};

// The diffusers component names ("unet", "vae", "text_encoder", "text_encoder_2")
// and the LDM prefix of each in a file of this family.
std::string_view ldm_component_prefix(ModelFamily f, std::string_view component);

// Detects the family from key names. Throws FileError naming the file when it
// is no SD 1.x / 2.x / XL checkpoint (a diffusers component file, a refiner, an
// inpainting model, a LoRA).
ModelFamily detect_ldm_family(const io::SafetensorsFile& file);

// An opened single-file checkpoint: family, component configs (diffusers
// config.json form) and the name table.
class LdmCheckpoint {
 public:
  static LdmCheckpoint open(const std::filesystem::path& path);

  ModelFamily family() const { return family_; }
  const io::SafetensorsFile& file() const { return *file_; }
  // diffusers config.json equivalents: built-in defaults with the counts read from the tensors.
  const nlohmann::json& unet_config() const { return unet_; }
  const nlohmann::json& vae_config() const { return vae_; }
  const nlohmann::json& text_encoder_config() const { return text_encoder_; }
  const nlohmann::json& text_encoder_2_config() const { return text_encoder_2_; }  // null unless SDXL
  const nlohmann::json& scheduler_config() const { return scheduler_; }
  const LdmNameMap& names() const { return *names_; }
  // The weights of one component under diffusers names ("unet", "vae", "text_encoder", "text_encoder_2").
  WeightSource source(std::string_view component) const;
  // Per component: how many tensors, and the file dtypes found ("F16" or "F16+F32").
  struct ComponentInfo {
    std::string name;
    std::size_t tensors = 0;
    std::string dtypes;
  };
  std::vector<ComponentInfo> components() const;
  // Tensors of the file no component claims and no rule ignores.
  std::vector<std::string> unclaimed() const;

 private:
  ModelFamily family_ = ModelFamily::sd1;
  std::shared_ptr<io::SafetensorsFile> file_;
  nlohmann::json unet_, vae_, text_encoder_, text_encoder_2_, scheduler_;
  std::shared_ptr<const LdmNameMap> names_;
};

// A VAE in one safetensors file: a whole LDM checkpoint (its first_stage_model),
// an LDM VAE file (encoder.down.0.block.0...) or a diffusers-named one
// (encoder.down_blocks.0.resnets.0...). The config is the standard SD VAE's with
// the channel counts read from the tensors; scaling_factor is the family's
// (SD 1.x/2.x 0.18215, SDXL 0.13025; a lone VAE file is taken as `family`).
//
// open_vae_file reads it: the family (a whole checkpoint's own), whether the
// names are diffusers', the config and the weights under diffusers names; it
// throws FileError naming the file when it holds no VAE. load_vae_file builds
// the model from that and loads its weights onto `backend`.
struct VaeFile {
  ModelFamily family = ModelFamily::sd1;
  bool diffusers = false;
  VaeConfig config;
  std::optional<WeightSource> source;
};
VaeFile open_vae_file(const std::filesystem::path& path, ModelFamily family = ModelFamily::sd1);
Vae load_vae_file(const std::filesystem::path& path, Backend& backend, DType dtype, bool with_encoder,
                  ModelFamily family = ModelFamily::sd1);

}  // namespace nanscope::models
