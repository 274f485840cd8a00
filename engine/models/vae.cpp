#include "models/vae.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "models/ldm_checkpoint.hpp"

namespace nanscope::models {

namespace {
constexpr float kVaeEps = 1e-6f;
}

Vae load_vae_file(const std::filesystem::path& path, Backend& backend, DType dtype, bool with_encoder,
                  ModelFamily family) {
  VaeFile file = open_vae_file(path, family);
  Vae vae(file.config);
  WeightLoader loader(*file.source, backend, dtype, "vae");
  vae.load_weights(loader, with_encoder);
  if (with_encoder) loader.report_unused();
  log::info("VAE from the single file {} ({}, {} naming, scaling_factor {})", path.string(),
            model_family_name(file.family), file.diffusers ? "diffusers" : "original", vae.config().scaling_factor);
  return vae;
}

void Vae::Mid::load(WeightLoader& w, const std::string& prefix, std::int64_t ch, int groups, bool attn) {
  resnet0.load(w, prefix, "resnets.0", ch, ch, 0, groups, kVaeEps);
  if (attn) {
    attention.emplace();
    attention->load(w, prefix, "attentions.0", ch, ch, 1, ch, true);
    attention->group_norm.emplace();
    attention->group_norm->load(w, join(prefix, "attentions.0"), "group_norm", ch, groups, kVaeEps);
    attention->residual_connection = true;
  }
  resnet1.load(w, prefix, "resnets.1", ch, ch, 0, groups, kVaeEps);
}

Tensor Vae::Mid::forward(const OpContext& parent, const Tensor& x) const {
  const OpContext ctx = parent.child("mid_block");
  Tensor h = resnet0.forward(ctx, x, nullptr);
  if (attention) h = attention->forward_spatial(ctx, h);
  return resnet1.forward(ctx, std::move(h), nullptr);
}

Vae Vae::load(const std::filesystem::path& folder, Backend& backend, DType dtype, bool with_encoder) {
  if (std::filesystem::is_regular_file(folder)) return load_vae_file(folder, backend, dtype, with_encoder);
  Vae vae(VaeConfig::from_json(ConfigJson::load(folder / "config.json")));
  const WeightSource source = WeightSource::from_folder(folder, dtype != DType::f32);
  WeightLoader loader(source, backend, dtype, "vae");
  vae.load_weights(loader, with_encoder);
  if (with_encoder) loader.report_unused();
  return vae;
}

void Vae::load_weights(WeightLoader& w, bool with_encoder) {
  const VaeConfig& c = config_;
  const std::size_t n = c.block_out_channels.size();
  const int g = c.norm_num_groups;
  const std::int64_t lat = c.latent_channels;

  if (with_encoder) {
    Coder& e = encoder_.emplace();
    e.conv_in.load(w, "encoder", "conv_in", c.in_channels, c.block_out_channels.front(), 3, 1, 1);
    std::int64_t out_ch = c.block_out_channels.front();
    e.stages.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      Stage& s = e.stages[i];
      s.name = "down_blocks." + std::to_string(i);
      const std::string p = "encoder." + s.name;
      const std::int64_t in_ch = out_ch;
      out_ch = c.block_out_channels[i];
      for (std::int64_t j = 0; j < c.layers_per_block; ++j)
        s.resnets.emplace_back().load(w, p, "resnets." + std::to_string(j), j == 0 ? in_ch : out_ch, out_ch, 0, g,
                                      kVaeEps);
      if (i + 1 < n) {
        s.downsampler.emplace();
        s.downsampler->load(w, p, "downsamplers.0", out_ch, 0);
      }
    }
    e.mid.load(w, "encoder.mid_block", c.block_out_channels.back(), g, c.mid_block_attention);
    e.conv_norm_out.load(w, "encoder", "conv_norm_out", c.block_out_channels.back(), g, kVaeEps);
    e.conv_out.load(w, "encoder", "conv_out", c.block_out_channels.back(), 2 * lat, 3, 1, 1);
    if (c.use_quant_conv) {
      quant_conv_.emplace();
      quant_conv_->load(w, "", "quant_conv", 2 * lat, 2 * lat, 1);
    }
  }

