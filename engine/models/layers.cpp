#include "models/layers.hpp"

#include <cmath>

#include "core/error.hpp"

namespace nanscope::models {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

void Linear::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t in_features,
                  std::int64_t out_features, bool has_bias) {
  name = n;
  in = in_features;
  out = out_features;
  const std::string p = join(prefix, n);
  lora.clear();
  weight = w.load_module_weight(p, {out, in}, lora);
  if (has_bias) bias = w.load(p + ".bias", {out});
  // Calls in the load's dtype then find the weight ready (the CPU kernels' packed panels): the first step runs at
  // the speed of the next instead of packing every weight.
  w.backend().prepare_linear_weight(weight, Precision{w.dtype()}, feeds_geglu && lora.empty());
}

Tensor Linear::forward(const OpContext& ctx, const Tensor& x) const {
  const OpContext c = ctx.child(name);
  Tensor y = ops::linear(c, x, weight, bias.defined() ? &bias : nullptr);
  // PEFT's order: result + lora_B(lora_A(x)) * scaling, under <module>.lora.
  for (const LoraBranch& b : lora) {
    const OpContext lc = c.child(b.name);
    const Tensor d = ops::linear(lc.child("up"), ops::linear(lc.child("down"), x, b.down, nullptr), b.up, nullptr);
    y = ops::add(lc, y, ops::scale(lc, d, b.scale));
  }
  return y;
}

Tensor Linear::forward_geglu(const OpContext& ctx, const Tensor& x, const OpContext& act) const {
  if (!lora.empty()) return ops::geglu(act, forward(ctx, x));
  return ops::linear_geglu(ctx.child(name), act, x, weight, bias.defined() ? &bias : nullptr);
}

void Conv2d::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t in_channels,
                  std::int64_t out_channels, std::int64_t k, int s, int p) {
  name = n;
  in = in_channels;
  out = out_channels;
  kernel = k;
  stride = s;
  padding = p;
  const std::string pre = join(prefix, n);
  lora.clear();
  weight = w.load_module_weight(pre, {out, in, k, k}, lora);
  if (w.has(pre + ".bias")) bias = w.load(pre + ".bias", {out});
}

Tensor Conv2d::forward(const OpContext& ctx, const Tensor& x) const {
  const OpContext c = ctx.child(name);
  Tensor y = ops::conv2d(c, x, weight, bias.defined() ? &bias : nullptr, stride, padding);
  // kohya's conv LoRA: the down conv has the module's kernel, stride and padding; the up conv is 1x1.
  for (const LoraBranch& b : lora) {
    const OpContext lc = c.child(b.name);
    const Tensor h = ops::conv2d(lc.child("down"), x, b.down, nullptr, stride, padding);
    y = ops::add(lc, y, ops::scale(lc, ops::conv2d(lc.child("up"), h, b.up, nullptr, 1, 0), b.scale));
  }
  return y;
}

void GroupNorm::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t channels, int g,
                     float e) {
  name = n;
  groups = g;
  eps = e;
  const std::string p = join(prefix, n);
  gamma = w.load(p + ".weight", {channels});
  beta = w.load(p + ".bias", {channels});
}

Tensor GroupNorm::forward(const OpContext& ctx, const Tensor& x) const {
  return ops::group_norm(ctx.child(name), x, groups, &gamma, &beta, eps);
}

Tensor GroupNorm::forward_silu(const OpContext& ctx, const OpContext& act, Tensor x) const {
  return ops::group_norm_silu(ctx.child(name), act, std::move(x), groups, &gamma, &beta, eps);
}

void LayerNorm::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t dim, float e) {
  name = n;
  eps = e;
  const std::string p = join(prefix, n);
  gamma = w.load(p + ".weight", {dim});
  beta = w.load(p + ".bias", {dim});
}

Tensor LayerNorm::forward(const OpContext& ctx, const Tensor& x) const {
  return ops::layer_norm(ctx.child(name), x, &gamma, &beta, eps);
}

void Attention::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t query_dim,
                     std::int64_t cross_dim, int h, std::int64_t dh, bool qkv_bias, bool out_bias) {
  name = n;
  heads = h;
  dim_head = dh;
  const std::string p = join(prefix, n);
  const std::int64_t inner = h * dh;
  to_q.load(w, p, "to_q", query_dim, inner, qkv_bias);
  to_k.load(w, p, "to_k", cross_dim, inner, qkv_bias);
  to_v.load(w, p, "to_v", cross_dim, inner, qkv_bias);
  to_out.load(w, p, "to_out.0", inner, query_dim, out_bias);
}

