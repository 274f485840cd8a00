#include "models/ldm_checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <span>

#include "core/error.hpp"
#include "core/log.hpp"

// The names follow diffusers 0.31 loaders/single_file_utils.py
// (convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint,
// convert_ldm_clip_checkpoint, convert_open_clip_checkpoint and
// DIFFUSERS_TO_LDM_MAPPING); the code is ours. Keys of the original layout:
//   UNet  model.diffusion_model.{time_embed.0|2, label_emb.0.0|2, input_blocks.K.{0,1},
//         middle_block.{0,1,2}, output_blocks.K.{0,1,2}, out.0|2}
//   VAE   first_stage_model.{encoder,decoder}.{conv_in, down.I.block.J, down.I.downsample,
//         up.I.block.J (I counted from the lowest resolution), mid.block_1|attn_1|block_2, norm_out, conv_out}
//   CLIP  SD 1.x cond_stage_model.transformer.<transformers names>; SDXL conditioner.embedders.0.transformer.
//   OpenCLIP SD 2.x cond_stage_model.model.*, SDXL conditioner.embedders.1.model.*:
//         token_embedding, positional_embedding, transformer.resblocks.N.{ln_1, attn.in_proj_*, attn.out_proj,
//         ln_2, mlp.c_fc, mlp.c_proj}, ln_final, text_projection ([width, proj], i.e. transposed)

namespace nanscope::models {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kUnetPrefix = "model.diffusion_model.";
constexpr std::string_view kVaePrefix = "first_stage_model.";

using Transform = TensorRef::Transform;

struct Leaf {
  std::string_view diffusers, ldm;  // a trailing '.' matches a prefix, otherwise the whole leaf
  Transform transform = Transform::none;
  int chunk = 0;
};

constexpr Leaf kUnetResnet[] = {
    {"norm1.", "in_layers.0."},  {"conv1.", "in_layers.2."},  {"time_emb_proj.", "emb_layers.1."},
    {"norm2.", "out_layers.0."}, {"conv2.", "out_layers.3."}, {"conv_shortcut.", "skip_connection."},
};
constexpr Leaf kVaeResnet[] = {
    {"norm1.", "norm1."},
    {"conv1.", "conv1."},
    {"norm2.", "norm2."},
    {"conv2.", "conv2."},
    {"conv_shortcut.", "nin_shortcut."},
};
constexpr Leaf kVaeAttention[] = {
    {"group_norm.", "norm."},
    {"to_q.weight", "q.weight", Transform::squeeze},
    {"to_k.weight", "k.weight", Transform::squeeze},
    {"to_v.weight", "v.weight", Transform::squeeze},
    {"to_out.0.weight", "proj_out.weight", Transform::squeeze},
    {"to_q.bias", "q.bias"},
    {"to_k.bias", "k.bias"},
    {"to_v.bias", "v.bias"},
    {"to_out.0.bias", "proj_out.bias"},
};
constexpr Leaf kOpenClipLayer[] = {
    {"layer_norm1.", "ln_1."},
    {"layer_norm2.", "ln_2."},
    {"mlp.fc1.", "mlp.c_fc."},
    {"mlp.fc2.", "mlp.c_proj."},
    {"self_attn.out_proj.", "attn.out_proj."},
    {"self_attn.q_proj.weight", "attn.in_proj_weight", Transform::chunk, 0},
    {"self_attn.k_proj.weight", "attn.in_proj_weight", Transform::chunk, 1},
    {"self_attn.v_proj.weight", "attn.in_proj_weight", Transform::chunk, 2},
    {"self_attn.q_proj.bias", "attn.in_proj_bias", Transform::chunk, 0},
    {"self_attn.k_proj.bias", "attn.in_proj_bias", Transform::chunk, 1},
    {"self_attn.v_proj.bias", "attn.in_proj_bias", Transform::chunk, 2},
};

std::span<const Leaf> leaves(LeafRule r) {
  switch (r) {
    case LeafRule::unet_resnet: return kUnetResnet;
    case LeafRule::vae_resnet: return kVaeResnet;
    case LeafRule::vae_attention: return kVaeAttention;
    case LeafRule::openclip_layer: return kOpenClipLayer;
    case LeafRule::same:
    case LeafRule::transpose: return {};
  }
  return {};
}

TensorRef make_ref(std::string key, Transform t, int chunk) {
  TensorRef r;
  r.key = std::move(key);
  r.transform = t;
  if (t == Transform::chunk) {
    r.chunk = chunk;
    r.chunks = 3;
  }
  return r;
}

bool is_prefix(std::string_view s) { return !s.empty() && s.back() == '.'; }

std::string num(std::int64_t i) { return std::to_string(i); }

std::string component_of(std::string_view diffusers) {
  const auto dot = diffusers.find('.');
  return std::string(diffusers.substr(0, dot));
}

}  // namespace

