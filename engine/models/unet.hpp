#pragma once
// diffusers UNet2DConditionModel for SD 1.x, SD 2.x (linear projection,
// per-block heads, v-prediction is the scheduler's business) and SDXL
// (transformer layers per block, text_time added embedding), built from
// unet/config.json with module names exactly as diffusers names them.

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/config_json.hpp"
#include "models/layers.hpp"

namespace nanscope::models {

struct UNetConfig {
  std::int64_t in_channels = 4, out_channels = 4, sample_size = 64;
  std::vector<std::int64_t> block_out_channels;
  std::vector<std::string> down_block_types, up_block_types;
  std::string mid_block_type = "UNetMidBlock2DCrossAttn";
  std::vector<std::int64_t> layers_per_block;              // per down block
  std::vector<std::int64_t> heads;                         // per down block
  std::vector<std::int64_t> cross_attention_dim;           // per down block
  std::vector<std::int64_t> transformer_layers_per_block;  // per down block
  int norm_num_groups = 32;
  float norm_eps = 1e-5f;
  bool use_linear_projection = false;
  bool flip_sin_to_cos = true;
  float freq_shift = 0.0f;
  int downsample_padding = 1;
  // SDXL: addition_embed_type == "text_time"
  bool text_time = false;
  std::int64_t addition_time_embed_dim = 0;
  std::int64_t projection_class_embeddings_input_dim = 0;

  std::int64_t time_embed_dim() const { return block_out_channels.front() * 4; }
  static UNetConfig from_json(const ConfigJson& j);
};

// SDXL's extra conditioning: pooled text embedding and the six size/crop numbers.
struct AddedConditions {
  Tensor text_embeds;           // [b, pooled dim]
  std::vector<float> time_ids;  // b x 6: original h, w, crop top, left, target h, w
};

class UNet {
 public:
  static UNet load(const std::filesystem::path& folder, Backend& backend, DType dtype);
  UNet(UNetConfig config) : config_(std::move(config)) {}
  void load_weights(WeightLoader& w);

  // sample [b, in, h, w]; one timestep per batch row; context [b, tokens, cross_dim].
  Tensor forward(const OpContext& ctx, const Tensor& sample, std::span<const float> timesteps, const Tensor& context,
                 const AddedConditions* added = nullptr) const;
  const UNetConfig& config() const { return config_; }

 private:
  struct Block {
    std::string name;  // "down_blocks.0"
    std::vector<ResnetBlock2D> resnets;
    std::vector<Transformer2D> attentions;
    std::optional<Downsample2D> downsampler;
    std::optional<Upsample2D> upsampler;
  };
  struct TimeEmbedding {
    Linear linear_1, linear_2;
    std::string name;
    Tensor forward(const OpContext& ctx, const Tensor& x) const;
  };

  UNetConfig config_;
  TimeEmbedding time_embedding_;
  std::optional<TimeEmbedding> add_embedding_;
  Conv2d conv_in_, conv_out_;
  GroupNorm conv_norm_out_;
  std::vector<Block> down_, up_;
  std::optional<Block> mid_;
};

}  // namespace nanscope::models
