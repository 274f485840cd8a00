#include "models/weights.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::models {

namespace fs = std::filesystem;

WeightSource::WeightSource(std::vector<fs::path> files) {
  for (const auto& f : files) files_.push_back(std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(f)));
}

WeightSource::WeightSource(std::shared_ptr<io::SafetensorsFile> file, std::string component,
                           std::map<std::string, TensorRef> present,
                           std::function<std::optional<TensorRef>(const std::string&)> locate)
    : files_{std::move(file)},
      mapped_(std::move(present)),
      locate_(std::move(locate)),
      component_(std::move(component)) {}

WeightSource WeightSource::from_folder(const fs::path& folder, bool prefer_fp16) {
  if (!fs::is_directory(folder)) {
    throw FileError("model folder " + folder.string() + " does not exist or is not a folder");
  }
  std::vector<fs::path> plain, half, pickles;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string n = e.path().filename().string();
    if (n.ends_with(".safetensors")) {
      (n.find(".fp16.") != std::string::npos ? half : plain).push_back(e.path());
    } else if (n.ends_with(".bin") || n.ends_with(".ckpt") || n.ends_with(".pt") || n.ends_with(".pth")) {
      pickles.push_back(e.path());
    }
  }
  std::sort(plain.begin(), plain.end());
  std::sort(half.begin(), half.end());
  std::vector<fs::path> chosen = (prefer_fp16 && !half.empty()) || plain.empty() ? half : plain;
  if (chosen.empty()) {
    if (!pickles.empty()) io::refuse_pickle(pickles.front());
    throw FileError("no .safetensors weights in " + folder.string() +
                    "; a diffusers component folder holds e.g. diffusion_pytorch_model.safetensors");
  }
  return WeightSource(chosen);
}

const io::TensorEntry* WeightSource::find(const std::string& name, const io::SafetensorsFile** file) const {
  if (mapped_) {
    const auto it = mapped_->find(name);
    if (it == mapped_->end()) return nullptr;
    if (file) *file = files_.front().get();
    return files_.front()->find(it->second.key);
  }
  for (const auto& f : files_) {
    if (const auto* e = f->find(name)) {
      if (file) *file = f.get();
      return e;
    }
  }
  return nullptr;
}

std::string WeightSource::describe() const {
  std::string s;
  for (const auto& f : files_) {
    if (!s.empty()) s += ", ";
    s += f->path().string();
  }
  return s;
}

std::vector<std::string> WeightSource::names() const {
  std::vector<std::string> out;
  if (mapped_) {
    for (const auto& [name, ref] : *mapped_) out.push_back(name);
    return out;
  }
  for (const auto& f : files_)
    for (const auto& e : f->entries()) out.push_back(e.name);
  return out;
}

namespace {
std::atomic<std::int64_t> g_tensors_read{0};
}

std::int64_t WeightSource::tensors_read() { return g_tensors_read.load(); }

HostTensor WeightSource::read(const std::string& name, const Shape& expected, DType dtype) const {
  ++g_tensors_read;
  if (mapped_) return read_mapped(name, expected, dtype);
  const io::SafetensorsFile* file = nullptr;
  const io::TensorEntry* e = find(name, &file);
  if (!e) {
    throw FileError("tensor '" + name + "' is missing from " + describe() + " (expected shape " + shape_str(expected) +
                    "); the file does not match the component's config.json");
  }
  if (e->shape != expected) {
    // Linear weights saved as 1x1 convs (and back) are the same numbers.
    if (shape_numel(e->shape) == shape_numel(expected) && e->shape.size() != expected.size()) {
      HostTensor h = file->read(*e, dtype);
      h.shape = expected;
      return h;
    }
    throw FileError("tensor '" + name + "' in " + file->path().string() + " has shape " + shape_str(e->shape) +
                    " but the config implies " + shape_str(expected) +
                    "; check that config.json belongs to these weights");
  }
  return file->read(*e, dtype);
}