std::string_view model_family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::sd1: return "SD 1.x";
    case ModelFamily::sd2: return "SD 2.x";
    case ModelFamily::sdxl: return "SDXL";
  }
  return "?";
}

std::string_view ldm_component_prefix(ModelFamily f, std::string_view component) {
  if (component == "unet") return kUnetPrefix;
  if (component == "vae") return kVaePrefix;
  if (component == "text_encoder") {
    switch (f) {
      case ModelFamily::sd1: return "cond_stage_model.transformer.";
      case ModelFamily::sd2: return "cond_stage_model.model.";
      case ModelFamily::sdxl: return "conditioner.embedders.0.transformer.";
    }
  }
  if (component == "text_encoder_2" && f == ModelFamily::sdxl) return "conditioner.embedders.1.model.";
  return {};
}

// ---------------------------------------------------------------------------
// The tables

LdmNameMap::LdmNameMap(const LdmStructure& s) : family_(s.family) {
  const auto add = [&](std::string d, std::string l, LeafRule r = LeafRule::same) {
    rows_.push_back({std::move(d), std::move(l), r});
  };

  // UNet: input_blocks count every resnet(+attention) pair and every downsampler in order;
  // output_blocks likewise with one more layer per level and the upsampler inside the last one.
  {
    const UNetConfig& c = s.unet;
    const std::string d = "unet.", l(kUnetPrefix);
    const std::size_t n = c.block_out_channels.size();
    const auto cross = [](const std::string& type) { return type.find("CrossAttn") != std::string::npos; };
    add(d + "time_embedding.linear_1.", l + "time_embed.0.");
    add(d + "time_embedding.linear_2.", l + "time_embed.2.");
    if (c.text_time) {
      add(d + "add_embedding.linear_1.", l + "label_emb.0.0.");
      add(d + "add_embedding.linear_2.", l + "label_emb.0.2.");
    }
    add(d + "conv_in.", l + "input_blocks.0.0.");
    std::int64_t k = 1;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string b = d + "down_blocks." + num(static_cast<std::int64_t>(i)) + ".";
      for (std::int64_t j = 0; j < c.layers_per_block[i]; ++j, ++k) {
        add(b + "resnets." + num(j) + ".", l + "input_blocks." + num(k) + ".0.", LeafRule::unet_resnet);
        if (cross(c.down_block_types[i])) add(b + "attentions." + num(j) + ".", l + "input_blocks." + num(k) + ".1.");
      }
      if (i + 1 < n) add(b + "downsamplers.0.conv.", l + "input_blocks." + num(k++) + ".0.op.");
    }
    add(d + "mid_block.resnets.0.", l + "middle_block.0.", LeafRule::unet_resnet);
    add(d + "mid_block.attentions.0.", l + "middle_block.1.");
    add(d + "mid_block.resnets.1.", l + "middle_block.2.", LeafRule::unet_resnet);
    k = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string b = d + "up_blocks." + num(static_cast<std::int64_t>(i)) + ".";
      const bool attn = cross(c.up_block_types[i]);
      const std::int64_t layers = c.layers_per_block[n - 1 - i] + 1;
      for (std::int64_t j = 0; j < layers; ++j, ++k) {
        const std::string o = l + "output_blocks." + num(k) + ".";
        add(b + "resnets." + num(j) + ".", o + "0.", LeafRule::unet_resnet);
        if (attn) add(b + "attentions." + num(j) + ".", o + "1.");
        if (j == layers - 1 && i + 1 < n) add(b + "upsamplers.0.conv.", o + (attn ? "2" : "1") + ".conv.");
      }
    }
    add(d + "conv_norm_out.", l + "out.0.");
    add(d + "conv_out.", l + "out.2.");
  }

  // VAE: the decoder's up.I counts from the lowest resolution, diffusers' up_blocks from the highest.
  {
    const VaeConfig& c = s.vae;
    const std::string d = "vae.", l = s.vae_prefix;
    const std::size_t n = c.block_out_channels.size();
    const auto mid = [&](const std::string& coder) {
      add(d + coder + ".mid_block.resnets.0.", l + coder + ".mid.block_1.", LeafRule::vae_resnet);
      if (c.mid_block_attention)
        add(d + coder + ".mid_block.attentions.0.", l + coder + ".mid.attn_1.", LeafRule::vae_attention);
      add(d + coder + ".mid_block.resnets.1.", l + coder + ".mid.block_2.", LeafRule::vae_resnet);
      add(d + coder + ".conv_in.", l + coder + ".conv_in.");
      add(d + coder + ".conv_norm_out.", l + coder + ".norm_out.");
      add(d + coder + ".conv_out.", l + coder + ".conv_out.");
    };
    mid("encoder");
    for (std::size_t i = 0; i < n; ++i) {
      const std::string b = d + "encoder.down_blocks." + num(static_cast<std::int64_t>(i)) + ".";
      const std::string o = l + "encoder.down." + num(static_cast<std::int64_t>(i)) + ".";
      for (std::int64_t j = 0; j < c.layers_per_block; ++j)
        add(b + "resnets." + num(j) + ".", o + "block." + num(j) + ".", LeafRule::vae_resnet);
      if (i + 1 < n) add(b + "downsamplers.0.conv.", o + "downsample.conv.");
    }
    if (c.use_quant_conv) add(d + "quant_conv.", l + "quant_conv.");
    if (c.use_post_quant_conv) add(d + "post_quant_conv.", l + "post_quant_conv.");
    mid("decoder");
    for (std::size_t i = 0; i < n; ++i) {
      const std::string b = d + "decoder.up_blocks." + num(static_cast<std::int64_t>(i)) + ".";
      const std::string o = l + "decoder.up." + num(static_cast<std::int64_t>(n - 1 - i)) + ".";
      for (std::int64_t j = 0; j < c.layers_per_block + 1; ++j)
        add(b + "resnets." + num(j) + ".", o + "block." + num(j) + ".", LeafRule::vae_resnet);
      if (i + 1 < n) add(b + "upsamplers.0.conv.", o + "upsample.conv.");
    }
  }

  // Text encoders.
  const auto open_clip = [&](const std::string& d, const std::string& l, int layers, bool projection) {
    add(d + "text_model.embeddings.token_embedding.weight", l + "token_embedding.weight");
    add(d + "text_model.embeddings.position_embedding.weight", l + "positional_embedding");
    add(d + "text_model.final_layer_norm.", l + "ln_final.");
    for (int i = 0; i < layers; ++i)
      add(d + "text_model.encoder.layers." + num(i) + ".", l + "transformer.resblocks." + num(i) + ".",
          LeafRule::openclip_layer);
    if (projection) add(d + "text_projection.weight", l + "text_projection", LeafRule::transpose);
    ignored_prefixes_.push_back(l + "logit_scale");
    ignored_prefixes_.push_back(l + "attn_mask");
  };
  const std::string te(ldm_component_prefix(s.family, "text_encoder"));
  switch (s.family) {
    case ModelFamily::sd1:
    case ModelFamily::sdxl:
      add("text_encoder.", te);
      ignored_prefixes_.push_back(te + "text_model.embeddings.position_ids");
      break;
    case ModelFamily::sd2:
      // SD 2.x conditions on the penultimate layer: diffusers' text encoder has one layer
      // fewer than the file, and no projection.
      open_clip("text_encoder.", te, s.text_layers, false);
      ignored_prefixes_.push_back(te + "transformer.resblocks." + num(s.text_layers) + ".");
      ignored_prefixes_.push_back(te + "text_projection");
      break;
  }
  if (s.family == ModelFamily::sdxl) {
    open_clip("text_encoder_2.", std::string(ldm_component_prefix(s.family, "text_encoder_2")), s.text_2_layers, true);
  }
}

