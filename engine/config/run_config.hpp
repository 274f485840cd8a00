#pragma once
// RunConfig: the whole description of one run (or one batch) as a value type.
// The GUI edits it, the CLI builds it from a preset plus `--set key=value`,
// PNGs carry it, presets store it (config/preset.hpp).
//
// Keys for set() (the CLI's --set): every row of the settings table
// (config/settings.hpp; `nanscope-cli config keys` lists them with their
// types, defaults, allowed values and help), plus per-module overrides:
//
//   override     := component "." pattern-tail "." field
//   component    := text_encoder | unet | vae
//   pattern-tail := segment ( "." segment )*    segment := [A-Za-z0-9_]+ | "*"
//   field        := dtype | accumulate | attention.softmax | attention.impl | attention.slice_size
//
//   `vae` alone is the VAE override path; `vae.<field>` is the VAE's precision.
//   Without a pattern tail the key sets the component's default
//   (`unet.dtype=f16`, a table row); with one it sets that field of the override whose
//   pattern is component.pattern-tail (`unet.up_blocks.3.*.attn1.accumulate=f32`,
//   see module_pattern.hpp for matching and specificity), creating it or, if it
//   exists, updating it and moving it last (so it wins ties). An empty value
//   removes the field from the override (and the override once it has none).
//   `inspect.*` keys are the inspector's settings; RunConfig::inspect holds the
//   ones that differ from their defaults.
//
// Errors are ConfigError naming the key and the allowed values.

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/precision.hpp"

namespace nanscope {

enum class Component : std::uint8_t { text_encoder, unet, vae };
inline constexpr std::array<Component, 3> kComponents = {Component::text_encoder, Component::unet, Component::vae};
std::string_view component_name(Component c);
std::optional<Component> parse_component(std::string_view s);

// The sampler (the update rule) and, separately, the schedule (which noise
// levels it visits): A1111's "Sampler" and "Schedule type", ComfyUI's
// sampler_name and scheduler. "dpmpp_2m_karras", the name before the two were
// split, still loads as dpmpp_2m with the karras schedule (settings.cpp).
enum class SamplerId : std::uint8_t {
  euler,
  euler_a,
  ddim,
  dpmpp_2m,
  dpmpp_2m_sde,
  dpmpp_sde,
  heun,
  lms,
  unipc,
  ddpm,
  lcm
};
inline constexpr std::array<SamplerId, 11> kSamplers = {
    SamplerId::euler,        SamplerId::euler_a,   SamplerId::ddim, SamplerId::dpmpp_2m,
    SamplerId::dpmpp_2m_sde, SamplerId::dpmpp_sde, SamplerId::heun, SamplerId::lms,
    SamplerId::unipc,        SamplerId::ddpm,      SamplerId::lcm};
std::string_view sampler_name(SamplerId s);        // "euler_a"
std::string_view sampler_a1111_name(SamplerId s);  // "Euler a" (without a schedule suffix)
std::optional<SamplerId> parse_sampler(std::string_view s);

// class_default: the sigmas the sampler's diffusers class makes from the
// model's scheduler_config.json ("default"). The others are the k-diffusion /
// ComfyUI definitions over the model's training sigmas (pipeline/schedule.hpp).
enum class ScheduleId : std::uint8_t { class_default, karras, exponential, sgm_uniform, simple, normal, ddim_uniform };
inline constexpr std::array<ScheduleId, 7> kSchedules = {
    ScheduleId::class_default, ScheduleId::karras, ScheduleId::exponential, ScheduleId::sgm_uniform,
    ScheduleId::simple,        ScheduleId::normal, ScheduleId::ddim_uniform};
std::string_view schedule_name(ScheduleId s);        // "default", "karras", ...
std::string_view schedule_a1111_name(ScheduleId s);  // A1111's "Schedule type": "Karras", "SGM Uniform", ...
std::optional<ScheduleId> parse_schedule(std::string_view s);

enum class NoiseKind : std::uint8_t { nanscope, torch_cpu, torch_cuda };
std::string_view noise_name(NoiseKind n);  // "nanscope", "torch-cpu", "torch-cuda"
std::optional<NoiseKind> parse_noise(std::string_view s);

// Which of torch's CPU normal transforms torch-cpu noise reproduces (they
// differ in the last bits; pipeline/noise.hpp): the one torch picks on this
// CPU, its AVX2 kernel, or its scalar one (CPUs without AVX2, or torch run
// with ATEN_CPU_CAPABILITY=default).
enum class TorchCpuKernel : std::uint8_t { automatic, avx2, scalar };
std::string_view torch_cpu_kernel_name(TorchCpuKernel k);  // "auto", "avx2", "default" (torch's own name)
std::optional<TorchCpuKernel> parse_torch_cpu_kernel(std::string_view s);

// The hires fix's upscaler (A1111's "Hires upscaler"): the latent resized as
// torch.nn.functional.interpolate does (latent: bilinear, A1111's "Latent";
// latent-nearest: "Latent (nearest)"; latent-nearest-exact: "Latent
// (nearest-exact)"), or the decoded image resized with Lanczos (PIL's, A1111's
// "Lanczos") and encoded again.
enum class HiresUpscaler : std::uint8_t { latent, latent_nearest, latent_nearest_exact, lanczos };
std::string_view hires_upscaler_name(HiresUpscaler u);        // "latent-nearest"
std::string_view hires_upscaler_a1111_name(HiresUpscaler u);  // "Latent (nearest)"
std::optional<HiresUpscaler> parse_hires_upscaler(std::string_view s);

// What to do when the decoded image (or a step) holds non-finite values.
struct NanPolicy {
  // retry_layer_f32: when a UNet call or the decode goes non-finite, trace it,
  // upcast the module of the op that broke to f32 (a per-module dtype
  // override), redo that call alone, and repeat until it is clean or
  // inspect.layer_retry_limit modules were upcast.
  enum class Kind : std::uint8_t { report, stop, retry_vae_f32, retry_vae, retry_layer_f32 };
  Kind kind = Kind::report;
  std::string vae_path;  // retry_vae only: the VAE to decode with on the retry

