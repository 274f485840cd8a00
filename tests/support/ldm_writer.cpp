// The LDM single-file writer the tests use to make checkpoints from
// diffusers folders (the product only reads single files).
#include "support/ldm_writer.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "models/clip_text.hpp"
#include "models/config_json.hpp"
#include "models/unet.hpp"
#include "models/vae.hpp"

namespace nanscope::test {

namespace fs = std::filesystem;

namespace {

HostTensor transposed(const HostTensor& t) {
  HostTensor out({t.shape[1], t.shape[0]}, t.dtype);
  const std::size_t es = dtype_size(t.dtype);
  for (std::int64_t r = 0; r < t.shape[0]; ++r)
    for (std::int64_t c = 0; c < t.shape[1]; ++c)
      std::memcpy(out.data.data() + static_cast<std::size_t>(c * t.shape[0] + r) * es,
                  t.data.data() + static_cast<std::size_t>(r * t.shape[1] + c) * es, es);
  return out;
}

}  // namespace

void write_ldm_checkpoint(const fs::path& path, const models::LdmNameMap& names,
                          const std::vector<std::pair<std::string, HostTensor>>& tensors) {
  std::map<std::string, HostTensor> out;
  std::map<std::string, std::vector<std::pair<int, const HostTensor*>>> chunks;
  for (const auto& [name, t] : tensors) {
    const auto ref = names.to_ldm(name);
    if (!ref) {
      throw FileError("cannot write " + path.string() + ": no " +
                      std::string(models::model_family_name(names.family())) +
                      " table row covers the diffusers tensor '" + name + "'");
    }
    switch (ref->transform) {
      case models::TensorRef::Transform::none: out[ref->key] = t; break;
      case models::TensorRef::Transform::squeeze: {
        HostTensor c = t;
        if (c.shape.size() == 2) c.shape = {c.shape[0], c.shape[1], 1, 1};
        out[ref->key] = std::move(c);
        break;
      }
      case models::TensorRef::Transform::transpose: out[ref->key] = transposed(t); break;
      case models::TensorRef::Transform::chunk: chunks[ref->key].emplace_back(ref->chunk, &t); break;
    }
  }
  for (auto& [key, parts] : chunks) {
    std::sort(parts.begin(), parts.end());
    if (parts.size() != 3 || parts[0].first != 0 || parts[2].first != 2) {
      throw FileError("cannot write " + path.string() + ": '" + key + "' needs the q, k and v tensors");
    }
    HostTensor whole = *parts[0].second;
    whole.shape[0] *= 3;
    for (int i = 1; i < 3; ++i)
      whole.data.insert(whole.data.end(), parts[i].second->data.begin(), parts[i].second->data.end());
    out[key] = std::move(whole);
  }
  if (names.family() == models::ModelFamily::sd2) {
    // Original SD 2.x files carry what the model skips: the last OpenCLIP layer
    // (written as a copy of the one before) and the text projection (identity).
    const std::string te(models::ldm_component_prefix(models::ModelFamily::sd2, "text_encoder"));
    if (const auto it = out.find(te + "ln_final.weight"); it != out.end()) {
      const std::int64_t h = it->second.shape[0];
      HostTensor eye({h, h}, it->second.dtype);
      for (std::int64_t i = 0; i < h; ++i) eye.set(i * h + i, 1.0f);
      out[te + "text_projection"] = std::move(eye);
    }
    const std::string p = te + "transformer.resblocks.";
    std::int64_t last = -1;
    for (const auto& [key, t] : out) {
      if (!std::string_view(key).starts_with(p)) continue;
      last = std::max<std::int64_t>(last, std::stoll(key.substr(p.size(), key.find('.', p.size()) - p.size())));
    }
    if (last >= 0) {
      const std::string from = p + std::to_string(last) + ".", to = p + std::to_string(last + 1) + ".";
      std::vector<std::pair<std::string, HostTensor>> extra;
      for (const auto& [key, t] : out)
        if (std::string_view(key).starts_with(from)) extra.emplace_back(to + key.substr(from.size()), t);
      for (auto& e : extra) out.insert(std::move(e));
    }
  }
  std::vector<std::pair<std::string, HostTensor>> ordered(out.begin(), out.end());
  io::write_safetensors(path, ordered);
}

models::LdmStructure folder_structure(const fs::path& folder, models::ModelFamily f) {
  models::LdmStructure s;
  s.family = f;
  s.unet = models::UNetConfig::from_json(models::ConfigJson::load(folder / "unet" / "config.json"));
  s.vae = models::VaeConfig::from_json(models::ConfigJson::load(folder / "vae" / "config.json"));
  s.text_layers =
      models::ClipTextConfig::from_json(models::ConfigJson::load(folder / "text_encoder" / "config.json")).layers;
  if (f == models::ModelFamily::sdxl) {
    s.text_2_layers =
        models::ClipTextConfig::from_json(models::ConfigJson::load(folder / "text_encoder_2" / "config.json")).layers;
  }
  return s;
}

void write_ldm_copy(const fs::path& folder, models::ModelFamily f, const fs::path& file) {
  std::vector<std::string> components = {"unet", "vae", "text_encoder"};
  if (f == models::ModelFamily::sdxl) components.emplace_back("text_encoder_2");
  std::vector<std::pair<std::string, HostTensor>> tensors;
  for (const auto& comp : components) {
    const fs::path dir = folder / comp;
    const fs::path st_path =
        fs::exists(dir / "model.safetensors") ? dir / "model.safetensors" : dir / "diffusion_pytorch_model.safetensors";
    const auto st = io::SafetensorsFile::open(st_path);
    for (const auto& e : st.entries()) tensors.emplace_back(comp + "." + e.name, st.read(e, DType::f32));
  }
  fs::create_directories(file.parent_path());
  write_ldm_checkpoint(file, models::LdmNameMap(folder_structure(folder, f)), tensors);
  fs::copy(folder / "tokenizer", file.parent_path() / "tokenizer", fs::copy_options::recursive);
  if (f == models::ModelFamily::sdxl) {
    fs::copy(folder / "tokenizer_2", file.parent_path() / "tokenizer_2", fs::copy_options::recursive);
  }
}

}  // namespace nanscope::test