std::optional<TensorRef> LdmNameMap::to_ldm(std::string_view name) const {
  const ModuleMap* best = nullptr;
  for (const auto& r : rows_) {
    const bool hit = is_prefix(r.diffusers) ? name.starts_with(r.diffusers) : name == r.diffusers;
    if (hit && (!best || r.diffusers.size() > best->diffusers.size())) best = &r;
  }
  if (!best) return std::nullopt;
  if (!is_prefix(best->diffusers)) {
    return make_ref(best->ldm, best->rule == LeafRule::transpose ? Transform::transpose : Transform::none, 0);
  }
  const std::string_view leaf = name.substr(best->diffusers.size());
  if (best->rule == LeafRule::same) return make_ref(best->ldm + std::string(leaf), Transform::none, 0);
  for (const Leaf& lf : leaves(best->rule)) {
    if (is_prefix(lf.diffusers) ? leaf.starts_with(lf.diffusers) : leaf == lf.diffusers) {
      return make_ref(best->ldm + std::string(lf.ldm) + std::string(leaf.substr(lf.diffusers.size())), lf.transform,
                      lf.chunk);
    }
  }
  return std::nullopt;
}

std::vector<LdmNameMap::Target> LdmNameMap::from_ldm(std::string_view key) const {
  const ModuleMap* best = nullptr;
  for (const auto& r : rows_) {
    const bool hit = is_prefix(r.ldm) ? key.starts_with(r.ldm) : key == r.ldm;
    if (hit && (!best || r.ldm.size() > best->ldm.size())) best = &r;
  }
  std::vector<Target> out;
  if (!best) return out;
  if (!is_prefix(best->ldm)) {
    out.push_back(
        {best->diffusers,
         make_ref(std::string(key), best->rule == LeafRule::transpose ? Transform::transpose : Transform::none, 0)});
    return out;
  }
  const std::string_view leaf = key.substr(best->ldm.size());
  if (best->rule == LeafRule::same) {
    out.push_back({best->diffusers + std::string(leaf), make_ref(std::string(key), Transform::none, 0)});
    return out;
  }
  for (const Leaf& lf : leaves(best->rule)) {
    if (is_prefix(lf.ldm) ? leaf.starts_with(lf.ldm) : leaf == lf.ldm) {
      out.push_back({best->diffusers + std::string(lf.diffusers) + std::string(leaf.substr(lf.ldm.size())),
                     make_ref(std::string(key), lf.transform, lf.chunk)});
    }
  }
  return out;
}

