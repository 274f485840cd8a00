#include "core/tensor.hpp"

#include <cstring>

#include "core/error.hpp"

namespace nanscope {

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

Tensor::Tensor(Shape shape, DType dtype, std::shared_ptr<Storage> storage)
    : shape_(std::move(shape)), dtype_(dtype), storage_(std::move(storage)) {
  for (auto d : shape_) {
    if (d < 0) throw OpError("tensor shape " + shape_str(shape_) + " has a negative dimension");
  }
  if (storage_ && storage_->bytes() < bytes()) {
    throw OpError("tensor " + describe() + " needs " + std::to_string(bytes()) + " bytes but its buffer has " +
                  std::to_string(storage_->bytes()));
  }
}

std::int64_t Tensor::dim(int i) const {
  const int r = rank();
  const int j = i < 0 ? i + r : i;
  if (j < 0 || j >= r) {
    throw OpError("dimension " + std::to_string(i) + " is out of range for tensor " + describe());
  }
  return shape_[static_cast<std::size_t>(j)];
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel()) {
    throw OpError("cannot reshape " + describe() + " to " + shape_str(shape) + ": element counts differ");
  }
  return Tensor(std::move(shape), dtype_, storage_);
}

std::string Tensor::describe() const { return shape_str(shape_) + " " + std::string(dtype_name(dtype_)); }

HostTensor::HostTensor(Shape s, DType t)
    : shape(std::move(s)), dtype(t), data(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(t), 0) {}

HostTensor HostTensor::from_f32(Shape s, const std::vector<float>& values, DType t) {
  HostTensor h(std::move(s), t);
  if (static_cast<std::int64_t>(values.size()) != h.numel()) {
    throw OpError("HostTensor::from_f32: " + std::to_string(values.size()) + " values for shape " + shape_str(h.shape));
  }
  for (std::size_t i = 0; i < values.size(); ++i) h.set(static_cast<std::int64_t>(i), values[i]);
  return h;
}

float HostTensor::get(std::int64_t i) const {
  const auto k = static_cast<std::size_t>(i);
  switch (dtype) {
    case DType::f32: {
      float f;
      std::memcpy(&f, data.data() + 4 * k, 4);
      return f;
    }
    case DType::f16: {
      std::uint16_t b;
      std::memcpy(&b, data.data() + 2 * k, 2);
      return f16_bits_to_f32(b);
    }
    case DType::bf16: {
      std::uint16_t b;
      std::memcpy(&b, data.data() + 2 * k, 2);
      return bf16_bits_to_f32(b);
    }
  }
  return 0.0f;
}

void HostTensor::set(std::int64_t i, float v) {
  const auto k = static_cast<std::size_t>(i);
  switch (dtype) {
    case DType::f32: std::memcpy(data.data() + 4 * k, &v, 4); break;
    case DType::f16: {
      const std::uint16_t b = f32_to_f16_bits(v);
      std::memcpy(data.data() + 2 * k, &b, 2);
      break;
    }
    case DType::bf16: {
      const std::uint16_t b = f32_to_bf16_bits(v);
      std::memcpy(data.data() + 2 * k, &b, 2);
      break;
    }
  }
}

std::vector<float> HostTensor::to_f32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = get(static_cast<std::int64_t>(i));
  return out;
}

HostTensor HostTensor::converted(DType t) const {
  if (t == dtype) return *this;
  HostTensor out(shape, t);
  convert_elements(data.data(), dtype, out.data.data(), t, static_cast<std::size_t>(numel()));
  return out;
}

std::string HostTensor::describe() const { return shape_str(shape) + " " + std::string(dtype_name(dtype)); }

}  // namespace nanscope
