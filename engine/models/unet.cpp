#include "models/unet.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::models {

namespace {

bool is_cross_attn(const std::string& type) { return type.find("CrossAttn") != std::string::npos; }

}  // namespace

Tensor UNet::TimeEmbedding::forward(const OpContext& parent, const Tensor& x) const {
  const OpContext ctx = parent.child(name);
  return linear_2.forward(ctx, ops::silu(ctx.child("act"), linear_1.forward(ctx, x)));
}

UNet UNet::load(const std::filesystem::path& folder, Backend& backend, DType dtype) {
  UNet unet(UNetConfig::from_json(ConfigJson::load(folder / "config.json")));
  const WeightSource source = WeightSource::from_folder(folder, dtype != DType::f32);
  WeightLoader loader(source, backend, dtype, "unet");
  unet.load_weights(loader);
  loader.report_unused();
  return unet;
}

void UNet::load_weights(WeightLoader& w) {
  const UNetConfig& c = config_;
  const std::size_t n = c.block_out_channels.size();
  const std::int64_t temb = c.time_embed_dim();
  const std::int64_t c0 = c.block_out_channels.front();
  const int g = c.norm_num_groups;
  const float eps = c.norm_eps;

  // Loading again (SdModel::apply_loras) builds the blocks anew.
  down_.clear();
  up_.clear();
  mid_.reset();
  add_embedding_.reset();
  time_embedding_.name = "time_embedding";
  time_embedding_.linear_1.load(w, "time_embedding", "linear_1", c0, temb);
  time_embedding_.linear_2.load(w, "time_embedding", "linear_2", temb, temb);
  if (c.text_time) {
    add_embedding_.emplace();
    add_embedding_->name = "add_embedding";
    add_embedding_->linear_1.load(w, "add_embedding", "linear_1", c.projection_class_embeddings_input_dim, temb);
    add_embedding_->linear_2.load(w, "add_embedding", "linear_2", temb, temb);
  }
  conv_in_.load(w, "", "conv_in", c.in_channels, c0, 3, 1, 1);

  std::int64_t out_ch = c0;
  down_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    Block& b = down_[i];
    b.name = "down_blocks." + std::to_string(i);
    const std::int64_t in_ch = out_ch;
    out_ch = c.block_out_channels[i];
    for (std::int64_t j = 0; j < c.layers_per_block[i]; ++j) {
      b.resnets.emplace_back().load(w, b.name, "resnets." + std::to_string(j), j == 0 ? in_ch : out_ch, out_ch, temb, g,
                                    eps);
      if (is_cross_attn(c.down_block_types[i])) {
        b.attentions.emplace_back().load(
            w, b.name, "attentions." + std::to_string(j), out_ch, static_cast<int>(c.heads[i]),
            static_cast<int>(c.transformer_layers_per_block[i]), c.cross_attention_dim[i], c.use_linear_projection, g);
      }
    }
    if (i + 1 < n) {
      b.downsampler.emplace();
      b.downsampler->load(w, b.name, "downsamplers.0", out_ch, c.downsample_padding);
    }
  }

  mid_.emplace();
  mid_->name = "mid_block";
  const std::int64_t last = c.block_out_channels.back();
  mid_->resnets.emplace_back().load(w, "mid_block", "resnets.0", last, last, temb, g, eps);
  mid_->attentions.emplace_back().load(w, "mid_block", "attentions.0", last, static_cast<int>(c.heads.back()),
                                       static_cast<int>(c.transformer_layers_per_block.back()),
                                       c.cross_attention_dim.back(), c.use_linear_projection, g);
  mid_->resnets.emplace_back().load(w, "mid_block", "resnets.1", last, last, temb, g, eps);

  std::vector<std::int64_t> rev(c.block_out_channels.rbegin(), c.block_out_channels.rend());
  up_.resize(n);
  out_ch = rev[0];
  for (std::size_t i = 0; i < n; ++i) {
    Block& b = up_[i];
    b.name = "up_blocks." + std::to_string(i);
    const std::size_t di = n - 1 - i;  // the matching down block
    const std::int64_t prev_out = out_ch;
    out_ch = rev[i];
    const std::int64_t in_ch = rev[std::min(i + 1, n - 1)];
    const std::int64_t layers = c.layers_per_block[di] + 1;
    for (std::int64_t j = 0; j < layers; ++j) {
      const std::int64_t skip = j == layers - 1 ? in_ch : out_ch;
      const std::int64_t res_in = j == 0 ? prev_out : out_ch;
      b.resnets.emplace_back().load(w, b.name, "resnets." + std::to_string(j), res_in + skip, out_ch, temb, g, eps);
      if (is_cross_attn(c.up_block_types[i])) {
        b.attentions.emplace_back().load(w, b.name, "attentions." + std::to_string(j), out_ch,
                                         static_cast<int>(c.heads[di]),
                                         static_cast<int>(c.transformer_layers_per_block[di]),
                                         c.cross_attention_dim[di], c.use_linear_projection, g);
      }
    }
    if (i + 1 < n) {
      b.upsampler.emplace();
      b.upsampler->load(w, b.name, "upsamplers.0", out_ch);
    }
  }
  conv_norm_out_.load(w, "", "conv_norm_out", c0, g, eps);
  conv_out_.load(w, "", "conv_out", c0, c.out_channels, 3, 1, 1);
}