Tensor Attention::forward(const OpContext& parent, const Tensor& x, const Tensor* context) const {
  const OpContext ctx = parent.child(name);
  const Tensor& kv_in = context ? *context : x;
  const Tensor q = to_q.forward(ctx, x);
  const Tensor k = to_k.forward(ctx, kv_in);
  const Tensor v = to_v.forward(ctx, kv_in);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim_head));
  const Tensor a = ops::attention(ctx, q, k, v, heads, scale);
  return to_out.forward(ctx, a);
}

Tensor Attention::forward_spatial(const OpContext& parent, const Tensor& x) const {
  const OpContext ctx = parent.child(name);
  const std::int64_t b = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  Tensor hs = group_norm ? group_norm->forward(ctx, x) : x;
  const int to_nlc[] = {0, 2, 3, 1};
  hs = ops::permute(ctx, hs, to_nlc).reshaped({b, h * wd, c});
  const Tensor q = to_q.forward(ctx, hs);
  const Tensor k = to_k.forward(ctx, hs);
  const Tensor v = to_v.forward(ctx, hs);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim_head));
  Tensor out = to_out.forward(ctx, ops::attention(ctx, q, k, v, heads, scale));
  const int to_nchw[] = {0, 3, 1, 2};
  out = ops::permute(ctx, out.reshaped({b, h, wd, c}), to_nchw);
  if (residual_connection) out = ops::add(ctx, out, x);
  if (rescale_output_factor != 1.0f) out = ops::scale(ctx, out, 1.0f / rescale_output_factor);
  return out;
}

void FeedForward::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t dim,
                       std::int64_t inner) {
  name = n;
  const std::string p = join(prefix, n);
  proj.feeds_geglu = true;
  proj.load(w, p, "net.0.proj", dim, 2 * inner);
  out.load(w, p, "net.2", inner, dim);
}

Tensor FeedForward::forward(const OpContext& parent, const Tensor& x) const {
  const OpContext ctx = parent.child(name);
  const Tensor h = proj.forward_geglu(ctx, x, ctx.child("net.0"));
  return out.forward(ctx, h);
}

void BasicTransformerBlock::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t dim,
                                 int heads, std::int64_t dim_head, std::int64_t cross_dim) {
  name = n;
  const std::string p = join(prefix, n);
  norm1.load(w, p, "norm1", dim, 1e-5f);
  attn1.load(w, p, "attn1", dim, dim, heads, dim_head, false);
  norm2.load(w, p, "norm2", dim, 1e-5f);
  attn2.load(w, p, "attn2", dim, cross_dim, heads, dim_head, false);
  norm3.load(w, p, "norm3", dim, 1e-5f);
  ff.load(w, p, "ff", dim, dim * 4);
}

Tensor BasicTransformerBlock::forward(const OpContext& parent, const Tensor& x, const Tensor& context) const {
  const OpContext ctx = parent.child(name);
  Tensor h = ops::add(ctx, attn1.forward(ctx, norm1.forward(ctx, x), nullptr), x);
  h = ops::add(ctx, attn2.forward(ctx, norm2.forward(ctx, h), &context), h);
  return ops::add(ctx, ff.forward(ctx, norm3.forward(ctx, h)), h);
}

void Transformer2D::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t channels,
                         int heads, int layers, std::int64_t cross_dim, bool linear, int groups) {
  name = n;
  linear_projection = linear;
  const std::string p = join(prefix, n);
  norm.load(w, p, "norm", channels, groups, 1e-6f);
  if (linear) {
    proj_in_linear.load(w, p, "proj_in", channels, channels);
    proj_out_linear.load(w, p, "proj_out", channels, channels);
  } else {
    proj_in_conv.load(w, p, "proj_in", channels, channels, 1);
    proj_out_conv.load(w, p, "proj_out", channels, channels, 1);
  }
  blocks.resize(static_cast<std::size_t>(layers));
  for (int i = 0; i < layers; ++i) {
    blocks[static_cast<std::size_t>(i)].load(w, p, "transformer_blocks." + std::to_string(i), channels, heads,
                                             channels / heads, cross_dim);
  }
}

Tensor Transformer2D::forward(const OpContext& parent, const Tensor& x, const Tensor& context) const {
  const OpContext ctx = parent.child(name);
  const std::int64_t b = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const int to_nlc[] = {0, 2, 3, 1};
  const int to_nchw[] = {0, 3, 1, 2};
  Tensor hs = norm.forward(ctx, x);
  if (linear_projection) {
    hs = ops::permute(ctx, hs, to_nlc).reshaped({b, h * wd, c});
    hs = proj_in_linear.forward(ctx, hs);
  } else {
    hs = proj_in_conv.forward(ctx, hs);
    hs = ops::permute(ctx, hs, to_nlc).reshaped({b, h * wd, c});
  }
  for (const auto& block : blocks) hs = block.forward(ctx, hs, context);
  if (linear_projection) {
    hs = proj_out_linear.forward(ctx, hs);
    hs = ops::permute(ctx, hs.reshaped({b, h, wd, c}), to_nchw);
  } else {
    hs = ops::permute(ctx, hs.reshaped({b, h, wd, c}), to_nchw);
    hs = proj_out_conv.forward(ctx, hs);
  }
  return ops::add(ctx, hs, x);
}

