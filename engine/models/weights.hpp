#pragma once
// Loading one model component's weights (a diffusers component folder or a
// single safetensors file) onto a backend in the component's storage dtype.
// Every tensor is checked against the shape the config implies; a missing
// tensor or a shape that disagrees names the file, the tensor and both shapes.

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "io/safetensors.hpp"

namespace nanscope::models {

// Where a diffusers tensor is in a file that names (and may store) it
// differently: an original LDM checkpoint.
struct TensorRef {
  enum class Transform : std::uint8_t {
    none,       // same numbers, same layout (a 1x1 conv may stand for a linear and back)
    squeeze,    // a linear weight [out, in] stored as a 1x1 convolution [out, in, 1, 1]
    chunk,      // rows [chunk * n, (chunk + 1) * n) of dim 0, n = dim 0 / chunks (fused q/k/v)
    transpose,  // a 2-D tensor stored transposed
  };
  std::string key;
  Transform transform = Transform::none;
  int chunk = 0, chunks = 1;
  friend bool operator==(const TensorRef&, const TensorRef&) = default;
};

class WeightSource {
 public:
  // Opens every safetensors file given (a component may be sharded).
  explicit WeightSource(std::vector<std::filesystem::path> files);
  // The safetensors files of a diffusers component folder: prefers
  // diffusion_pytorch_model.safetensors / model.safetensors, then the .fp16 variant
  // when `prefer_fp16`, then any sharded *.safetensors. Pickle-only folders are
  // refused with the reason.
  static WeightSource from_folder(const std::filesystem::path& folder, bool prefer_fp16 = false);
  // One component of a file with other names: `present` maps each diffusers
  // name found in the file to its tensor; `locate` says where a diffusers name
  // would be (for the message when it is missing). `component` is the
  // diffusers component ("unet"), named in messages.
  WeightSource(std::shared_ptr<io::SafetensorsFile> file, std::string component,
               std::map<std::string, TensorRef> present,
               std::function<std::optional<TensorRef>(const std::string&)> locate);

  const io::TensorEntry* find(const std::string& name, const io::SafetensorsFile** file = nullptr) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  std::string describe() const;  // the file name(s), for messages
  std::vector<std::string> names() const;

  // Reads a tensor in host memory, converted to `dtype`, after checking its shape.
  HostTensor read(const std::string& name, const Shape& expected, DType dtype) const;
  // Tensors read by every WeightSource of the process so far: what a LoRA
  // change costs in file reads (SdModel::apply_loras; tests/test_lora.cpp).
  static std::int64_t tensors_read();

 private:
  HostTensor read_mapped(const std::string& name, const Shape& expected, DType dtype) const;

  std::vector<std::shared_ptr<io::SafetensorsFile>> files_;
  // Set for a renamed source (one file).
  std::optional<std::map<std::string, TensorRef>> mapped_;
  std::function<std::optional<TensorRef>(const std::string&)> locate_;
  std::string component_;
};

// One low-rank branch a module computes beside its own op (a LoRA applied
// unmerged, models/lora.hpp): y = op(x) + scale * up(down(x)), traced as the
// module's child `name` ("lora", or "lora.1" with several LoRAs).
struct LoraBranch {
  std::string name;
  Tensor down,
      up;  // Linear: [r, in], [out, r]; Conv2d: [r, in, k, k] (the module's stride and padding), [out, r, 1, 1]
  float scale = 1.0f;
};
struct HostLoraBranch {
  std::string name;
  HostTensor down, up;  // f32
  float scale = 1.0f;
};

// Changes a component's Linear and Conv2d weights as they load (models/lora.hpp).
// `module` is the diffusers path inside the component ("down_blocks.0.attentions.0.proj_in").
class WeightPatch {
 public:
  virtual ~WeightPatch() = default;
  virtual bool unmerged() const = 0;
  virtual bool patches(const std::string& module) = 0;
  // Merge: adds the module's deltas to `weight` (f32, the module's weight shape).
  virtual void merge(const std::string& module, HostTensor& weight) = 0;
  // Unmerged: the module's branches, checked against its weight shape.
  virtual std::vector<HostLoraBranch> branches(const std::string& module, const Shape& weight_shape) = 0;
  // Merge: `count` values of the merged weight overflowed the storage dtype.
  virtual void note_overflow(const std::string& module, std::int64_t count, DType dtype) = 0;
};

// What a component's load uploaded, kept with the model so that another LoRA
// list re-applies only the modules a LoRA patches (before or now) instead of
// reading every file again (pipeline/sd_model.hpp SdModel::apply_loras).
struct LoadedWeights {
  std::map<std::string, Tensor> tensors;  // name -> the uploaded tensor (shared with the model)
  std::set<std::string> merged;           // modules whose uploaded weight carries a merged LoRA delta
};

// Uploads tensors of one component with a name prefix ("" or e.g. "first_stage_model.")
// and records which were used.
class WeightLoader {
 public:
  WeightLoader(const WeightSource& source, Backend& backend, DType dtype, std::string component);

  Tensor load(const std::string& name, const Shape& expected);
  // A Linear's or Conv2d's "<module>.weight", with the patch (LoRA) applied:
  // merged into the weight, or as branches the module computes (unmerged).
  Tensor load_module_weight(const std::string& module, const Shape& expected, std::vector<LoraBranch>& branches);
  void set_patch(WeightPatch* patch) { patch_ = patch; }
  // Records every uploaded tensor in `kept`. With `reuse`, a tensor `kept`
  // already holds is returned without reading it, except the weights of
  // modules a patch changes now or changed before (those are read from the
  // file again and patched as in a fresh load, so the result is the same bits).
  void keep(LoadedWeights* kept, bool reuse) {
    kept_ = kept;
    reuse_ = reuse;
  }
  bool has(const std::string& name) const { return source_.contains(name); }
  HostTensor load_host(const std::string& name, const Shape& expected, DType dtype);
  // load_host into `into`; when reusing, a tensor `into` already holds is kept as it is.
  void load_host_into(const std::string& name, const Shape& expected, DType dtype, HostTensor& into);
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
  WeightPatch* patch_ = nullptr;
  LoadedWeights* kept_ = nullptr;
  bool reuse_ = false;
};

}  // namespace nanscope::models
