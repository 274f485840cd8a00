#pragma once
// The generation settings of a PNG made by another tool, read into one
// neutral value type: what the image says, complete, before anything is
// mapped onto a RunConfig (studies/reproduce.hpp does that and lists what
// NaNscope cannot run).
//
// Two formats:
//  - A1111 / SD.Next / Forge "parameters" text (config/a1111.hpp splits it as
//    A1111's parse_generation_parameters does, modules/infotext_utils.py in
//    AUTOMATIC1111/stable-diffusion-webui). Missing "RNG" means GPU and
//    missing "Clip skip" means 1, as that function fills them in.
//  - ComfyUI's "prompt" chunk: the API-format graph
//      {"3": {"class_type": "KSampler", "inputs": {"seed": 5, "model": ["4", 0], ...}}, ...}
//    where an input that is a two-element list [node id (string), output
//    index (number)] is a link to another node's output (is_link() in
//    comfy_execution/graph_utils.py of comfyanonymous/ComfyUI; the executor
//    resolves inputs the same way). Reading starts at the sampler (KSampler or
//    KSamplerAdvanced; the one whose latent reaches a SaveImage/PreviewImage
//    through VAEDecode when there are several) and follows its links to
//    CheckpointLoaderSimple, LoraLoader chains, CLIPSetLastLayer,
//    CLIPTextEncode, EmptyLatentImage, VAEDecode and VAELoader. Any other node
//    those links reach is listed in `unsupported_nodes`, never skipped. The
//    "workflow" chunk (the editor's layout) is kept as it is.
//
// Errors are ConfigErrors naming the field ("A1111 parameters \"Steps: x\"")
// or the node ("ComfyUI prompt: node 3 'KSampler' input 'steps': ...").

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/png.hpp"

namespace nanscope {

enum class ForeignTool : std::uint8_t { a1111, comfyui };
std::string_view foreign_tool_name(ForeignTool t);  // "A1111", "ComfyUI"

struct ForeignLora {
  std::string name;     // as the image names it: "add_detail" (A1111 tag) or "style/x.safetensors" (ComfyUI)
  double weight = 1.0;  // UNet strength (A1111's <lora:NAME:TE:UNET> or unet=, ComfyUI's strength_model)
  // Text encoder strength (A1111's <lora:NAME:TE> or te=, ComfyUI's strength_clip); A1111's UNet weight
  // defaults to it when the tag gives one number.
  double clip_weight = 1.0;
  std::string unsupported{};  // what of the tag NaNscope cannot honour ("dyn=8"); "" when none
  std::string hash;           // from "Lora hashes" (A1111's 12-digit short hash); "" when none
  std::string source;         // where it was read: "prompt tag", "Lora hashes", "node 10 'LoraLoader'"
  friend bool operator==(const ForeignLora&, const ForeignLora&) = default;
};

// A ComfyUI node on the sampler's path that is not one of the nodes above.
struct ForeignNode {
  std::string id;
  std::string class_type;
  std::string reached_by;  // "node 3 'KSampler' input 'positive'"
  friend bool operator==(const ForeignNode&, const ForeignNode&) = default;
};

struct ForeignGeneration {
  ForeignTool tool = ForeignTool::a1111;
  std::string version;  // A1111 "Version" (e.g. "v1.9.3", Forge's "f0.0.17..."); "" when absent
  std::string prompt;   // LoRA tags left in, as written
  std::string negative_prompt;
  std::optional<int> steps;
  std::string sampler;   // the tool's own name: "DPM++ 2M", "dpmpp_2m"
  std::string schedule;  // A1111 "Schedule type" ("Karras", "Automatic") or ComfyUI scheduler ("karras", "normal")
  std::optional<double> cfg_scale;
  std::optional<std::uint64_t> seed;
  std::optional<int> width;
  std::optional<int> height;
  int batch_size = 1;            // ComfyUI EmptyLatentImage batch_size
  std::optional<int> clip_skip;  // A1111's count: 1 = the last layer (ComfyUI stop_at_clip_layer -N gives N)
  std::string model;             // checkpoint name as written ("v1-5-pruned-emaonly", "sd15/model.safetensors")
  std::string model_hash;        // "Model hash": 10 hex digits (AutoV2) or 8 (AutoV1)
  std::string vae;               // "" = the model's own VAE
  std::string vae_hash;
  std::vector<ForeignLora> loras;
  std::optional<double> denoise;  // "Denoising strength" / KSampler denoise
  // Hires fix (A1111): the upscale factor or the target size, second-pass steps, upscaler, denoising.
  std::optional<double> hires_upscale;
  std::optional<int> hires_width;
  std::optional<int> hires_height;
  std::optional<int> hires_steps;
  std::string hires_upscaler;
  std::optional<double> hires_denoise;
  // The second pass's own settings, as A1111 writes them only where they
  // differ from the first pass's: "Hires sampler", "Hires schedule type",
  // "Hires prompt", "Hires negative prompt", "Hires CFG Scale", "Hires checkpoint".
  std::string hires_sampler;
  std::string hires_schedule;
  std::optional<std::string> hires_prompt;
  std::optional<std::string> hires_negative_prompt;
  std::optional<double> hires_cfg_scale;
  std::string hires_checkpoint;      // A1111's short title: "name [hash]"
  std::optional<std::int64_t> ensd;  // "ENSD": A1111's eta noise seed delta
  std::optional<double> eta;
  std::string rng;  // A1111 "RNG": GPU (the default when absent), CPU, NV; ComfyUI: "CPU" (it seeds on the CPU)
  // A1111's UniPC options, written when not its defaults ("" when absent): "UniPC variant",
  // "UniPC skip type", "UniPC order", "UniPC lower order final" (config/sampler_names.hpp).
  std::string unipc_variant;
  std::string unipc_skip_type;
  std::string unipc_order;
  std::string unipc_lower_order_final;
  // KSamplerAdvanced
  std::optional<int> start_step;
  std::optional<int> end_step;
  std::optional<bool> add_noise;
  std::string sampler_node;   // ComfyUI: the sampler node's id
  std::string latent_source;  // ComfyUI: class_type feeding latent_image when it is not EmptyLatentImage
  std::vector<std::pair<std::string, std::string>> unknown_fields;  // A1111 fields not read above, by name, in order
  std::vector<ForeignNode> unsupported_nodes;                       // ComfyUI
  nlohmann::json workflow;  // ComfyUI "workflow" chunk as read (null when absent or not JSON)
  friend bool operator==(const ForeignGeneration&, const ForeignGeneration&) = default;
};

ForeignGeneration foreign_from_a1111(std::string_view parameters);
ForeignGeneration foreign_from_comfyui(std::string_view prompt_json, std::string_view workflow_json = {});

// The foreign settings a PNG carries: ComfyUI's "prompt" chunk when present,
// else A1111 "parameters"; nullopt for a NaNscope PNG (it has a "nanscope"
// chunk: config_from_png restores it) or a PNG without either. Errors name
// `source` and the field or node.
std::optional<ForeignGeneration> foreign_generation_from_png(const io::PngContents& png, std::string_view source);

nlohmann::json to_json(const ForeignGeneration& g);

// The <lora:...> / <lyco:...> tags of an A1111 prompt with their text-encoder
// and UNet weights, as A1111's Lora extension reads them (ConfigError for a
// tag whose weight is not a number).
std::vector<ForeignLora> a1111_prompt_loras(const std::string& prompt);

}  // namespace nanscope