void ResnetBlock2D::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t in,
                         std::int64_t out, std::int64_t temb_channels, int groups, float eps) {
  name = n;
  const std::string p = join(prefix, n);
  norm1.load(w, p, "norm1", in, groups, eps);
  conv1.load(w, p, "conv1", in, out, 3, 1, 1);
  if (temb_channels > 0) {
    time_emb_proj.emplace();
    time_emb_proj->load(w, p, "time_emb_proj", temb_channels, out);
  }
  norm2.load(w, p, "norm2", out, groups, eps);
  conv2.load(w, p, "conv2", out, out, 3, 1, 1);
  if (in != out) {
    conv_shortcut.emplace();
    conv_shortcut->load(w, p, "conv_shortcut", in, out, 1);
  }
}

Tensor ResnetBlock2D::forward(const OpContext& parent, Tensor x, const Tensor* temb) const {
  const OpContext ctx = parent.child(name);
  const OpContext act = ctx.child("nonlinearity");
  // One statement per op, each result replacing the last: a nested call keeps
  // every temporary of the expression (the norm's output, the conv's input)
  // alive until the statement ends, one activation more than the op needs
  // during the convolution (256 MB at up_blocks.3 of a 512x512 VAE decode).
  // Untraced, the shortcut goes first: norm1 then writes over x when the
  // caller moved it in, the temb and residual adds write over h, and x's
  // buffer is not kept through the convolutions (at up_blocks.3.resnets.0 of a
  // 512x512 VAE decode the peak drops from x + silu(norm1(x)) + conv1's output
  // + the GEMM's scratch to silu(norm1(x)) + the shortcut + conv1's output).
  // Same ops, same results; a traced call keeps the modules' order and every
  // output in its own buffer for the layer trace.
  const bool shortcut_first = !traces_each_module(ctx);
  Tensor shortcut;
  if (shortcut_first) shortcut = conv_shortcut ? conv_shortcut->forward(ctx, x) : x;
  Tensor h = shortcut_first ? norm1.forward_silu(ctx, act, std::move(x)) : norm1.forward_silu(ctx, act, x);
  h = conv1.forward(ctx, h);
  if (time_emb_proj && temb) {
    Tensor t = time_emb_proj->forward(ctx, ops::silu(act, *temb));
    t = t.reshaped({t.dim(0), t.dim(1), 1, 1});
    h = ops::add_reusing(ctx.child(time_emb_proj->name), std::move(h), t);
  }
  h = norm2.forward_silu(ctx, act, std::move(h));
  h = conv2.forward(ctx, h);
  if (!shortcut_first) shortcut = conv_shortcut ? conv_shortcut->forward(ctx, x) : x;
  Tensor out = shortcut_first ? ops::add_reusing(ctx, std::move(h), shortcut) : ops::add(ctx, shortcut, h);
  if (output_scale_factor != 1.0f) out = ops::scale(ctx, out, 1.0f / output_scale_factor);
  return out;
}

void Downsample2D::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t channels,
                        int padding) {
  name = n;
  conv.load(w, join(prefix, n), "conv", channels, channels, 3, 2, padding);
}

Tensor Downsample2D::forward(const OpContext& parent, const Tensor& x) const {
  const OpContext ctx = parent.child(name);
  if (conv.padding != 0) return conv.forward(ctx, x);
  // padding=0 (the VAE encoder): diffusers pads one zero row/column at the
  // bottom/right before the stride-2 convolution.
  Backend& be = ctx.be();
  const std::int64_t b = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const Tensor zero_col = be.upload(HostTensor({b, c, h, 1}, x.dtype()));
  const Tensor zero_row = be.upload(HostTensor({b, c, 1, wd + 1}, x.dtype()));
  const Tensor wide[] = {x, zero_col};
  const Tensor padded_w = ops::concat(ctx, wide, 3);
  const Tensor tall[] = {padded_w, zero_row};
  return conv.forward(ctx, ops::concat(ctx, tall, 2));
}

void Upsample2D::load(WeightLoader& w, const std::string& prefix, const std::string& n, std::int64_t channels) {
  name = n;
  conv.load(w, join(prefix, n), "conv", channels, channels, 3, 1, 1);
}

Tensor Upsample2D::forward(const OpContext& parent, const Tensor& x) const {
  const OpContext ctx = parent.child(name);
  return conv.forward(ctx, ops::upsample_nearest2x(ctx, x));
}

}  // namespace nanscope::models