bool LdmNameMap::ignored(std::string_view key) const {
  return std::any_of(ignored_prefixes_.begin(), ignored_prefixes_.end(),
                     [&](const std::string& p) { return is_prefix(p) ? key.starts_with(p) : key == p; });
}

// ---------------------------------------------------------------------------
// Detection and configs

namespace {

bool has_prefix(const io::SafetensorsFile& f, std::string_view p) {
  return std::any_of(f.entries().begin(), f.entries().end(),
                     [&](const io::TensorEntry& e) { return std::string_view(e.name).starts_with(p); });
}

[[noreturn]] void fail(const io::SafetensorsFile& f, const std::string& what) {
  throw FileError(f.path().string() + ": " + what);
}

const Shape& shape_of(const io::SafetensorsFile& f, const std::string& key) {
  const io::TensorEntry* e = f.find(key);
  if (!e) {
    fail(f, "tensor '" + key +
                "' is missing; it is part of every checkpoint of this family (is the file truncated "
                "or a partial merge?)");
  }
  return e->shape;
}

std::int64_t dim_of(const io::SafetensorsFile& f, const std::string& key, std::size_t d) {
  const Shape& s = shape_of(f, key);
  if (s.size() <= d) {
    fail(f, "tensor '" + key + "' has shape " + shape_str(s) + "; expected at least " + std::to_string(d + 1) +
                " dimensions");
  }
  return s[d];
}

// The distinct N in keys "<prefix>N.", ascending.
std::vector<std::int64_t> indices(const io::SafetensorsFile& f, const std::string& prefix) {
  std::set<std::int64_t> out;
  for (const auto& e : f.entries()) {
    const std::string_view n(e.name);
    if (!n.starts_with(prefix)) continue;
    const std::string_view rest = n.substr(prefix.size());
    const auto dot = rest.find('.');
    const std::string_view digits = rest.substr(0, dot);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    if (digits.size() > 6) {
      fail(f, "tensor '" + e.name + "' has the block index " + std::string(digits) +
                  ", far beyond any Stable Diffusion checkpoint's; the file is damaged or not a checkpoint");
    }
    out.insert(std::stoll(std::string(digits)));
  }
  return {out.begin(), out.end()};
}

std::int64_t count(const io::SafetensorsFile& f, const std::string& prefix) {
  const auto v = indices(f, prefix);
  return v.empty() ? 0 : v.back() + 1;
}

// Heads from 64-channel heads (SD 2.x, SDXL, every CLIP text encoder).
std::int64_t heads_of_64(const io::SafetensorsFile& f, std::int64_t channels, const std::string& what) {
  if (channels % 64 != 0) {
    fail(f, what + " has " + std::to_string(channels) +
                " channels, not a multiple of the 64-channel attention heads of this family; the number of heads "
                "cannot be read from the weights, so this checkpoint cannot be loaded as a single file "
                "(convert it to a diffusers folder with its config)");
  }
  return channels / 64;
}

nlohmann::json infer_unet_config(const io::SafetensorsFile& f, ModelFamily fam, std::int64_t pooled_dim) {
  const std::string u(kUnetPrefix);
  const Shape& conv_in = shape_of(f, u + "input_blocks.0.0.weight");
  if (conv_in.size() != 4) fail(f, "input_blocks.0.0.weight should be a convolution, found " + shape_str(conv_in));
  if (conv_in[1] != 4) {
    fail(f, "the UNet takes " + std::to_string(conv_in[1]) +
                " input channels (an inpainting or instruct model?); text-to-image needs 4");
  }
  std::vector<std::int64_t> channels, layers, depth;
  std::vector<std::string> down_types;
  std::int64_t cross_dim = 0, cur = conv_in[0], n_layers = 0, d = 1;
  bool attn = false, linear = false;
  const auto close_level = [&] {
    channels.push_back(cur);
    layers.push_back(n_layers);
    depth.push_back(d);
    down_types.emplace_back(attn ? "CrossAttnDownBlock2D" : "DownBlock2D");
    n_layers = 0;
    d = 1;
    attn = false;
  };
  const std::int64_t inputs = count(f, u + "input_blocks.");
  for (std::int64_t k = 1; k < inputs; ++k) {
    const std::string p = u + "input_blocks." + num(k) + ".";
    if (f.find(p + "0.op.weight")) {
      close_level();
      continue;
    }
    cur = dim_of(f, p + "0.out_layers.3.weight", 0);
    ++n_layers;
    if (f.find(p + "1.proj_in.weight")) {
      attn = true;
      d = count(f, p + "1.transformer_blocks.");
      linear = shape_of(f, p + "1.proj_in.weight").size() == 2;
      cross_dim = dim_of(f, p + "1.transformer_blocks.0.attn2.to_k.weight", 1);
    }
  }
  close_level();
  const std::size_t n = channels.size();
  if (cross_dim == 0) fail(f, "the UNet has no cross-attention layers; it is not a text-to-image SD UNet");
  // Up levels mirror the down levels; the attention presence is read per level.
  std::vector<std::string> up_types;
  std::int64_t k = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t l = layers[n - 1 - i] + 1;
    const bool a = f.find(u + "output_blocks." + num(k) + ".1.proj_in.weight") != nullptr;
    up_types.emplace_back(a ? "CrossAttnUpBlock2D" : "UpBlock2D");
    k += l;
  }
  if (count(f, u + "output_blocks.") != k) {
    fail(f, "the UNet has " + std::to_string(count(f, u + "output_blocks.")) + " output blocks where its " +
                std::to_string(n) + " levels imply " + std::to_string(k) + "; the layout is not a standard SD UNet");
  }
  std::vector<std::int64_t> heads;
  for (std::size_t i = 0; i < n; ++i) {
    if (fam == ModelFamily::sd1) {
      if (channels[i] % 8 != 0) fail(f, "UNet level " + std::to_string(i) + " channels are not divisible by 8 heads");
      heads.push_back(8);
    } else {
      heads.push_back(heads_of_64(f, channels[i], "UNet level " + std::to_string(i)));
    }
  }
  const bool uniform = std::all_of(layers.begin(), layers.end(), [&](std::int64_t v) { return v == layers[0]; });
  nlohmann::json j = {
      {"_class_name", "UNet2DConditionModel"},
      {"sample_size", fam == ModelFamily::sd1   ? 64
                      : fam == ModelFamily::sd2 ? 96
                                                : 128},
      {"in_channels", conv_in[1]},
      {"out_channels", dim_of(f, u + "out.2.weight", 0)},
      {"block_out_channels", channels},
      {"down_block_types", down_types},
      {"up_block_types", up_types},
      {"mid_block_type", "UNetMidBlock2DCrossAttn"},
      {"layers_per_block", uniform ? nlohmann::json(layers[0]) : nlohmann::json(layers)},
      {"attention_head_dim", fam == ModelFamily::sd1 ? nlohmann::json(8) : nlohmann::json(heads)},
      {"cross_attention_dim", cross_dim},
      {"transformer_layers_per_block", depth},
      {"use_linear_projection", linear},
      {"norm_num_groups", 32},
      {"norm_eps", 1e-5},
      {"flip_sin_to_cos", true},
      {"freq_shift", 0},
      {"downsample_padding", 1},
      {"act_fn", "silu"},
  };
  if (f.find(u + "label_emb.0.0.weight")) {
    if (fam != ModelFamily::sdxl) fail(f, "the UNet has a label embedding (label_emb) but no SDXL text encoders");
    const std::int64_t in = dim_of(f, u + "label_emb.0.0.weight", 1);
    if (in <= pooled_dim || (in - pooled_dim) % 6 != 0) {
      fail(f, "label_emb.0.0.weight takes " + std::to_string(in) + " inputs; SDXL's are the pooled text embedding (" +
                  std::to_string(pooled_dim) + ") plus 6 size/crop embeddings");
    }
    j["addition_embed_type"] = "text_time";
    j["addition_time_embed_dim"] = (in - pooled_dim) / 6;
    j["projection_class_embeddings_input_dim"] = in;
  } else if (fam == ModelFamily::sdxl) {
    fail(f, "an SDXL checkpoint without the UNet's label_emb (size/crop conditioning)");
  }
  return j;
}

