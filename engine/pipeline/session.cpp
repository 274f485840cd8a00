#include "pipeline/session.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "models/ldm_checkpoint.hpp"

namespace nanscope::pipeline {

namespace fs = std::filesystem;

Session::Session(BackendOptions options) : options_(std::move(options)), devices_(enumerate_devices()) {
  for (const auto& note : devices_.notes) log::info("{}", note);
}

Session::~Session() = default;

Backend& Session::backend(const std::string& pin) {
  const std::string env = device_pin_from_env();
  const std::string effective = pin.empty() ? env : pin;
  const DeviceInfo& dev = select_device(devices_, effective);
  auto it = backends_.find(dev.id);
  if (it != backends_.end()) return *it->second;
  if (!pin.empty()) {
    log::info("using device {} \"{}\": pinned by the run configuration", dev.index, dev.name);
  } else if (!env.empty()) {
    log::info("using device {} \"{}\": pinned by NANSCOPE_DEVICE={}", dev.index, dev.name, env);
  } else {
    log::info("using device {} \"{}\": {}", dev.index, dev.name, dev.reason);
  }
  auto [pos, _] = backends_.emplace(dev.id, make_backend(dev, options_));
  return *pos->second;
}

SdModel& Session::model(const RunConfig& config) {
  Backend& be = backend(config.device);
  const fs::path folder = config.model.empty() ? embedded_model_dir() : fs::path(config.model);
  ModelKey key{be.device().id,
               folder.string(),
               config.vae,
               {config.component(Component::text_encoder).precision.dtype,
                config.component(Component::unet).precision.dtype, config.component(Component::vae).precision.dtype},
               run_loras(config),
               config.lora_unmerged};
  if (key.loras.empty()) key.lora_unmerged = false;
  if (model_ && model_key_ && *model_key_ == key) return *model_;
  std::vector<models::LoraSpec> specs;
  for (const auto& l : key.loras) specs.push_back({l.path, l.weight, l.unet_weight, l.origin});
  models::LoraSet loras(std::move(specs), key.lora_unmerged);  // reads and checks the files before the model changes
  ModelKey same_model = key;
  if (model_key_) {
    same_model.loras = model_key_->loras;
    same_model.lora_unmerged = model_key_->lora_unmerged;
  }
  if (model_ && model_key_ && *model_key_ == same_model) {
    // Only the LoRAs changed: re-patch the modules they touch instead of reading the model again.
    model_key_.reset();  // a failure below leaves a half-patched model: it is dropped
    try {
      model_->apply_loras(be, &loras);
    } catch (...) {
      model_.reset();
      throw;
    }
    model_key_ = key;
    return *model_;
  }
  model_.reset();  // free the old weights before loading new ones
  model_key_.reset();
  model_ = SdModel::load(folder, config.vae, be, key.dtypes, &loras);
  model_key_ = key;
  return *model_;
}

models::Vae& Session::encoder_vae(const RunConfig& config) {
  SdModel& m = model(config);
  return vae_for(backend(config.device), m.vae_folder(), m.dtypes().vae, m.family(), true);
}

models::Vae& Session::vae_for(Backend& be, const fs::path& folder, DType dtype, ModelFamily family, bool with_encoder) {
  const std::string key =
      be.device().id + "|" + folder.string() + "|" + std::string(dtype_name(dtype)) + (with_encoder ? "|encoder" : "");
  auto it = extra_vaes_.find(key);
  if (it != extra_vaes_.end()) return *it->second;
  const models::ModelFamily ldm = family == ModelFamily::sdxl  ? models::ModelFamily::sdxl
                                  : family == ModelFamily::sd2 ? models::ModelFamily::sd2
                                                               : models::ModelFamily::sd1;
  auto vae = std::make_unique<models::Vae>(fs::is_regular_file(folder)
                                               ? models::load_vae_file(folder, be, dtype, with_encoder, ldm)
                                               : models::Vae::load(folder, be, dtype, with_encoder));
  auto [pos, _] = extra_vaes_.emplace(key, std::move(vae));
  return *pos->second;
}

}  // namespace nanscope::pipeline
