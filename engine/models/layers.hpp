#pragma once
// The building blocks of SD models, named and laid out exactly as diffusers
// names them, so a module's path is its checkpoint key prefix and its trace
// name. Each block is a typed struct: `load` reads and checks its tensors once;
// `forward` runs its ops under ctx.child(<its name>).

#include <optional>
#include <string>
#include <vector>

#include "models/weights.hpp"
#include "ops/ops.hpp"

namespace nanscope::models {

// Joins a prefix and a name with '.', skipping an empty prefix.
std::string join(const std::string& prefix, const std::string& name);

struct Linear {
  std::string name;
  Tensor weight, bias;  // weight [out, in] (torch layout); bias may be undefined
  std::int64_t in = 0, out = 0;
  std::vector<LoraBranch> lora;  // LoRAs applied unmerged (models/lora.hpp)
  bool feeds_geglu = false;      // its output goes to GEGLU (forward_geglu): prepared at load for that call
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t in, std::int64_t out,
            bool has_bias = true);
  Tensor forward(const OpContext& ctx, const Tensor& x) const;
  // geglu(act, forward(ctx, x)), as one call where it can be (ops::linear_geglu; never with LoRAs, which add to
  // the output first).
  Tensor forward_geglu(const OpContext& ctx, const Tensor& x, const OpContext& act) const;
};

struct Conv2d {
  std::string name;
  Tensor weight, bias;
  std::int64_t in = 0, out = 0, kernel = 1;
  int stride = 1, padding = 0;
  std::vector<LoraBranch> lora;  // LoRAs applied unmerged (models/lora.hpp)
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t in, std::int64_t out,
            std::int64_t kernel, int stride = 1, int padding = 0);
  Tensor forward(const OpContext& ctx, const Tensor& x) const;
};

struct GroupNorm {
  std::string name;
  Tensor gamma, beta;
  int groups = 32;
  float eps = 1e-5f;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t channels, int groups,
            float eps);
  Tensor forward(const OpContext& ctx, const Tensor& x) const;
  // silu(forward(x)), the SILU as module `act` (ops::group_norm_silu: over x's
  // buffer when the caller moves in the only handle to it).
  Tensor forward_silu(const OpContext& ctx, const OpContext& act, Tensor x) const;
};

struct LayerNorm {
  std::string name;
  Tensor gamma, beta;
  float eps = 1e-5f;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t dim, float eps);
  Tensor forward(const OpContext& ctx, const Tensor& x) const;
};

// diffusers.models.attention_processor.Attention (classic processor semantics).
struct Attention {
  std::string name;
  Linear to_q, to_k, to_v, to_out;      // to_out is "to_out.0"
  std::optional<GroupNorm> group_norm;  // VAE mid-block attention
  int heads = 1;
  std::int64_t dim_head = 0;
  bool residual_connection = false;
  float rescale_output_factor = 1.0f;
  // query_dim -> inner = heads * dim_head; cross_dim = key/value input size.
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t query_dim,
            std::int64_t cross_dim, int heads, std::int64_t dim_head, bool qkv_bias, bool out_bias = true);
  // x [b, s, query_dim]; context [b, sk, cross_dim] or null (self-attention).
  Tensor forward(const OpContext& ctx, const Tensor& x, const Tensor* context) const;
  // VAE form: x [b, c, h, w] with group_norm and residual.
  Tensor forward_spatial(const OpContext& ctx, const Tensor& x) const;
};

// diffusers FeedForward with GEGLU (net.0.proj: dim -> 2*inner, net.2: inner -> dim).
struct FeedForward {
  std::string name;
  Linear proj, out;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t dim, std::int64_t inner);
  Tensor forward(const OpContext& ctx, const Tensor& x) const;
};

struct BasicTransformerBlock {
  std::string name;
  LayerNorm norm1, norm2, norm3;
  Attention attn1, attn2;
  FeedForward ff;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t dim, int heads,
            std::int64_t dim_head, std::int64_t cross_dim);
  Tensor forward(const OpContext& ctx, const Tensor& x, const Tensor& context) const;
};

// diffusers Transformer2DModel (continuous input): norm, proj_in, blocks, proj_out, residual.
struct Transformer2D {
  std::string name;
  GroupNorm norm;
  bool linear_projection = false;
  Conv2d proj_in_conv, proj_out_conv;
  Linear proj_in_linear, proj_out_linear;
  std::vector<BasicTransformerBlock> blocks;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t channels, int heads,
            int layers, std::int64_t cross_dim, bool linear_projection, int groups);
  Tensor forward(const OpContext& ctx, const Tensor& x, const Tensor& context) const;
};

struct ResnetBlock2D {
  std::string name;
  GroupNorm norm1, norm2;
  Conv2d conv1, conv2;
  std::optional<Linear> time_emb_proj;
  std::optional<Conv2d> conv_shortcut;
  float output_scale_factor = 1.0f;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t in, std::int64_t out,
            std::int64_t temb_channels, int groups, float eps);
  // temb: [b, temb_channels] after the caller's SiLU... (diffusers applies SiLU inside: we do too).
  // A caller done with x moves it in: its buffer is then reused (see forward()).
  Tensor forward(const OpContext& ctx, Tensor x, const Tensor* temb) const;
};

struct Downsample2D {
  std::string name;  // "downsamplers.0"
  Conv2d conv;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t channels,
            int padding = 1);
  Tensor forward(const OpContext& ctx, const Tensor& x) const;
};

struct Upsample2D {
  std::string name;  // "upsamplers.0"
  Conv2d conv;
  void load(WeightLoader& w, const std::string& prefix, const std::string& name, std::int64_t channels);
  Tensor forward(const OpContext& ctx, const Tensor& x) const;
};

}  // namespace nanscope::models