// Key names of a VAE in the LDM or the diffusers layout, for reading its structure.
struct VaeKeys {
  std::string down, block, mid_attn_q;  // "encoder.down.", ".block.", "decoder.mid.attn_1.q.weight"
};

nlohmann::json infer_vae_config(const io::SafetensorsFile& f, ModelFamily fam, const std::string& prefix,
                                bool diffusers) {
  const VaeKeys k = diffusers
                        ? VaeKeys{"encoder.down_blocks.", ".resnets.", "decoder.mid_block.attentions.0.to_q.weight"}
                        : VaeKeys{"encoder.down.", ".block.", "decoder.mid.attn_1.q.weight"};
  const std::int64_t n = count(f, prefix + k.down);
  if (n == 0) fail(f, "no VAE encoder levels (" + prefix + k.down + "N) found");
  std::vector<std::int64_t> channels;
  for (std::int64_t i = 0; i < n; ++i)
    channels.push_back(dim_of(f, prefix + k.down + num(i) + k.block + "0.conv1.weight", 0));
  const std::int64_t layers = count(f, prefix + k.down + "0" + k.block);
  return {
      {"_class_name", "AutoencoderKL"},
      {"in_channels", dim_of(f, prefix + "encoder.conv_in.weight", 1)},
      {"out_channels", dim_of(f, prefix + "decoder.conv_out.weight", 0)},
      {"latent_channels", dim_of(f, prefix + "decoder.conv_in.weight", 1)},
      {"block_out_channels", channels},
      {"down_block_types", std::vector<std::string>(static_cast<std::size_t>(n), "DownEncoderBlock2D")},
      {"up_block_types", std::vector<std::string>(static_cast<std::size_t>(n), "UpDecoderBlock2D")},
      {"layers_per_block", layers},
      {"norm_num_groups", 32},
      {"act_fn", "silu"},
      {"sample_size", fam == ModelFamily::sd1   ? 512
                      : fam == ModelFamily::sd2 ? 768
                                                : 1024},
      {"scaling_factor", fam == ModelFamily::sdxl ? 0.13025 : 0.18215},
      {"force_upcast", true},
      {"mid_block_add_attention", f.find(prefix + k.mid_attn_q) != nullptr},
      {"use_quant_conv", f.find(prefix + "quant_conv.weight") != nullptr},
      {"use_post_quant_conv", f.find(prefix + "post_quant_conv.weight") != nullptr},
  };
}

