#pragma once
// A Stable Diffusion model loaded from a diffusers folder: tokenizer(s), text
// encoder(s), UNet, VAE and scheduler config, each component in its own dtype
// on one backend. The family (SD 1.x, SD 2.x, SDXL) is read from the folder.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "models/clip_text.hpp"
#include "models/ldm_checkpoint.hpp"
#include "models/lora.hpp"
#include "models/unet.hpp"
#include "models/vae.hpp"
#include "text/clip_tokenizer.hpp"

namespace nanscope::pipeline {

using models::ModelFamily;  // models/ldm_checkpoint.hpp

struct ComponentDTypes {
  DType text_encoder = DType::f32, unet = DType::f32, vae = DType::f32;
  friend bool operator==(const ComponentDTypes&, const ComponentDTypes&) = default;
};

class SdModel {
 public:
  // folder: a diffusers pipeline folder (model_index.json), or a single-file
  // SD 1.x / 2.x / XL checkpoint (.safetensors, original LDM names; its
  // tokenizer/ and SDXL's tokenizer_2/ are read from the same directory).
  // vae: an optional VAE folder or file replacing the model's own ("" = vae/).
  // loras: applied to the text encoder(s) and UNet as they load (models/lora.hpp).
  static std::unique_ptr<SdModel> load(const std::filesystem::path& folder, const std::filesystem::path& vae,
                                       Backend& backend, const ComponentDTypes& dtypes,
                                       models::LoraSet* loras = nullptr);

  ModelFamily family() const { return family_; }
  // The diffusers folder or the single file.
  const std::filesystem::path& folder() const { return folder_; }
  const std::filesystem::path& vae_folder() const { return vae_folder_; }
  const ComponentDTypes& dtypes() const { return dtypes_; }
  // The image size the UNet was trained at (sample_size x VAE downscale).
  int default_size() const;
  // Width and height must be multiples of this: the VAE's downscale times the UNet's halvings.
  std::int64_t size_multiple() const;
  // Throws ConfigError "WHAT WxH does not fit this model: ..." naming the multiple and the nearest sizes.
  void check_size(int width, int height, const std::string& what) const;
  const nlohmann::json& scheduler_config() const { return scheduler_config_; }
  bool force_zeros_for_empty_prompt() const { return force_zeros_for_empty_prompt_; }
  // The LoRAs the weights carry (merged or as branches), in the order given.
  const std::vector<models::LoraSummary>& loras() const { return loras_; }

  // Another LoRA list (files, weights or mode) on this loaded model, without
  // loading it again: the weights of the modules a LoRA patches now or patched
  // before are read from the model files again and patched as a fresh load
  // patches them; every other tensor stays on the device as it is. The result
  // is bit for bit that of SdModel::load with `loras`. Throws what a load
  // throws for a bad LoRA, leaving the model half-patched: the caller drops it.
  void apply_loras(Backend& backend, models::LoraSet* loras);

  // A text encoder's or the UNet's weight source and what its load uploaded.
  struct KeptComponent {
    std::unique_ptr<models::WeightSource> source;
    models::LoadedWeights weights;
  };

  ClipTokenizer tokenizer;
  std::optional<ClipTokenizer> tokenizer_2;
  std::optional<models::ClipTextModel> text_encoder;
  std::optional<models::ClipTextModel> text_encoder_2;
  std::optional<models::UNet> unet;
  std::optional<models::Vae> vae;

 private:
  SdModel() = default;
  static std::unique_ptr<SdModel> load_single_file(const std::filesystem::path& file, const std::filesystem::path& vae,
                                                   Backend& backend, const ComponentDTypes& dtypes,
                                                   models::LoraSet* loras);
  ModelFamily family_ = ModelFamily::sd1;
  std::filesystem::path folder_, vae_folder_;
  ComponentDTypes dtypes_;
  nlohmann::json scheduler_config_;
  bool force_zeros_for_empty_prompt_ = false;
  std::vector<models::LoraSummary> loras_;
  std::map<std::string, KeptComponent> kept_;  // "text_encoder", "text_encoder_2", "unet"
};

// Where the embedded default model lives: $NANSCOPE_MODEL_DIR, else next to
// the executable (../share/nanscope/models/nanscope-tiny when installed), else
// the source tree's resources/models/nanscope-tiny. Throws FileError listing
// the places looked at when none exists.
std::filesystem::path embedded_model_dir();

}  // namespace nanscope::pipeline
