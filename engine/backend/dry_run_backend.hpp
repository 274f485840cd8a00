#pragma once
// A backend that stands in for a real one while a model call runs on it: it
// has the real device's limits, accepts the real backend's tensors (the
// weights) as its own, allocates nothing and launches nothing. Its buffers
// exist only as sizes, and it keeps the bytes live at once and the peak.
// Subclasses watch what a model call would do: the memory plan
// (pipeline/memory_plan.cpp) looks at the buffers, the device probe
// (studies/device_probe.cpp) records every op call with its shapes and
// parameters. Every op is a virtual no-op here.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.hpp"

namespace nanscope {

class DryRunBackend : public Backend {
 public:
  explicit DryRunBackend(const Backend& real) : real_(real), owner_(static_cast<const Backend*>(&real)) {}

  const DeviceInfo& device() const override { return real_.device(); }
  // A buffer of that size that holds nothing (counted as live until released).
  Tensor empty(const Shape& shape, DType dtype) override;
  Tensor upload(const HostTensor& host) override { return empty(host.shape, host.dtype); }
  HostTensor download(const Tensor& t) override { return HostTensor(t.shape(), t.dtype()); }

  void matmul(const MatmulArgs&) override {}
  // As the real backend: the calls it stands in for fuse what the real ones do.
  bool linear_fuses_epilogue(MatmulEpilogue e, const Precision& p, std::int64_t m, std::int64_t n, std::int64_t k,
                             bool bias) const override {
    return real_.linear_fuses_epilogue(e, p, m, n, k, bias);
  }
  void conv2d(const Conv2dArgs&) override {}
  void group_norm(const GroupNormArgs&) override {}
  void layer_norm(const LayerNormArgs&) override {}
  void unary(const UnaryArgs&) override {}
  void geglu(const GegluArgs&) override {}
  void softmax(const SoftmaxArgs&) override {}
  void upsample_nearest2x(const UpsampleArgs&) override {}
  void binary(const BinaryArgs&) override {}
  void concat(const ConcatArgs&) override {}
  void slice(const SliceArgs&) override {}
  void permute(const PermuteArgs&) override {}
  void cast(const CastArgs&) override {}
  void timestep_embedding(const TimestepEmbeddingArgs&) override {}
  void attention(const AttentionArgs&) override {}
  void latent_step(const LatentStepArgs&) override {}
  StepReductions reduce_step(std::span<const MapReduceArgs> maps, const LatentPreviewArgs* preview) override {
    StepReductions r{std::vector<MapReduction>(maps.size()), std::nullopt};
    if (preview) r.preview.emplace();
    return r;
  }

  // Bytes of this stand-in's buffers alive now, and the most alive at once
  // since the last reset_peak().
  std::uint64_t live() const { return ledger_->live; }
  std::uint64_t peak() const { return ledger_->peak; }
  void reset_peak() { ledger_->peak = ledger_->live; }

 protected:
  const void* storage_owner() const override { return owner_; }

 protected:
  const Backend& real() const { return real_; }

 private:
  struct Ledger {
    std::uint64_t live = 0, peak = 0;
  };
  class SizeOnlyStorage;

  const Backend& real_;
  const void* owner_;
  std::shared_ptr<Ledger> ledger_ = std::make_shared<Ledger>();
};

}  // namespace nanscope
