#pragma once
// The engine API a front end talks to: a Session resolves the device a run
// asks for (never another one), loads or reuses the model, and runs txt2img,
// reporting through a RunObserver. One Session belongs to one thread.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/lora_list.hpp"
#include "config/run_config.hpp"
#include "pipeline/run_report.hpp"
#include "pipeline/sd_model.hpp"

namespace nanscope::pipeline {

class Session {
 public:
  explicit Session(BackendOptions options = {});
  ~Session();

  const DeviceList& devices() const { return devices_; }
  // The backend for a pin ("" = NANSCOPE_DEVICE, else the default device).
  // Throws DeviceError listing the devices when the pin matches none.
  Backend& backend(const std::string& pin);
  // The model a config asks for on its device, with its LoRAs (reused while
  // the key is unchanged; another LoRA list or weight loads it again).
  SdModel& model(const RunConfig& config);

  // Runs every image of the config's batch. Returns the images (also given to
  // the observer as they finish). `faults`: the fault emulation the config's
  // inspector settings ask for (inspect::make_fault_emulator), made by the
  // caller; a config asking for emulation without one is a ConfigError.
  std::vector<GeneratedImage> generate(const RunConfig& config, RunObserver* observer = nullptr,
                                       FaultEmulator* faults = nullptr);

  // Decodes a kept latent again with another VAE folder and/or dtype: the
  // recovery path for a failed decode, without re-sampling.
  // A tracer, when given, records the decode's layer trace; `faults` as for
  // generate(); `cancel`, when given, stops the decode within one op
  // (throws Cancelled).
  GeneratedImage redecode(const RunConfig& config, const GeneratedImage& image, const std::filesystem::path& vae,
                          DType dtype, DecodeAttempt* attempt = nullptr, OpTracer* tracer = nullptr,
                          FaultEmulator* faults = nullptr, const CancelProbe* cancel = nullptr);

  // The model's VAE with its encoder (img2img, the hires fix's Lanczos
  // upscaler), loaded on first use in the VAE's dtype and kept; the model's
  // own VAE is loaded without it.
  models::Vae& encoder_vae(const RunConfig& config);

 private:
  struct ModelKey {
    std::string device, folder, vae;
    ComponentDTypes dtypes;
    std::vector<RunLora> loras;  // config/lora_list.hpp run_loras: the setting's and the prompt's
    bool lora_unmerged = false;
    bool operator==(const ModelKey&) const = default;
  };
  // A VAE other than the model's (or the model's in another dtype); a single
  // file takes the model family's scaling factor.
  models::Vae& vae_for(Backend& backend, const std::filesystem::path& folder, DType dtype, ModelFamily family,
                       bool with_encoder = false);

  BackendOptions options_;
  DeviceList devices_;
  std::map<std::string, std::unique_ptr<Backend>> backends_;
  std::optional<ModelKey> model_key_;
  std::unique_ptr<SdModel> model_;
  std::map<std::string, std::unique_ptr<models::Vae>> extra_vaes_;  // key: device|folder|dtype
};

}  // namespace nanscope::pipeline