nlohmann::json infer_clip_config(const io::SafetensorsFile& f, const std::string& p, bool open_clip, bool sd2,
                                 bool projection) {
  const std::string tok = open_clip ? p + "token_embedding.weight" : p + "text_model.embeddings.token_embedding.weight";
  const std::string pos =
      open_clip ? p + "positional_embedding" : p + "text_model.embeddings.position_embedding.weight";
  const std::string layers_prefix = open_clip ? p + "transformer.resblocks." : p + "text_model.encoder.layers.";
  const std::string fc1 = open_clip ? "mlp.c_fc.weight" : "mlp.fc1.weight";
  const std::int64_t hidden = dim_of(f, tok, 1);
  std::int64_t layers = count(f, layers_prefix);
  if (layers == 0) fail(f, "the text encoder (" + layers_prefix + "N) has no layers");
  if (sd2) --layers;  // SD 2.x uses the penultimate layer: diffusers' encoder drops the last one
  nlohmann::json j = {
      {"architectures", {projection ? "CLIPTextModelWithProjection" : "CLIPTextModel"}},
      {"vocab_size", dim_of(f, tok, 0)},
      {"hidden_size", hidden},
      {"intermediate_size", dim_of(f, layers_prefix + "0." + fc1, 0)},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads_of_64(f, hidden, "the text encoder " + p)},
      {"max_position_embeddings", dim_of(f, pos, 0)},
      {"hidden_act", open_clip ? "gelu" : "quick_gelu"},
      {"layer_norm_eps", 1e-5},
      {"bos_token_id", 0},
      {"eos_token_id", 2},
      {"pad_token_id", 1},
  };
  if (projection) j["projection_dim"] = dim_of(f, p + "text_projection", 1);
  return j;
}

