#include "pipeline/sd_model.hpp"

#include <chrono>
#include <fstream>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/resources.hpp"
#include "io/safetensors.hpp"
#include "models/ldm_checkpoint.hpp"
#include "pipeline/model_index.hpp"

namespace nanscope::pipeline {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw FileError("cannot open " + p.string() + "; the model folder is incomplete");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(p.string() + " is not valid JSON: " + e.what());
  }
}

void require_dir(const fs::path& folder, const std::string& what) {
  if (!fs::is_directory(folder)) {
    throw FileError("the model has no " + what + " folder (" + folder.string() +
                    "); a diffusers model folder holds text_encoder/, tokenizer/, unet/, vae/ and scheduler/");
  }
}

}  // namespace

int SdModel::default_size() const { return static_cast<int>(unet->config().sample_size * vae->config().downscale()); }

std::int64_t SdModel::size_multiple() const {
  return vae->config().downscale() * (std::int64_t{1} << (unet->config().block_out_channels.size() - 1));
}

void SdModel::check_size(int width, int height, const std::string& what) const {
  const std::int64_t multiple = size_multiple();
  const std::int64_t f = vae->config().downscale();
  if (width % multiple != 0 || height % multiple != 0) {
    auto near = [multiple](int v) {
      const std::int64_t down = v / multiple * multiple;
      return std::to_string(down > 0 ? down : multiple) + " or " + std::to_string(down + multiple);
    };
    throw ConfigError(what + " " + std::to_string(width) + "x" + std::to_string(height) +
                      " does not fit this model: " + "width and height must be multiples of " +
                      std::to_string(multiple) + " (the VAE divides by " + std::to_string(f) + ", the UNet by " +
                      std::to_string(multiple / f) + "); nearest widths " + near(width) + ", heights " + near(height));
  }
}

namespace {

// A text encoder's or the UNet's weights through `kept`'s source, with the
// LoRAs' patch; `reuse`: what `kept` holds is not read again (apply_loras).
template <typename Model>
void load_kept(Model& model, SdModel::KeptComponent& kept, Backend& backend, DType dtype, const std::string& component,
               models::LoraSet* loras, ModelFamily family, bool reuse, bool report_unused) {
  models::WeightLoader loader(*kept.source, backend, dtype, component);
  loader.keep(&kept.weights, reuse);
  if (loras) {
    const models::UNetConfig* unet = nullptr;
    if constexpr (std::is_same_v<Model, models::UNet>) unet = &model.config();
    loader.set_patch(loras->component(component, unet, std::string(models::model_family_name(family))));
  }
  model.load_weights(loader);
  if (report_unused && !reuse) loader.report_unused();
}

// A text encoder or UNet from its diffusers folder, with the LoRAs' patch.
template <typename Model, typename Config>
void load_folder_component(std::optional<Model>& slot, const fs::path& dir, Backend& backend, DType dtype,
                           const std::string& component, models::LoraSet* loras, ModelFamily family,
                           SdModel::KeptComponent& kept) {
  slot.emplace(Config::from_json(models::ConfigJson::load(dir / "config.json")));
  kept.source = std::make_unique<models::WeightSource>(models::WeightSource::from_folder(dir, dtype != DType::f32));
  // A folder's text encoder may carry tensors it does not use (position_ids): only the UNet's are reported.
  load_kept(*slot, kept, backend, dtype, component, loras, family, false, std::is_same_v<Model, models::UNet>);
}

std::vector<std::string> lora_components(bool xl) {
  std::vector<std::string> c = {"text_encoder", "unet"};
  if (xl) c.emplace_back("text_encoder_2");
  return c;
}

}  // namespace

