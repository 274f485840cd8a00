// The component configs read from diffusers/transformers config.json files
// (UNet, VAE, CLIP text encoder), apart from the models so the readers build
// and are fuzzed without the ops (tests/fuzz).

#include <string>
#include <vector>

#include "core/error.hpp"
#include "models/clip_text.hpp"
#include "models/unet.hpp"
#include "models/vae.hpp"

namespace nanscope::models {

namespace {

// Sizes and counts: at least 1 and at most kMaxSize (a million channels or
// layers is far past any model; the bound keeps the int fields and the
// allocations they drive sane). The error names the file and key.
constexpr std::int64_t kMaxSize = 1 << 20;

void check_size(const ConfigJson& j, const std::string& key, std::int64_t v) {
  if (v < 1 || v > kMaxSize) {
    throw ConfigError(j.origin() + ": '" + key + "' = " + std::to_string(v) + " is not a size; expected 1 to " +
                      std::to_string(kMaxSize) + ". Check the file against the model's original config.json");
  }
}

void check_sizes(const ConfigJson& j, const std::string& key, const std::vector<std::int64_t>& v) {
  for (const std::int64_t x : v) check_size(j, key, x);
}

}  // namespace

UNetConfig UNetConfig::from_json(const ConfigJson& j) {
  UNetConfig c;
  c.in_channels = j.get_int("in_channels", 4);
  c.out_channels = j.get_int("out_channels", 4);
  c.sample_size = j.get_int("sample_size", 64);
  c.block_out_channels = j.require_ints("block_out_channels");
  c.down_block_types = j.require_strings("down_block_types");
  c.up_block_types = j.require_strings("up_block_types");
  c.mid_block_type = j.get_string("mid_block_type", "UNetMidBlock2DCrossAttn");
  const std::size_t n = c.block_out_channels.size();
  if (c.down_block_types.size() != n || c.up_block_types.size() != n) {
    throw ConfigError(j.origin() +
                      ": down_block_types, up_block_types and block_out_channels must have the same "
                      "length");
  }
  for (const auto& t : c.down_block_types)
    if (t != "DownBlock2D" && t != "CrossAttnDownBlock2D") j.unsupported("down_block_types", "unknown block " + t);
  for (const auto& t : c.up_block_types)
    if (t != "UpBlock2D" && t != "CrossAttnUpBlock2D") j.unsupported("up_block_types", "unknown block " + t);
  if (c.mid_block_type != "UNetMidBlock2DCrossAttn") j.unsupported("mid_block_type", "only UNetMidBlock2DCrossAttn");
  c.layers_per_block = j.int_or_list("layers_per_block", n, 2);
  // diffusers' naming quirk: attention_head_dim holds the number of heads when
  // num_attention_heads is not given (SD 1.x: 8; SD 2.x: [5, 10, 20, 20]).
  c.heads = j.has("num_attention_heads") ? j.int_or_list("num_attention_heads", n, 8)
                                         : j.int_or_list("attention_head_dim", n, 8);
  c.cross_attention_dim = j.int_or_list("cross_attention_dim", n, 768);
  c.transformer_layers_per_block = j.int_or_list("transformer_layers_per_block", n, 1);
  c.norm_num_groups = static_cast<int>(j.get_int("norm_num_groups", 32));
  c.norm_eps = static_cast<float>(j.get_float("norm_eps", 1e-5));
  c.use_linear_projection = j.get_bool("use_linear_projection", false);
  c.flip_sin_to_cos = j.get_bool("flip_sin_to_cos", true);
  c.freq_shift = static_cast<float>(j.get_float("freq_shift", 0.0));
  c.downsample_padding = static_cast<int>(j.get_int("downsample_padding", 1));
  const std::string add_type = j.get_string("addition_embed_type", "");
  if (add_type == "text_time") {
    c.text_time = true;
    c.addition_time_embed_dim = j.require_int("addition_time_embed_dim");
    c.projection_class_embeddings_input_dim = j.require_int("projection_class_embeddings_input_dim");
  } else if (!add_type.empty()) {
    j.unsupported("addition_embed_type", "only text_time (SDXL)");
  }
  if (j.get_bool("only_cross_attention", false)) j.unsupported("only_cross_attention", "not used by SD models");
  if (j.get_bool("dual_cross_attention", false)) j.unsupported("dual_cross_attention", "not used by SD models");
  if (j.has("class_embed_type")) j.unsupported("class_embed_type", "not used by SD text-to-image models");
  if (j.has("time_cond_proj_dim")) j.unsupported("time_cond_proj_dim", "LCM-style conditioning");
  if (j.has("encoder_hid_dim")) j.unsupported("encoder_hid_dim", "not used by SD text-to-image models");
  if (j.get_string("resnet_time_scale_shift", "default") != "default")
    j.unsupported("resnet_time_scale_shift", "only 'default'");
  if (j.get_string("act_fn", "silu") != "silu") j.unsupported("act_fn", "only silu");
  if (j.get_int("conv_in_kernel", 3) != 3 || j.get_int("conv_out_kernel", 3) != 3)
    j.unsupported("conv_in_kernel", "only 3x3 in/out convolutions");
  if (j.has("reverse_transformer_layers_per_block"))
    j.unsupported("reverse_transformer_layers_per_block", "not used by SD models");
  check_size(j, "in_channels", c.in_channels);
  check_size(j, "out_channels", c.out_channels);
  check_size(j, "sample_size", c.sample_size);
  check_sizes(j, "block_out_channels", c.block_out_channels);
  check_sizes(j, "layers_per_block", c.layers_per_block);
  check_sizes(j, j.has("num_attention_heads") ? "num_attention_heads" : "attention_head_dim", c.heads);
  check_sizes(j, "cross_attention_dim", c.cross_attention_dim);
  check_sizes(j, "transformer_layers_per_block", c.transformer_layers_per_block);
  check_size(j, "norm_num_groups", j.get_int("norm_num_groups", 32));
  check_size(j, "downsample_padding", j.get_int("downsample_padding", 1) + 1);  // 0 is allowed
  for (std::size_t i = 0; i < n; ++i) {
    if (c.block_out_channels[i] % c.heads[i] != 0) {
      throw ConfigError(j.origin() + ": block_out_channels[" + std::to_string(i) +
                        "] = " + std::to_string(c.block_out_channels[i]) + " is not divisible by its " +
                        std::to_string(c.heads[i]) + " attention heads");
    }
  }
  return c;
}

VaeConfig VaeConfig::from_json(const ConfigJson& j) {
  VaeConfig c;
  c.in_channels = j.get_int("in_channels", 3);
  c.out_channels = j.get_int("out_channels", 3);
  c.latent_channels = j.get_int("latent_channels", 4);
  c.block_out_channels = j.require_ints("block_out_channels");
  c.layers_per_block = j.get_int("layers_per_block", 2);
  c.norm_num_groups = static_cast<int>(j.get_int("norm_num_groups", 32));
  c.scaling_factor = static_cast<float>(j.get_float("scaling_factor", 0.18215));
  c.shift_factor = static_cast<float>(j.get_float("shift_factor", 0.0));
  c.force_upcast = j.get_bool("force_upcast", true);
  c.mid_block_attention = j.get_bool("mid_block_add_attention", true);
  c.use_quant_conv = j.get_bool("use_quant_conv", true);
  c.use_post_quant_conv = j.get_bool("use_post_quant_conv", true);
  for (const auto& t : j.require_strings("up_block_types"))
    if (t != "UpDecoderBlock2D") j.unsupported("up_block_types", "only UpDecoderBlock2D");
  for (const auto& t : j.require_strings("down_block_types"))
    if (t != "DownEncoderBlock2D") j.unsupported("down_block_types", "only DownEncoderBlock2D");
  if (j.get_string("act_fn", "silu") != "silu") j.unsupported("act_fn", "only silu");
  check_size(j, "in_channels", c.in_channels);
  check_size(j, "out_channels", c.out_channels);
  check_size(j, "latent_channels", c.latent_channels);
  check_sizes(j, "block_out_channels", c.block_out_channels);
  check_size(j, "layers_per_block", c.layers_per_block);
  check_size(j, "norm_num_groups", j.get_int("norm_num_groups", 32));
  return c;
}

ClipTextConfig ClipTextConfig::from_json(const ConfigJson& j) {
  ClipTextConfig c;
  c.vocab_size = j.require_int("vocab_size");
  c.hidden_size = j.require_int("hidden_size");
  c.intermediate_size = j.require_int("intermediate_size");
  c.layers = static_cast<int>(j.require_int("num_hidden_layers"));
  c.heads = static_cast<int>(j.require_int("num_attention_heads"));
  c.max_positions = j.get_int("max_position_embeddings", 77);
  const std::string act = j.get_string("hidden_act", "quick_gelu");
  if (act != "quick_gelu" && act != "gelu") j.unsupported("hidden_act", "quick_gelu or gelu");
  c.quick_gelu = act == "quick_gelu";
  c.layer_norm_eps = static_cast<float>(j.get_float("layer_norm_eps", 1e-5));
  c.eos_token_id = j.get_int("eos_token_id", 2);
  if (j.raw().contains("architectures") && j.raw()["architectures"].is_array()) {
    for (const auto& a : j.raw()["architectures"]) {
      if (a == "CLIPTextModelWithProjection") c.projection_dim = j.get_int("projection_dim", c.hidden_size);
    }
  }
  check_size(j, "vocab_size", c.vocab_size);
  check_size(j, "hidden_size", c.hidden_size);
  check_size(j, "intermediate_size", c.intermediate_size);
  check_size(j, "num_hidden_layers", j.require_int("num_hidden_layers"));
  check_size(j, "num_attention_heads", j.require_int("num_attention_heads"));
  check_size(j, "max_position_embeddings", c.max_positions);
  if (c.projection_dim) check_size(j, "projection_dim", c.projection_dim);
  if (c.hidden_size % c.heads != 0) j.unsupported("num_attention_heads", "hidden_size must divide evenly");
  return c;
}

}  // namespace nanscope::models