nlohmann::json default_scheduler_config(ModelFamily fam) {
  // The schedulers of the reference repositories (SD 1.5: PNDM, SD 2.1: DDIM with
  // v-prediction, SDXL base: Euler); the sampler the user picks replaces the class.
  nlohmann::json j = {{"beta_start", 0.00085},        {"beta_end", 0.012},       {"beta_schedule", "scaled_linear"},
                      {"num_train_timesteps", 1000},  {"steps_offset", 1},       {"set_alpha_to_one", false},
                      {"clip_sample", false},         {"skip_prk_steps", true},  {"timestep_spacing", "leading"},
                      {"prediction_type", "epsilon"}, {"trained_betas", nullptr}};
  switch (fam) {
    case ModelFamily::sd1: j["_class_name"] = "PNDMScheduler"; break;
    case ModelFamily::sd2:
      j["_class_name"] = "DDIMScheduler";
      j["prediction_type"] = "v_prediction";
      break;
    case ModelFamily::sdxl:
      j["_class_name"] = "EulerDiscreteScheduler";
      j["interpolation_type"] = "linear";
      j["use_karras_sigmas"] = false;
      break;
  }
  return j;
}

std::string dtypes_of(const std::set<std::string>& s) {
  std::string out;
  for (const auto& t : s) out += (out.empty() ? "" : "+") + t;
  return out;
}

}  // namespace

ModelFamily detect_ldm_family(const io::SafetensorsFile& f) {
  const bool unet = has_prefix(f, kUnetPrefix);
  if (has_prefix(f, "conditioner.embedders.1.model.") && has_prefix(f, "conditioner.embedders.0.transformer.")) {
    return ModelFamily::sdxl;
  }
  if (has_prefix(f, "conditioner.embedders.0.model.")) {
    fail(f,
         "this is an SDXL refiner (one OpenCLIP text encoder, conditioner.embedders.0.model.*); only SD 1.x, SD "
         "2.x and SDXL base checkpoints are supported");
  }
  if (has_prefix(f, "cond_stage_model.model.")) return ModelFamily::sd2;
  if (has_prefix(f, "cond_stage_model.transformer.")) return ModelFamily::sd1;
  if (unet) {
    fail(f,
         "the file holds a UNet (model.diffusion_model.*) but no text encoder (cond_stage_model.* or "
         "conditioner.embedders.*); use a complete checkpoint or a diffusers folder");
  }
  if (has_prefix(f, "lora_") || has_prefix(f, "lora.")) fail(f, "this is a LoRA, not a model checkpoint");
  if (has_prefix(f, "down_blocks.") || has_prefix(f, "text_model.") || has_prefix(f, "decoder.") ||
      has_prefix(f, "encoder.")) {
    fail(f,
         "this is one component of a diffusers model (its tensors have diffusers names); pass the diffusers "
         "folder holding model_index.json, or use it as --vae if it is a VAE");
  }
  fail(f,
       "no Stable Diffusion checkpoint keys found (model.diffusion_model.*, first_stage_model.*, "
       "cond_stage_model.* or conditioner.embedders.*); this is not an SD 1.x, SD 2.x or SDXL single file");
}

LdmCheckpoint LdmCheckpoint::open(const fs::path& path) {
  LdmCheckpoint c;
  c.file_ = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(path));
  const io::SafetensorsFile& f = *c.file_;
  c.family_ = detect_ldm_family(f);
  const ModelFamily fam = c.family_;
  const std::string te(ldm_component_prefix(fam, "text_encoder"));
  c.text_encoder_ = infer_clip_config(f, te, fam == ModelFamily::sd2, fam == ModelFamily::sd2, false);
  std::int64_t pooled = 0;
  if (fam == ModelFamily::sdxl) {
    c.text_encoder_2_ =
        infer_clip_config(f, std::string(ldm_component_prefix(fam, "text_encoder_2")), true, false, true);
    pooled = c.text_encoder_2_["projection_dim"].get<std::int64_t>();
  }
  c.unet_ = infer_unet_config(f, fam, pooled);
  if (!has_prefix(f, kVaePrefix)) {
    fail(f, "the checkpoint has no VAE (first_stage_model.*); pass one with --vae");
  }
  c.vae_ = infer_vae_config(f, fam, std::string(kVaePrefix), false);
  c.scheduler_ = default_scheduler_config(fam);

  LdmStructure s;
  s.family = fam;
  const std::string origin = "the built-in " + std::string(model_family_name(fam)) + " config for " + path.string();
  s.unet = UNetConfig::from_json(ConfigJson(c.unet_, origin + " (unet)"));
  s.vae = VaeConfig::from_json(ConfigJson(c.vae_, origin + " (vae)"));
  s.text_layers = c.text_encoder_["num_hidden_layers"].get<int>();
  if (fam == ModelFamily::sdxl) s.text_2_layers = c.text_encoder_2_["num_hidden_layers"].get<int>();
  c.names_ = std::make_shared<const LdmNameMap>(s);
  return c;
}

