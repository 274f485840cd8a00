#pragma once
// Tensors: a shape, a storage dtype and a buffer owned by one backend.
// Tensors are always contiguous (row-major, last dimension fastest) and start
// at the beginning of their storage; ops that slice copy.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace nanscope {

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2,320,64,64]"

// A backend's buffer. Each backend subclasses it; a backend refuses tensors
// whose storage is not its own (work never silently moves between devices).
class Storage {
 public:
  virtual ~Storage() = default;
  virtual std::size_t bytes() const = 0;
  // The backend instance that owns this buffer.
  virtual const void* owner() const = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, DType dtype, std::shared_ptr<Storage> storage);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // Size of dimension i; negative i counts from the end.
  std::int64_t dim(int i) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  Storage* storage() const { return storage_.get(); }
  const std::shared_ptr<Storage>& storage_ptr() const { return storage_; }

  // The same buffer under another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  std::string describe() const;  // "[2,320,64,64] f16"

 private:
  Shape shape_;
  DType dtype_ = DType::f32;
  std::shared_ptr<Storage> storage_;
};

// A tensor in host memory, in its storage format (raw f32, f16 or bf16 bits).
// Used for uploads, downloads, files and tests.
struct HostTensor {
  Shape shape;
  DType dtype = DType::f32;
  std::vector<std::uint8_t> data;

  HostTensor() = default;
  HostTensor(Shape s, DType t);  // zero-filled
  // Values rounded (RNE) into dtype t.
  static HostTensor from_f32(Shape s, const std::vector<float>& values, DType t = DType::f32);

  std::int64_t numel() const { return shape_numel(shape); }
  float get(std::int64_t i) const;
  void set(std::int64_t i, float v);  // rounds to dtype
  std::vector<float> to_f32() const;
  HostTensor converted(DType t) const;
  std::string describe() const;
};

}  // namespace nanscope