std::unique_ptr<SdModel> SdModel::load(const fs::path& folder, const fs::path& vae_override, Backend& backend,
                                       const ComponentDTypes& dtypes, models::LoraSet* loras) {
  if (loras && loras->empty()) loras = nullptr;
  if (fs::is_regular_file(folder)) return load_single_file(folder, vae_override, backend, dtypes, loras);
  if (!fs::is_directory(folder)) throw FileError("model folder " + folder.string() + " does not exist");
  const fs::path index_path = folder / "model_index.json";
  if (!fs::exists(index_path)) {
    throw FileError(folder.string() + " has no model_index.json; it is not a diffusers pipeline folder");
  }
  const ModelIndex index = ModelIndex::load(index_path);
  std::unique_ptr<SdModel> m(new SdModel());
  m->folder_ = folder;
  m->dtypes_ = dtypes;
  const std::string& cls = index.class_name;
  const bool xl = index.xl;
  m->force_zeros_for_empty_prompt_ = index.force_zeros_for_empty_prompt;

  require_dir(folder / "tokenizer", "tokenizer/");
  m->tokenizer = ClipTokenizer::load(folder / "tokenizer");
  require_dir(folder / "text_encoder", "text_encoder/");
  require_dir(folder / "unet", "unet/");
  const auto t0 = std::chrono::steady_clock::now();
  if (xl) {
    m->family_ = ModelFamily::sdxl;
  } else if (models::UNetConfig::from_json(models::ConfigJson::load(folder / "unet" / "config.json"))
                 .use_linear_projection ||
             models::ClipTextConfig::from_json(models::ConfigJson::load(folder / "text_encoder" / "config.json"))
                     .hidden_size == 1024) {
    m->family_ = ModelFamily::sd2;
  } else {
    m->family_ = ModelFamily::sd1;
  }
  const std::string desc = folder.filename().string() + " (" + std::string(models::model_family_name(m->family_)) + ")";
  if (loras) loras->require_components(lora_components(xl), desc);
  load_folder_component<models::ClipTextModel, models::ClipTextConfig>(m->text_encoder, folder / "text_encoder",
                                                                       backend, dtypes.text_encoder, "text_encoder",
                                                                       loras, m->family_, m->kept_["text_encoder"]);
  if (xl) {
    require_dir(folder / "tokenizer_2", "tokenizer_2/");
    require_dir(folder / "text_encoder_2", "text_encoder_2/");
    m->tokenizer_2 = ClipTokenizer::load(folder / "tokenizer_2");
    load_folder_component<models::ClipTextModel, models::ClipTextConfig>(m->text_encoder_2, folder / "text_encoder_2",
                                                                         backend, dtypes.text_encoder, "text_encoder_2",
                                                                         loras, m->family_, m->kept_["text_encoder_2"]);
  }
  load_folder_component<models::UNet, models::UNetConfig>(m->unet, folder / "unet", backend, dtypes.unet, "unet", loras,
                                                          m->family_, m->kept_["unet"]);
  if (loras) {
    loras->finish(desc);
    m->loras_ = loras->summaries();
  }
  m->vae_folder_ = vae_override.empty() ? folder / "vae" : vae_override;
  if (!fs::is_regular_file(m->vae_folder_)) require_dir(m->vae_folder_, "vae/");
  m->vae = models::Vae::load(m->vae_folder_, backend, dtypes.vae);
  require_dir(folder / "scheduler", "scheduler/");
  m->scheduler_config_ = read_json(folder / "scheduler" / "scheduler_config.json");

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("loaded {} ({}, {}) on \"{}\" in {:.2f} s: text encoder {}, UNet {}, VAE {} from {}",
            folder.filename().string(), cls, models::model_family_name(m->family_), backend.device().name, secs,
            dtype_name(dtypes.text_encoder), dtype_name(dtypes.unet), dtype_name(dtypes.vae), m->vae_folder_.string());
  if (m->vae->config().force_upcast && dtypes.vae != DType::f32) {
    log::warn(
        "this VAE ({}) says force_upcast: it is known to overflow in {}; decoding may give NaN "
        "(use vae.dtype=f32, the retry-vae-f32 NaN policy, or an fp16-fix VAE)",
        m->vae_folder_.string(), dtype_name(dtypes.vae));
  }
  return m;
}

namespace {

// A single file carries no tokenizer: it is read from tokenizer/ (and SDXL's
// tokenizer_2/) next to the checkpoint.
ClipTokenizer single_file_tokenizer(const fs::path& checkpoint, const std::string& name, ModelFamily family) {
  const fs::path dir = checkpoint.parent_path() / name;
  if (!fs::is_directory(dir)) {
    throw FileError(checkpoint.string() + " is a " + std::string(models::model_family_name(family)) +
                    " single-file checkpoint, which carries no tokenizer; put the CLIP tokenizer files (vocab.json, "
                    "merges.txt, tokenizer_config.json, e.g. the " +
                    name +
                    "/ folder of the diffusers version of the "
                    "model) in " +
                    dir.string());
  }
  return ClipTokenizer::load(dir);
}

template <typename Model>
void load_component(Model& model, const models::LdmCheckpoint& ckpt, const std::string& component, Backend& backend,
                    DType dtype, models::LoraSet* loras, SdModel::KeptComponent& kept) {
  kept.source = std::make_unique<models::WeightSource>(ckpt.source(component));
  load_kept(model, kept, backend, dtype, component, loras, ckpt.family(), false, true);
}

}  // namespace