WeightSource LdmCheckpoint::source(std::string_view component) const {
  const std::string comp(component);
  const std::string prefix(ldm_component_prefix(family_, component));
  std::map<std::string, TensorRef> present;
  for (const auto& e : file_->entries()) {
    if (prefix.empty() || !std::string_view(e.name).starts_with(prefix) || names_->ignored(e.name)) continue;
    for (auto& t : names_->from_ldm(e.name)) {
      if (component_of(t.diffusers) == comp) present.emplace(t.diffusers.substr(comp.size() + 1), std::move(t.ref));
    }
  }
  auto names = names_;
  return WeightSource(file_, comp, std::move(present),
                      [names, comp](const std::string& n) { return names->to_ldm(comp + "." + n); });
}

std::vector<LdmCheckpoint::ComponentInfo> LdmCheckpoint::components() const {
  std::vector<std::string> comps{"unet", "vae", "text_encoder"};
  if (family_ == ModelFamily::sdxl) comps.emplace_back("text_encoder_2");
  std::vector<ComponentInfo> out;
  for (const auto& comp : comps) {
    const std::string prefix(ldm_component_prefix(family_, comp));
    ComponentInfo info{comp, 0, {}};
    std::set<std::string> dt;
    for (const auto& e : file_->entries()) {
      if (!std::string_view(e.name).starts_with(prefix) || names_->ignored(e.name)) continue;
      ++info.tensors;
      dt.insert(std::string(io::file_dtype_name(e.file_dtype)));
    }
    info.dtypes = dtypes_of(dt);
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::string> LdmCheckpoint::unclaimed() const {
  std::vector<std::string> out;
  for (const auto& e : file_->entries()) {
    if (names_->ignored(e.name)) continue;
    bool component_key = false;
    for (std::string_view comp : {"unet", "vae", "text_encoder", "text_encoder_2"}) {
      const std::string_view p = ldm_component_prefix(family_, comp);
      if (!p.empty() && std::string_view(e.name).starts_with(p)) component_key = true;
    }
    if (component_key && names_->from_ldm(e.name).empty()) out.push_back(e.name);
  }
  return out;
}

// ---------------------------------------------------------------------------
// A VAE from one file

VaeFile open_vae_file(const fs::path& path, ModelFamily family) {
  auto file = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(path));
  const io::SafetensorsFile& f = *file;
  std::string prefix;
  bool diffusers = false;
  if (has_prefix(f, kVaePrefix)) {
    prefix = kVaePrefix;
    if (has_prefix(f, "cond_stage_model.") || has_prefix(f, "conditioner.")) family = detect_ldm_family(f);
  } else if (f.find("decoder.up.0.block.0.conv1.weight")) {
    prefix = "";
  } else if (f.find("decoder.up_blocks.0.resnets.0.conv1.weight")) {
    diffusers = true;
  } else {
    fail(f,
         "no VAE found: expected first_stage_model.* (a whole checkpoint), encoder.down.* / decoder.up.* (an "
         "original VAE file) or encoder.down_blocks.* / decoder.up_blocks.* (a diffusers VAE)");
  }
  const nlohmann::json cfg = infer_vae_config(f, family, prefix, diffusers);
  VaeFile out{family, diffusers,
              VaeConfig::from_json(ConfigJson(
                  cfg, "the built-in " + std::string(model_family_name(family)) + " VAE config for " + path.string())),
              std::nullopt};
  if (diffusers) {
    out.source.emplace(std::vector<fs::path>{path});
  } else {
    LdmStructure s;
    s.family = ModelFamily::sd1;  // only the VAE rows are used
    s.vae = out.config;
    s.vae_prefix = prefix;
    auto names = std::make_shared<const LdmNameMap>(s);
    std::map<std::string, TensorRef> present;
    for (const auto& e : f.entries()) {
      if (!std::string_view(e.name).starts_with(prefix)) continue;
      for (auto& t : names->from_ldm(e.name))
        if (component_of(t.diffusers) == "vae") present.emplace(t.diffusers.substr(4), std::move(t.ref));
    }
    out.source.emplace(file, "vae", std::move(present),
                       [names](const std::string& n) { return names->to_ldm("vae." + n); });
  }
  return out;
}

}  // namespace nanscope::models