  Coder& d = decoder_;
  std::vector<std::int64_t> rev(c.block_out_channels.rbegin(), c.block_out_channels.rend());
  d.conv_in.load(w, "decoder", "conv_in", lat, rev[0], 3, 1, 1);
  d.mid.load(w, "decoder.mid_block", rev[0], g, c.mid_block_attention);
  std::int64_t out_ch = rev[0];
  d.stages.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    Stage& s = d.stages[i];
    s.name = "up_blocks." + std::to_string(i);
    const std::string p = "decoder." + s.name;
    const std::int64_t in_ch = out_ch;
    out_ch = rev[i];
    for (std::int64_t j = 0; j < c.layers_per_block + 1; ++j)
      s.resnets.emplace_back().load(w, p, "resnets." + std::to_string(j), j == 0 ? in_ch : out_ch, out_ch, 0, g,
                                    kVaeEps);
    if (i + 1 < n) {
      s.upsampler.emplace();
      s.upsampler->load(w, p, "upsamplers.0", out_ch);
    }
  }
  d.conv_norm_out.load(w, "decoder", "conv_norm_out", c.block_out_channels.front(), g, kVaeEps);
  d.conv_out.load(w, "decoder", "conv_out", c.block_out_channels.front(), c.out_channels, 3, 1, 1);
  if (c.use_post_quant_conv) {
    post_quant_conv_.emplace();
    post_quant_conv_->load(w, "", "post_quant_conv", lat, lat, 1);
  }
}

Tensor Vae::decode(const OpContext& ctx, const Tensor& latents) const {
  if (latents.rank() != 4 || latents.dim(1) != config_.latent_channels) {
    throw OpError(op_message(ctx, "VAE_DECODE", {{"latents", &latents}},
                             "expected [batch, " + std::to_string(config_.latent_channels) + ", h, w] latents"));
  }
  const RepeatedCall repeated(ctx.be(), repeated_call_key(ctx, "vae decode", latents));
  Tensor z = ops::scale(ctx.child("scaling"), latents, 1.0f / config_.scaling_factor);
  if (config_.shift_factor != 0.0f) {
    const Tensor shift = ctx.be().upload(HostTensor::from_f32({1}, {config_.shift_factor}, z.dtype()));
    z = ops::add(ctx.child("scaling"), z, shift);
  }
  if (post_quant_conv_) z = post_quant_conv_->forward(ctx, z);
  const OpContext dctx = ctx.child("decoder");
  Tensor h = decoder_.conv_in.forward(dctx, z);
  h = decoder_.mid.forward(dctx, h);
  for (const Stage& s : decoder_.stages) {
    const OpContext sctx = dctx.child(s.name);
    for (const auto& r : s.resnets) h = r.forward(sctx, std::move(h), nullptr);
    if (s.upsampler) h = s.upsampler->forward(sctx, h);
  }
  h = decoder_.conv_norm_out.forward_silu(dctx, dctx.child("conv_act"), std::move(h));
  return decoder_.conv_out.forward(dctx, h);
}

Tensor Vae::encode(const OpContext& ctx, const Tensor& image) const {
  const Tensor h = encode_moments(ctx, image);
  // The posterior mean is the first latent_channels channels (the rest is log-variance).
  Tensor mean = ops::slice(ctx.child("posterior"), h, 1, 0, config_.latent_channels);
  if (config_.shift_factor != 0.0f) {
    const Tensor shift = ctx.be().upload(HostTensor::from_f32({1}, {-config_.shift_factor}, mean.dtype()));
    mean = ops::add(ctx.child("scaling"), mean, shift);
  }
  return ops::scale(ctx.child("scaling"), mean, config_.scaling_factor);
}

Tensor Vae::encode_moments(const OpContext& ctx, const Tensor& image) const {
  if (!encoder_) {
    throw OpError(op_message(ctx, "VAE_ENCODE", {{"image", &image}}, "the VAE was loaded without its encoder"));
  }
  const RepeatedCall repeated(ctx.be(), repeated_call_key(ctx, "vae encode", image));
  const OpContext ectx = ctx.child("encoder");
  Tensor h = encoder_->conv_in.forward(ectx, image);
  for (const Stage& s : encoder_->stages) {
    const OpContext sctx = ectx.child(s.name);
    for (const auto& r : s.resnets) h = r.forward(sctx, std::move(h), nullptr);
    if (s.downsampler) h = s.downsampler->forward(sctx, h);
  }
  h = encoder_->mid.forward(ectx, h);
  h = encoder_->conv_norm_out.forward_silu(ectx, ectx.child("conv_act"), std::move(h));
  h = encoder_->conv_out.forward(ectx, h);
  if (quant_conv_) h = quant_conv_->forward(ctx, h);
  return h;
}

}  // namespace nanscope::models