std::unique_ptr<SdModel> SdModel::load_single_file(const fs::path& file, const fs::path& vae_override, Backend& backend,
                                                   const ComponentDTypes& dtypes, models::LoraSet* loras) {
  io::refuse_pickle(file);
  const auto t0 = std::chrono::steady_clock::now();
  const models::LdmCheckpoint ckpt = models::LdmCheckpoint::open(file);
  std::unique_ptr<SdModel> m(new SdModel());
  m->folder_ = file;
  m->dtypes_ = dtypes;
  m->family_ = ckpt.family();
  const bool xl = m->family_ == ModelFamily::sdxl;
  m->force_zeros_for_empty_prompt_ = xl;
  const std::string desc = file.filename().string() + " (" + std::string(models::model_family_name(m->family_)) + ")";
  if (loras) loras->require_components(lora_components(xl), desc);
  const std::string origin =
      "the built-in " + std::string(models::model_family_name(m->family_)) + " config for " + file.string();

  m->tokenizer = single_file_tokenizer(file, "tokenizer", m->family_);
  m->text_encoder.emplace(
      models::ClipTextConfig::from_json(models::ConfigJson(ckpt.text_encoder_config(), origin + " (text_encoder)")));
  load_component(*m->text_encoder, ckpt, "text_encoder", backend, dtypes.text_encoder, loras, m->kept_["text_encoder"]);
  if (xl) {
    m->tokenizer_2 = single_file_tokenizer(file, "tokenizer_2", m->family_);
    m->text_encoder_2.emplace(models::ClipTextConfig::from_json(
        models::ConfigJson(ckpt.text_encoder_2_config(), origin + " (text_encoder_2)")));
    load_component(*m->text_encoder_2, ckpt, "text_encoder_2", backend, dtypes.text_encoder, loras,
                   m->kept_["text_encoder_2"]);
  }
  m->unet.emplace(models::UNetConfig::from_json(models::ConfigJson(ckpt.unet_config(), origin + " (unet)")));
  load_component(*m->unet, ckpt, "unet", backend, dtypes.unet, loras, m->kept_["unet"]);
  if (loras) {
    loras->finish(desc);
    m->loras_ = loras->summaries();
  }
  if (vae_override.empty()) {
    m->vae_folder_ = file;
    m->vae.emplace(models::VaeConfig::from_json(models::ConfigJson(ckpt.vae_config(), origin + " (vae)")));
    const models::WeightSource source = ckpt.source("vae");
    models::WeightLoader loader(source, backend, dtypes.vae, "vae");
    m->vae->load_weights(loader, /*with_encoder=*/false);
  } else {
    m->vae_folder_ = vae_override;
    if (fs::is_regular_file(vae_override)) {
      m->vae = models::load_vae_file(vae_override, backend, dtypes.vae, false, ckpt.family());
    } else {
      require_dir(vae_override, "VAE");
      m->vae = models::Vae::load(vae_override, backend, dtypes.vae);
    }
  }
  m->scheduler_config_ = ckpt.scheduler_config();
  if (m->family_ == ModelFamily::sd2) {
    log::info(
        "{}: SD 2.x single files are taken as SD 2.1 (v-prediction, 768x768), as diffusers does; an SD 2.x "
        "base (epsilon, 512) model needs its diffusers folder",
        file.filename().string());
  }
  const std::vector<std::string> unclaimed = ckpt.unclaimed();
  if (!unclaimed.empty()) {
    log::warn("{}: {} tensors have no diffusers name in the {} table and are not used (first: {})", file.string(),
              unclaimed.size(), models::model_family_name(m->family_), unclaimed.front());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info("loaded {} (single file, {}) on \"{}\" in {:.2f} s: text encoder {}, UNet {}, VAE {} from {}",
            file.filename().string(), models::model_family_name(m->family_), backend.device().name, secs,
            dtype_name(dtypes.text_encoder), dtype_name(dtypes.unet), dtype_name(dtypes.vae), m->vae_folder_.string());
  return m;
}

fs::path embedded_model_dir() {
  return find_resource("the embedded default model", "models/nanscope-tiny", "NANSCOPE_MODEL_DIR",
                       "Set NANSCOPE_MODEL_DIR or pass --model PATH to a diffusers folder.");
}

void SdModel::apply_loras(Backend& backend, models::LoraSet* loras) {
  if (loras && loras->empty()) loras = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t reads = models::WeightSource::tensors_read();
  const bool xl = text_encoder_2.has_value();
  const std::string desc = folder_.filename().string() + " (" + std::string(models::model_family_name(family_)) + ")";
  if (loras) loras->require_components(lora_components(xl), desc);
  load_kept(*text_encoder, kept_.at("text_encoder"), backend, dtypes_.text_encoder, "text_encoder", loras, family_,
            true, false);
  if (xl) {
    load_kept(*text_encoder_2, kept_.at("text_encoder_2"), backend, dtypes_.text_encoder, "text_encoder_2", loras,
              family_, true, false);
  }
  load_kept(*unet, kept_.at("unet"), backend, dtypes_.unet, "unet", loras, family_, true, false);
  loras_.clear();
  if (loras) {
    loras->finish(desc);
    loras_ = loras->summaries();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log::info(
      "LoRAs of {} changed to {}: {} module weights read again and patched in {:.2f} s, the rest kept (no reload)",
      folder_.filename().string(), loras_.empty() ? std::string("none") : std::to_string(loras_.size()) + " file(s)",
      models::WeightSource::tensors_read() - reads, secs);
}

}  // namespace nanscope::pipeline