  std::string to_string() const;  // "report", "retry-vae:/models/vae-fp16-fix"
  static std::optional<NanPolicy> parse(std::string_view s);
  friend bool operator==(const NanPolicy&, const NanPolicy&) = default;
};

// A component's default precision: storage, accumulation, softmax
// (attention.softmax) and the attention algorithm.
struct ComponentPrecision {
  Precision precision;
  AttentionConfig attention;
  friend bool operator==(const ComponentPrecision&, const ComponentPrecision&) = default;
};

// Some fields for the modules a pattern matches; unset fields fall through.
struct PrecisionOverride {
  std::string pattern;  // e.g. "unet.up_blocks.*.attentions.*.attn1"
  std::optional<DType> dtype;
  std::optional<Accumulate> accumulate;
  std::optional<SoftmaxPrecision> softmax;
  std::optional<AttentionImpl> impl;
  std::optional<int> slice_size;

  bool empty() const { return !dtype && !accumulate && !softmax && !impl && !slice_size; }
  friend bool operator==(const PrecisionOverride&, const PrecisionOverride&) = default;
};

// A LoRA file and its weight (setting `lora`; config/lora_list.hpp). As in
// A1111's <lora:NAME:TE:UNET>, `weight` scales the text-encoder deltas and,
// unless unet_weight is set, the UNet's too.
struct LoraRef {
  std::string path;
  double weight = 1.0;
  std::optional<double> unet_weight{};  // nullopt: the same as weight
  double unet() const { return unet_weight.value_or(weight); }
  friend bool operator==(const LoraRef&, const LoraRef&) = default;
};

struct RunConfig {
  std::string model;  // diffusers folder or single-file checkpoint; "" = the embedded model
  std::string vae;    // VAE folder or file replacing the model's; "" = the model's own
  std::string prompt;
  std::string negative_prompt;
  int steps = 20;
  double cfg_scale = 7.0;
  std::uint64_t seed = 1;
  std::vector<std::uint64_t> seeds;  // explicit per-image seeds; empty: seed, seed+1, ... (batch_size of them)
  int batch_size = 1;
  int width = 0;  // 0: the model's default size
  int height = 0;
  SamplerId sampler = SamplerId::euler;
  ScheduleId schedule = ScheduleId::class_default;
  NoiseKind noise = NoiseKind::nanscope;
  TorchCpuKernel torch_cpu_kernel = TorchCpuKernel::automatic;
  std::string device;  // device pin; "" = the default device
  int clip_skip = 0;
  NanPolicy nan_policy;
  std::array<ComponentPrecision, 3> precision{};  // indexed by Component
  std::vector<PrecisionOverride> overrides;
  // Inspector settings (the settings table's inspect.* rows) that differ from
  // their defaults, by name: {"trace": "always"}. Read for a run through
  // config/inspect_settings.hpp.
  nlohmann::json inspect = nlohmann::json::object();
  // VAE tiling (models/vae_tiling.hpp): decode (and encode) in overlapping
  // tiles blended at the seams. "off", "on", or "auto" (tiles only when the
  // whole decode would not fit the device). Size and overlap in image pixels.
  std::string vae_tiling = "off";
  int vae_tile_size = 512;
  int vae_tile_overlap = 64;
  // LoRAs (settings lora, lora.mode, lora_dir): the `lora` list; <lora:NAME:WEIGHT>
  // tags in the prompt add files from lora_dir (config/lora_list.hpp run_loras).
  std::vector<LoraRef> loras;
  bool lora_unmerged = false;  // lora.mode=unmerged: each LoRA its own op beside the module's, traced as <module>.lora
  std::string lora_dir;
  // img2img (pipeline/img2img.hpp): a PNG the run starts from instead of pure
  // noise, and how much of the schedule re-noises it (diffusers' strength,
  // A1111's "Denoising strength").
  std::string init_image;  // "" = txt2img
  double strength = 0.75;
  // The hires fix as A1111 runs it: a second pass at hires_scale x the size,
  // from the first pass's latent upscaled by hires_upscaler.
  double hires_scale = 0;  // 0: off
  int hires_steps = 0;     // steps of the second pass; 0: the first pass's
  double hires_denoise = 0.7;
  HiresUpscaler hires_upscaler = HiresUpscaler::latent;
  // A1111's "Hires resize" (hr_resize_x / hr_resize_y): the second pass's size
  // instead of hires_scale; one side 0 keeps the first pass's aspect, both set
  // with another aspect enlarge to cover it and crop the latent's middle
  // (pipeline/img2img.hpp hires_target).
  int hires_width = 0;
  int hires_height = 0;
  // The second pass's own sampler, schedule, prompts and guidance (A1111's
  // "Hires sampler", "Hires schedule type", "Hires prompt", "Hires negative
  // prompt", "Hires CFG Scale"); unset / empty / 0: the first pass's.
  std::optional<SamplerId> hires_sampler;
  std::optional<ScheduleId> hires_schedule;
  std::string hires_prompt;
  std::string hires_negative_prompt;
  double hires_cfg_scale = 0;
  bool hires() const { return hires_scale > 0 || hires_width > 0 || hires_height > 0; }
  // The second pass's settings with the "same as the first pass" defaults resolved.
  SamplerId hires_sampler_or_first() const { return hires_sampler.value_or(sampler); }
  ScheduleId hires_schedule_or_first() const { return hires_schedule.value_or(schedule); }
  const std::string& hires_prompt_or_first() const { return hires_prompt.empty() ? prompt : hires_prompt; }
  const std::string& hires_negative_or_first() const {
    return hires_negative_prompt.empty() ? negative_prompt : hires_negative_prompt;
  }
  double hires_cfg_or_first() const { return hires_cfg_scale > 0 ? hires_cfg_scale : cfg_scale; }
  // UniPC (settings unipc.*, pipeline/unipc_reference.hpp): diffusers'
  // UniPCMultistepScheduler, or the UniPC reference code as A1111 ("UniPC")
  // or ComfyUI (uni_pc, uni_pc_bh2) run it; "auto"/0 take the implementation's own default.
  std::string unipc_implementation = "diffusers";  // diffusers | a1111 | comfyui
  std::string unipc_variant = "auto";              // auto | bh1 | bh2
  int unipc_order = 0;                             // 0 (auto) or 1-3
  std::string unipc_lower_order_final = "auto";    // auto | on | off
  std::string unipc_skip_type = "time_uniform";    // a1111: time_uniform | time_quadratic | logSNR
  // A1111's "Eta noise seed delta" (ENSD): when not 0, the noise a sampler adds
  // at each step comes from a new generator of the run's noise kind seeded
  // seed + eta_seed_delta (pipeline/step_noise.hpp); 0: the initial noise's own stream.
  std::int64_t eta_seed_delta = 0;

