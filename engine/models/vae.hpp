#pragma once
// diffusers AutoencoderKL: encoder (image -> latent) and decoder (latent ->
// image), with scaling_factor, shift_factor and force_upcast read from config.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "models/config_json.hpp"
#include "models/layers.hpp"

namespace nanscope::models {

struct VaeConfig {
  std::int64_t in_channels = 3, out_channels = 3, latent_channels = 4;
  std::vector<std::int64_t> block_out_channels;
  std::int64_t layers_per_block = 2;
  int norm_num_groups = 32;
  float scaling_factor = 0.18215f;
  float shift_factor = 0.0f;
  bool force_upcast = false;  // the VAE is known to overflow in f16 (SDXL's)
  bool mid_block_attention = true;
  bool use_quant_conv = true, use_post_quant_conv = true;

  // Image pixels per latent pixel along one axis.
  std::int64_t downscale() const { return std::int64_t{1} << (block_out_channels.size() - 1); }
  static VaeConfig from_json(const ConfigJson& j);
};

class Vae {
 public:
  // Loads from a VAE folder (config.json + safetensors), or from one safetensors
  // file (a whole single-file checkpoint's VAE, an original or a diffusers VAE file).
  static Vae load(const std::filesystem::path& folder, Backend& backend, DType dtype, bool with_encoder = false);
  explicit Vae(VaeConfig config) : config_(std::move(config)) {}
  void load_weights(WeightLoader& w, bool with_encoder);

  // The sampler's latents [b, latent_channels, h, w] (decode divides by
  // scaling_factor) -> image [b, out_channels, h*f, w*f] in [-1, 1], unclamped.
  Tensor decode(const OpContext& ctx, const Tensor& latents) const;
  // image [b, 3, H, W] in [-1, 1] -> the posterior mean times scaling_factor.
  Tensor encode(const OpContext& ctx, const Tensor& image) const;
  // image -> the posterior's parameters [b, 2 * latent_channels, h, w]: mean,
  // then log-variance, unscaled (diffusers' DiagonalGaussianDistribution
  // input), for a caller that samples the posterior.
  Tensor encode_moments(const OpContext& ctx, const Tensor& image) const;
  bool has_encoder() const { return encoder_.has_value(); }
  const VaeConfig& config() const { return config_; }

 private:
  struct Mid {
    ResnetBlock2D resnet0, resnet1;
    std::optional<Attention> attention;
    void load(WeightLoader& w, const std::string& prefix, std::int64_t channels, int groups, bool attn);
    Tensor forward(const OpContext& ctx, const Tensor& x) const;
  };
  struct Stage {
    std::string name;
    std::vector<ResnetBlock2D> resnets;
    std::optional<Downsample2D> downsampler;
    std::optional<Upsample2D> upsampler;
  };
  struct Coder {
    Conv2d conv_in, conv_out;
    GroupNorm conv_norm_out;
    std::vector<Stage> stages;
    Mid mid;
  };

  VaeConfig config_;
  std::optional<Coder> encoder_;
  Coder decoder_;
  std::optional<Conv2d> quant_conv_, post_quant_conv_;
};

}  // namespace nanscope::models
