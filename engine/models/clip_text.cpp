#include "models/clip_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace nanscope::models {

ClipTextModel ClipTextModel::load(const std::filesystem::path& folder, Backend& backend, DType dtype) {
  ClipTextModel m(ClipTextConfig::from_json(ConfigJson::load(folder / "config.json")));
  const WeightSource source = WeightSource::from_folder(folder, dtype != DType::f32);
  WeightLoader loader(source, backend, dtype, "text_encoder");
  m.load_weights(loader);
  return m;
}

void ClipTextModel::load_weights(WeightLoader& w) {
  const ClipTextConfig& c = config_;
  const std::string e = "text_model.embeddings";
  w.load_host_into(e + ".token_embedding.weight", {c.vocab_size, c.hidden_size}, w.dtype(), token_embedding_);
  position_embedding_ = w.load(e + ".position_embedding.weight", {c.max_positions, c.hidden_size});
  layers_.resize(static_cast<std::size_t>(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    Layer& l = layers_[static_cast<std::size_t>(i)];
    l.name = "text_model.encoder.layers." + std::to_string(i);
    const std::int64_t h = c.hidden_size;
    l.layer_norm1.load(w, l.name, "layer_norm1", h, c.layer_norm_eps);
    l.layer_norm2.load(w, l.name, "layer_norm2", h, c.layer_norm_eps);
    l.q_proj.load(w, l.name + ".self_attn", "q_proj", h, h);
    l.k_proj.load(w, l.name + ".self_attn", "k_proj", h, h);
    l.v_proj.load(w, l.name + ".self_attn", "v_proj", h, h);
    l.out_proj.load(w, l.name + ".self_attn", "out_proj", h, h);
    l.fc1.load(w, l.name + ".mlp", "fc1", h, c.intermediate_size);
    l.fc2.load(w, l.name + ".mlp", "fc2", c.intermediate_size, h);
  }
  final_layer_norm_.load(w, "text_model", "final_layer_norm", c.hidden_size, c.layer_norm_eps);
  if (c.projection_dim > 0) {
    text_projection_.emplace();
    text_projection_->load(w, "", "text_projection", c.hidden_size, c.projection_dim, false);
  }
}

Tensor ClipTextModel::layer_forward(const OpContext& parent, const Layer& l, const Tensor& x) const {
  const OpContext ctx = parent.child(l.name);
  const OpContext attn = ctx.child("self_attn");
  Tensor h = l.layer_norm1.forward(ctx, x);
  const Tensor q = l.q_proj.forward(attn, h);
  const Tensor k = l.k_proj.forward(attn, h);
  const Tensor v = l.v_proj.forward(attn, h);
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.hidden_size / config_.heads));
  h = l.out_proj.forward(attn, ops::attention(attn, q, k, v, config_.heads, scale, /*causal=*/true));
  const Tensor r = ops::add(ctx, x, h);
  const OpContext mlp = ctx.child("mlp");
  h = l.fc1.forward(mlp, l.layer_norm2.forward(ctx, r));
  h = config_.quick_gelu ? ops::quick_gelu(mlp.child("activation_fn"), h) : ops::gelu(mlp.child("activation_fn"), h);
  return ops::add(ctx, r, l.fc2.forward(mlp, h));
}

ClipTextOutput ClipTextModel::forward(const OpContext& ctx, const std::vector<std::vector<int>>& ids,
                                      int clip_skip) const {
  const ClipTextConfig& c = config_;
  if (ids.empty()) throw OpError(op_message(ctx, "CLIP_TEXT", {}, "no token rows given"));
  const auto tokens = static_cast<std::int64_t>(ids.front().size());
  if (tokens == 0 || tokens > c.max_positions) {
    throw OpError(
        op_message(ctx, "CLIP_TEXT", {},
                   "got " + std::to_string(tokens) + " tokens; the model takes 1.." + std::to_string(c.max_positions)));
  }
  if (clip_skip < 0 || clip_skip >= c.layers) {
    throw OpError(
        op_message(ctx, "CLIP_TEXT", {},
                   "clip_skip " + std::to_string(clip_skip) + " is out of range 0.." + std::to_string(c.layers - 1)));
  }
  const auto batch = static_cast<std::int64_t>(ids.size());
  const std::size_t esz = dtype_size(token_embedding_.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(c.hidden_size) * esz;
  HostTensor emb({batch, tokens, c.hidden_size}, token_embedding_.dtype);
  for (std::int64_t b = 0; b < batch; ++b) {
    if (static_cast<std::int64_t>(ids[static_cast<std::size_t>(b)].size()) != tokens) {
      throw OpError(op_message(ctx, "CLIP_TEXT", {}, "token rows have different lengths"));
    }
    for (std::int64_t t = 0; t < tokens; ++t) {
      const int id = ids[static_cast<std::size_t>(b)][static_cast<std::size_t>(t)];
      if (id < 0 || id >= c.vocab_size) {
        throw OpError(op_message(ctx, "CLIP_TEXT", {},
                                 "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                     std::to_string(c.vocab_size) + "; the tokenizer does not match the encoder"));
      }
      std::memcpy(emb.data.data() + static_cast<std::size_t>(b * tokens + t) * row_bytes,
                  token_embedding_.data.data() + static_cast<std::size_t>(id) * row_bytes, row_bytes);
    }
  }
  const OpContext ectx = ctx.child("text_model.embeddings");
  Tensor pos = position_embedding_;
  if (tokens != c.max_positions) pos = ops::slice(ectx, pos, 0, 0, tokens);
  Tensor x = ops::add(ectx, ctx.be().upload(emb), pos.reshaped({1, tokens, c.hidden_size}));

  // hidden_states[i] is the input of layer i; [layers] is the last layer's output.
  Tensor penultimate, skipped;
  for (int i = 0; i < c.layers; ++i) {
    if (i == c.layers - 1) penultimate = x;
    if (clip_skip > 0 && i == c.layers - clip_skip) skipped = x;
    x = layer_forward(ctx, layers_[static_cast<std::size_t>(i)], x);
  }
  const Tensor last = final_layer_norm_.forward(ctx.child("text_model"), x);
  ClipTextOutput out;
  out.penultimate = penultimate;
  out.prompt_embeds = clip_skip > 0 ? final_layer_norm_.forward(ctx.child("text_model"), skipped) : last;

  // Pooled output at the EOS token: transformers uses argmax(ids) for the legacy
  // eos_token_id 2 and the first eos_token_id occurrence otherwise.
  std::vector<Tensor> rows;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& row = ids[static_cast<std::size_t>(b)];
    std::int64_t pos_eos = 0;
    if (c.eos_token_id == 2) {
      pos_eos = std::max_element(row.begin(), row.end()) - row.begin();
    } else {
      const auto it = std::find(row.begin(), row.end(), static_cast<int>(c.eos_token_id));
      pos_eos = it == row.end() ? tokens - 1 : it - row.begin();
    }
    const Tensor one = ops::slice(ctx.child("pooler"), last.reshaped({batch * tokens, c.hidden_size}), 0,
                                  b * tokens + pos_eos, b * tokens + pos_eos + 1);
    rows.push_back(one);
  }
  out.pooled = ops::concat(ctx.child("pooler"), rows, 0);
  if (text_projection_) out.pooled = text_projection_->forward(ctx, out.pooled);
  return out;
}

}  // namespace nanscope::models