  ComponentPrecision& component(Component c) { return precision[static_cast<std::size_t>(c)]; }
  const ComponentPrecision& component(Component c) const { return precision[static_cast<std::size_t>(c)]; }

  // The effective precision / attention of the module at `module_path`
  // (diffusers name inside the component, e.g. "up_blocks.1.attentions.0.
  // transformer_blocks.0.attn1"; "" for the component itself).
  Precision resolve(Component c, std::string_view module_path) const;
  AttentionConfig resolve_attention(Component c, std::string_view module_path) const;
  // The dtype the most specific override matching the module sets, if any
  // sets one (the module then computes in it: ops cast their inputs).
  std::optional<DType> override_dtype(Component c, std::string_view module_path) const;
  // Whether any override of component c sets a dtype.
  bool has_dtype_overrides(Component c) const;

  // One key of the grammar above. Throws ConfigError naming the key and the
  // allowed values; a failed set() changes nothing.
  void set(std::string_view key, std::string_view value);
  // "key=value" as the CLI passes it.
  void set(std::string_view assignment);

  // The seed of every image of the batch.
  std::vector<std::uint64_t> image_seeds() const;
  // The config of image `index` alone (its seed, batch of one): what its PNG records.
  RunConfig image_config(std::size_t index) const;

  // Checks every value and the relations between them (seeds vs batch_size,
  // override patterns). Throws ConfigError naming the key.
  void validate() const;

  friend bool operator==(const RunConfig&, const RunConfig&) = default;
};

namespace config_detail {
// Throws ConfigError "key \"KEY\": WHAT" (the form every settings message takes).
[[noreturn]] void fail(std::string_view key, const std::string& what);
}  // namespace config_detail

}  // namespace nanscope
