// The LDM single-file writer the tests use to make checkpoints from
// diffusers folders (the product only reads single files).
#include "support/ldm_writer.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "io/safetensors.hpp"

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

}  // namespace nanscope::test
