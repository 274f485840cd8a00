#pragma once
// The reference backend: plain C++ on the host, ground truth for every other
// backend and the fallback when no OpenCL device exists. Sums run in double
// (accumulate=f32) and are rounded once at the store, or follow the
// storage-dtype rounding rules of op_args.hpp exactly (accumulate=native).
// Speed is secondary to being obviously right; long loops are split over a
// few threads (results do not depend on the split).

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"

namespace nanscope::reference {

// A host buffer holding the elements in the storage dtype's bit format
// (raw f32, f16 or bf16 words), exactly what a download returns.
class HostStorage final : public Storage {
 public:
  HostStorage(const void* owner, std::size_t bytes);
  std::size_t bytes() const override { return data_.size(); }
  const void* owner() const override { return owner_; }
  std::uint8_t* data() { return data_.data(); }
  const std::uint8_t* data() const { return data_.data(); }

 private:
  const void* owner_;
  std::vector<std::uint8_t> data_;
};

class ReferenceBackend final : public Backend {
 public:
  // memory_limit_bytes, max_alloc_limit_bytes: as BackendOptions's (0: physical memory, no cap).
  explicit ReferenceBackend(std::uint64_t memory_limit_bytes = 0, std::uint64_t max_alloc_limit_bytes = 0);

  const DeviceInfo& device() const override { return info_; }
  Tensor empty(const Shape& shape, DType dtype) override;
  Tensor upload(const HostTensor& host) override;
  HostTensor download(const Tensor& t) override;

  void matmul(const MatmulArgs& args) override;
  void conv2d(const Conv2dArgs& args) override;
  void group_norm(const GroupNormArgs& args) override;
  void layer_norm(const LayerNormArgs& args) override;
  void unary(const UnaryArgs& args) override;
  void geglu(const GegluArgs& args) override;
  void softmax(const SoftmaxArgs& args) override;
  void upsample_nearest2x(const UpsampleArgs& args) override;
  void binary(const BinaryArgs& args) override;
  void concat(const ConcatArgs& args) override;
  void slice(const SliceArgs& args) override;
  void permute(const PermuteArgs& args) override;
  void cast(const CastArgs& args) override;
  void timestep_embedding(const TimestepEmbeddingArgs& args) override;
  void attention(const AttentionArgs& args) override;
  void latent_step(const LatentStepArgs& args) override;
  StepReductions reduce_step(std::span<const MapReduceArgs> maps, const LatentPreviewArgs* preview) override;

 private:
  DeviceInfo info_;
};

}  // namespace nanscope::reference