HostTensor WeightSource::read_mapped(const std::string& name, const Shape& expected, DType dtype) const {
  const io::SafetensorsFile& f = *files_.front();
  const std::string diffusers = component_ + "." + name;
  const auto it = mapped_->find(name);
  if (it == mapped_->end()) {
    const std::optional<TensorRef> where = locate_ ? locate_(name) : std::nullopt;
    throw FileError("tensor '" + (where ? where->key : std::string("(no LDM name known)")) + "' (diffusers " +
                    diffusers + ", expected shape " + shape_str(expected) + ") is missing from " + f.path().string() +
                    "; the checkpoint is incomplete or its layout is not the standard one for its family");
  }
  const TensorRef& ref = it->second;
  const io::TensorEntry* e = f.find(ref.key);
  if (!e) throw FileError("tensor '" + ref.key + "' (diffusers " + diffusers + ") vanished from " + f.path().string());
  const Shape& s = e->shape;
  const auto mismatch = [&](const std::string& how) {
    throw FileError("tensor '" + ref.key + "' in " + f.path().string() + " (diffusers " + diffusers + ") has shape " +
                    shape_str(s) + " but the model implies " + how +
                    "; the checkpoint's layout differs from the standard one for its family (a merged or pruned "
                    "file with other channel counts?)");
  };
  switch (ref.transform) {
    case TensorRef::Transform::none:
    case TensorRef::Transform::squeeze: {
      if (s == expected) return f.read(*e, dtype);
      // A linear stored as a 1x1 conv (the VAE attention) and back: the same numbers.
      if (shape_numel(s) == shape_numel(expected) && s.size() != expected.size() && !s.empty() && !expected.empty() &&
          s[0] == expected[0]) {
        HostTensor h = f.read(*e, dtype);
        h.shape = expected;
        return h;
      }
      mismatch(shape_str(expected));
      break;
    }
    case TensorRef::Transform::chunk: {
      Shape whole = expected;
      if (!whole.empty()) whole[0] *= ref.chunks;
      if (s != whole) {
        mismatch(shape_str(whole) + " (" + std::to_string(ref.chunks) + " stacked parts of " + shape_str(expected) +
                 ")");
      }
      const HostTensor all = f.read(*e, dtype);
      HostTensor part(expected, dtype);
      const std::size_t bytes = part.data.size();
      std::memcpy(part.data.data(), all.data.data() + static_cast<std::size_t>(ref.chunk) * bytes, bytes);
      return part;
    }
    case TensorRef::Transform::transpose: {
      if (s.size() != 2 || expected.size() != 2 || s[0] != expected[1] || s[1] != expected[0]) {
        mismatch(shape_str(expected) + " stored transposed, " + shape_str(Shape(expected.rbegin(), expected.rend())));
      }
      const HostTensor all = f.read(*e, dtype);
      HostTensor t(expected, dtype);
      const std::size_t es = dtype_size(dtype);
      for (std::int64_t r = 0; r < s[0]; ++r)
        for (std::int64_t c = 0; c < s[1]; ++c)
          std::memcpy(t.data.data() + static_cast<std::size_t>(c * s[0] + r) * es,
                      all.data.data() + static_cast<std::size_t>(r * s[1] + c) * es, es);
      return t;
    }
  }
  mismatch(shape_str(expected));
  return {};
}

WeightLoader::WeightLoader(const WeightSource& source, Backend& backend, DType dtype, std::string component)
    : source_(source), backend_(backend), dtype_(dtype), component_(std::move(component)) {}

Tensor WeightLoader::load(const std::string& name, const Shape& expected) {
  used_.insert(name);
  if (kept_ && reuse_) {
    const auto it = kept_->tensors.find(name);
    if (it != kept_->tensors.end()) return it->second;
  }
  Tensor t = backend_.upload(source_.read(name, expected, dtype_));
  if (kept_) kept_->tensors[name] = t;
  return t;
}

Tensor WeightLoader::load_module_weight(const std::string& module, const Shape& expected,
                                        std::vector<LoraBranch>& branches) {
  const std::string name = module + ".weight";
  const bool patched = patch_ && patch_->patches(module);
  // A weight with a merged delta from the last load is no base weight: read it again.
  if (kept_ && kept_->merged.erase(module)) kept_->tensors.erase(name);
  if (!patched) return load(name, expected);
  used_.insert(name);
  if (patch_->unmerged()) {
    Tensor w = load(name, expected);
    for (const HostLoraBranch& b : patch_->branches(module, expected)) {
      branches.push_back(
          {b.name, backend_.upload(b.down.converted(dtype_)), backend_.upload(b.up.converted(dtype_)), b.scale});
    }
    return w;
  }
  // Merged in f32, then rounded once to the storage dtype: an f16 overflow of
  // the merged weight is this module's Inf, as it would be in any merged checkpoint.
  HostTensor w = source_.read(name, expected, DType::f32);
  patch_->merge(module, w);
  HostTensor stored = w.converted(dtype_);
  std::int64_t overflow = 0;
  for (std::int64_t i = 0; i < stored.numel(); ++i)
    if (!std::isfinite(stored.get(i)) && std::isfinite(w.get(i))) ++overflow;
  if (overflow > 0) patch_->note_overflow(module, overflow, dtype_);
  Tensor t = backend_.upload(stored);
  if (kept_) {
    kept_->tensors[name] = t;
    kept_->merged.insert(module);
  }
  return t;
}

HostTensor WeightLoader::load_host(const std::string& name, const Shape& expected, DType dtype) {
  used_.insert(name);
  return source_.read(name, expected, dtype);
}

void WeightLoader::load_host_into(const std::string& name, const Shape& expected, DType dtype, HostTensor& into) {
  if (reuse_ && !into.data.empty() && into.shape == expected && into.dtype == dtype) {
    used_.insert(name);
    return;
  }
  into = load_host(name, expected, dtype);
}

void WeightLoader::report_unused() const {
  std::vector<std::string> unused;
  for (const auto& n : source_.names())
    if (!used_.count(n)) unused.push_back(n);
  if (unused.empty()) return;
  log::warn("{}: {} tensors in {} are not used by the model (first: {}); the config may not match the weights",
            component_, unused.size(), source_.describe(), unused.front());
}

}  // namespace nanscope::models
