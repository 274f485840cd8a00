#include "models/weights.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::models {

namespace fs = std::filesystem;

WeightSource::WeightSource(std::vector<fs::path> files) {
  for (const auto& f : files) files_.push_back(std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(f)));
}

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
  for (const auto& f : files_)
    for (const auto& e : f->entries()) out.push_back(e.name);
  return out;
}

HostTensor WeightSource::read(const std::string& name, const Shape& expected, DType dtype) const {
  const io::SafetensorsFile* file = nullptr;
  const io::TensorEntry* e = find(name, &file);
  if (!e) {
    throw FileError("tensor '" + name + "' is missing from " + describe() + " (expected shape " +
                    shape_str(expected) + "); the file does not match the component's config.json");
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

WeightLoader::WeightLoader(const WeightSource& source, Backend& backend, DType dtype, std::string component)
    : source_(source), backend_(backend), dtype_(dtype), component_(std::move(component)) {}

Tensor WeightLoader::load(const std::string& name, const Shape& expected) {
  used_.insert(name);
  return backend_.upload(source_.read(name, expected, dtype_));
}

HostTensor WeightLoader::load_host(const std::string& name, const Shape& expected, DType dtype) {
  used_.insert(name);
  return source_.read(name, expected, dtype);
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
