#pragma once
// transformers CLIPTextModel / CLIPTextModelWithProjection, as SD uses them:
// causal self-attention, quick_gelu or gelu, final layer norm, clip_skip, the
// penultimate hidden state and the pooled (EOS) output for SDXL.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "models/config_json.hpp"
#include "models/layers.hpp"

namespace nanscope::models {

struct ClipTextConfig {
  std::int64_t vocab_size = 49408, hidden_size = 768, intermediate_size = 3072;
  int layers = 12, heads = 12;
  std::int64_t max_positions = 77;
  bool quick_gelu = true;  // hidden_act: quick_gelu (OpenAI CLIP) or gelu (OpenCLIP)
  float layer_norm_eps = 1e-5f;
  std::int64_t eos_token_id = 2;
  std::int64_t projection_dim = 0;  // > 0 for CLIPTextModelWithProjection
  static ClipTextConfig from_json(const ConfigJson& j);
};

struct ClipTextOutput {
  // The embeddings SD conditions on: last_hidden_state after the final layer
  // norm, or with clip_skip k the hidden state k layers earlier (normed).
  Tensor prompt_embeds;  // [b, tokens, hidden]
  Tensor penultimate;    // [b, tokens, hidden] (hidden_states[-2], not normed; SDXL)
  Tensor pooled;         // [b, hidden] at the EOS token, or its projection when the model has one
};

class ClipTextModel {
 public:
  static ClipTextModel load(const std::filesystem::path& folder, Backend& backend, DType dtype);
  explicit ClipTextModel(const ClipTextConfig& config) : config_(config) {}
  void load_weights(WeightLoader& w);

  // ids: b rows of `tokens` ids. clip_skip 0 = last layer.
  ClipTextOutput forward(const OpContext& ctx, const std::vector<std::vector<int>>& ids, int clip_skip = 0) const;
  const ClipTextConfig& config() const { return config_; }

 private:
  struct Layer {
    std::string name;
    LayerNorm layer_norm1, layer_norm2;
    Linear q_proj, k_proj, v_proj, out_proj, fc1, fc2;
  };
  Tensor layer_forward(const OpContext& ctx, const Layer& l, const Tensor& x) const;

  ClipTextConfig config_;
  HostTensor token_embedding_;  // looked up on the host: a gather involves no arithmetic
  Tensor position_embedding_;
  std::vector<Layer> layers_;
  LayerNorm final_layer_norm_;
  std::optional<Linear> text_projection_;
};

}  // namespace nanscope::models