Tensor UNet::forward(const OpContext& ctx, const Tensor& sample, std::span<const float> timesteps,
                     const Tensor& context, const AddedConditions* added) const {
  const RepeatedCall repeated(ctx.be(), repeated_call_key(ctx, "unet", sample));
  const UNetConfig& c = config_;
  const std::int64_t batch = sample.dim(0);
  if (sample.rank() != 4 || sample.dim(1) != c.in_channels) {
    throw OpError(op_message(ctx, "UNET", {{"sample", &sample}},
                             "expected a [batch, " + std::to_string(c.in_channels) + ", h, w] latent"));
  }
  const std::int64_t factor = std::int64_t{1} << (c.block_out_channels.size() - 1);
  if (sample.dim(2) % factor != 0 || sample.dim(3) % factor != 0) {
    throw OpError(op_message(ctx, "UNET", {{"sample", &sample}},
                             "the latent height and width must be multiples of " + std::to_string(factor) +
                                 " for this UNet (it halves them " + std::to_string(c.block_out_channels.size() - 1) +
                                 " times)"));
  }
  if (static_cast<std::int64_t>(timesteps.size()) != batch) {
    throw OpError(
        op_message(ctx, "UNET", {{"sample", &sample}},
                   "got " + std::to_string(timesteps.size()) + " timesteps for a batch of " + std::to_string(batch)));
  }

  Tensor t_emb =
      ops::timestep_embedding(ctx.child("time_proj"), timesteps, static_cast<int>(c.block_out_channels.front()),
                              c.flip_sin_to_cos, c.freq_shift);
  Tensor emb = time_embedding_.forward(ctx, t_emb);
  if (add_embedding_) {
    if (!added) {
      throw OpError(op_message(ctx, "UNET", {{"sample", &sample}},
                               "this UNet (SDXL) needs the pooled text embedding and size/crop time ids"));
    }
    const OpContext pctx = ctx.child("add_time_proj");
    Tensor time_embeds = ops::timestep_embedding(pctx, added->time_ids, static_cast<int>(c.addition_time_embed_dim),
                                                 c.flip_sin_to_cos, c.freq_shift);
    time_embeds = time_embeds.reshaped({batch, time_embeds.numel() / batch});
    const Tensor parts[] = {added->text_embeds, time_embeds};
    const Tensor add_in = ops::concat(pctx, parts, 1);
    emb = ops::add(ctx.child("add_embedding"), emb, add_embedding_->forward(ctx, add_in));
  }

  Tensor h = conv_in_.forward(ctx, sample);
  std::vector<Tensor> skips{h};
  for (const Block& b : down_) {
    const OpContext bctx = ctx.child(b.name);
    for (std::size_t j = 0; j < b.resnets.size(); ++j) {
      h = b.resnets[j].forward(bctx, std::move(h), &emb);
      if (!b.attentions.empty()) h = b.attentions[j].forward(bctx, h, context);
      skips.push_back(h);
    }
    if (b.downsampler) {
      h = b.downsampler->forward(bctx, h);
      skips.push_back(h);
    }
  }
  {
    const OpContext mctx = ctx.child(mid_->name);
    h = mid_->resnets[0].forward(mctx, std::move(h), &emb);
    h = mid_->attentions[0].forward(mctx, h, context);
    h = mid_->resnets[1].forward(mctx, std::move(h), &emb);
  }
  for (const Block& b : up_) {
    const OpContext bctx = ctx.child(b.name);
    for (std::size_t j = 0; j < b.resnets.size(); ++j) {
      const Tensor parts[] = {h, skips.back()};
      skips.pop_back();
      h = ops::concat(bctx.child(b.resnets[j].name), parts, 1);
      h = b.resnets[j].forward(bctx, std::move(h), &emb);
      if (!b.attentions.empty()) h = b.attentions[j].forward(bctx, h, context);
    }
    if (b.upsampler) h = b.upsampler->forward(bctx, h);
  }
  h = conv_norm_out_.forward_silu(ctx, ctx.child("conv_act"), std::move(h));
  return conv_out_.forward(ctx, h);
}

}  // namespace nanscope::models
