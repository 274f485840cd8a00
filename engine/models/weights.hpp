#pragma once
// Loading one model component's weights (a diffusers component folder or a
// single safetensors file) onto a backend in the component's storage dtype.
// Every tensor is checked against the shape the config implies; a missing
// tensor or a shape that disagrees names the file, the tensor and both shapes.

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "io/safetensors.hpp"

namespace nanscope::models {

class WeightSource {
 public:
  // Opens every safetensors file given (a component may be sharded).
  explicit WeightSource(std::vector<std::filesystem::path> files);
  // The safetensors files of a diffusers component folder: prefers
  // diffusion_pytorch_model.safetensors / model.safetensors, then the .fp16 variant
  // when `prefer_fp16`, then any sharded *.safetensors. Pickle-only folders are
  // refused with the reason.
  static WeightSource from_folder(const std::filesystem::path& folder, bool prefer_fp16 = false);

  const io::TensorEntry* find(const std::string& name, const io::SafetensorsFile** file = nullptr) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  std::string describe() const;  // the file name(s), for messages
  std::vector<std::string> names() const;

  // Reads a tensor in host memory, converted to `dtype`, after checking its shape.
  HostTensor read(const std::string& name, const Shape& expected, DType dtype) const;

 private:
  std::vector<std::shared_ptr<io::SafetensorsFile>> files_;
};

// Uploads tensors of one component with a name prefix ("" or e.g. "first_stage_model.")
// and records which were used.
class WeightLoader {
 public:
  WeightLoader(const WeightSource& source, Backend& backend, DType dtype, std::string component);

  Tensor load(const std::string& name, const Shape& expected);
  bool has(const std::string& name) const { return source_.contains(name); }
  HostTensor load_host(const std::string& name, const Shape& expected, DType dtype);
  DType dtype() const { return dtype_; }
  Backend& backend() const { return backend_; }
  const std::string& component() const { return component_; }
  // Logs the tensors of the file that no module used (a sign of a config mismatch).
  void report_unused() const;

 private:
  const WeightSource& source_;
  Backend& backend_;
  DType dtype_;
  std::string component_;
  std::set<std::string> used_;
};

}  // namespace nanscope::models
