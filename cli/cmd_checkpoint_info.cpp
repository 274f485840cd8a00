// nanscope-cli info FILE.safetensors: what a single-file checkpoint holds, as
// the engine reads it: family, components with tensor counts and dtypes, and
// the configs inferred from the tensors.

#include <cstdio>
#include <string>

#include "models/ldm_checkpoint.hpp"

namespace nanscope::cli {

int run_checkpoint_info(const std::string& path) {
  const models::LdmCheckpoint ckpt = models::LdmCheckpoint::open(path);
  const models::ModelFamily f = ckpt.family();
  std::printf("%s: %.*s single-file checkpoint (original LDM names), %zu tensors\n", path.c_str(),
              static_cast<int>(models::model_family_name(f).size()), models::model_family_name(f).data(),
              ckpt.file().entries().size());
  std::printf("\n  %-16s %8s  %-8s %s\n", "component", "tensors", "dtype", "LDM prefix");
  std::size_t claimed = 0;
  for (const auto& c : ckpt.components()) {
    const std::string_view prefix = models::ldm_component_prefix(f, c.name);
    std::printf("  %-16s %8zu  %-8s %.*s\n", c.name.c_str(), c.tensors, c.dtypes.c_str(),
                static_cast<int>(prefix.size()), prefix.data());
    claimed += c.tensors;
  }
  const auto unclaimed = ckpt.unclaimed();
  std::printf("  %-16s %8zu  (EMA copies, schedule buffers, unused text layers: not loaded)\n", "other",
              ckpt.file().entries().size() - claimed - unclaimed.size());
  if (!unclaimed.empty()) {
    std::printf("  %zu tensors under a component prefix have no diffusers name (first: %s)\n", unclaimed.size(),
                unclaimed.front().c_str());
  }
  const auto& u = ckpt.unet_config();
  std::printf(
      "\nunet: block_out_channels %s, layers_per_block %s, attention_head_dim %s, cross_attention_dim %s, "
      "transformer_layers_per_block %s, use_linear_projection %s\n",
      u["block_out_channels"].dump().c_str(), u["layers_per_block"].dump().c_str(),
      u["attention_head_dim"].dump().c_str(), u["cross_attention_dim"].dump().c_str(),
      u["transformer_layers_per_block"].dump().c_str(), u["use_linear_projection"].dump().c_str());
  const auto& v = ckpt.vae_config();
  std::printf("vae: block_out_channels %s, latent_channels %s, scaling_factor %s\n",
              v["block_out_channels"].dump().c_str(), v["latent_channels"].dump().c_str(),
              v["scaling_factor"].dump().c_str());
  const auto clip = [](const char* name, const nlohmann::json& t) {
    if (t.is_null()) return;
    std::printf("%s: hidden_size %s, layers %s, heads %s, hidden_act %s, vocab_size %s\n", name,
                t["hidden_size"].dump().c_str(), t["num_hidden_layers"].dump().c_str(),
                t["num_attention_heads"].dump().c_str(), t["hidden_act"].get<std::string>().c_str(),
                t["vocab_size"].dump().c_str());
  };
  clip("text_encoder", ckpt.text_encoder_config());
  clip("text_encoder_2", ckpt.text_encoder_2_config());
  const auto& s = ckpt.scheduler_config();
  std::printf("scheduler: %s, prediction_type %s (built-in default for the family)\n",
              s["_class_name"].get<std::string>().c_str(), s["prediction_type"].get<std::string>().c_str());
  return 0;
}

}  // namespace nanscope::cli
