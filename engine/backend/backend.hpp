#pragma once
// The backend interface. Two implementations: `reference` (plain C++, f64
// accumulation; ground truth and fallback) and `opencl` (any ICD device).
// Backends receive checked arguments from engine/ops and never see Qt.

#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/device.hpp"
#include "backend/map_reduce.hpp"
#include "backend/op_args.hpp"
#include "core/tensor.hpp"

namespace nanscope {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const DeviceInfo& device() const = 0;

  // Allocation and transfer. Throws DeviceError naming the size and device when
  // the device cannot hold the buffer.
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  virtual Tensor upload(const HostTensor& host) = 0;
  virtual HostTensor download(const Tensor& t) = 0;
  // Waits for queued work (no-op on the reference backend).
  virtual void synchronize() {}

  virtual void matmul(const MatmulArgs& args) = 0;
  virtual void conv2d(const Conv2dArgs& args) = 0;
  virtual void group_norm(const GroupNormArgs& args) = 0;
  virtual void layer_norm(const LayerNormArgs& args) = 0;
  virtual void unary(const UnaryArgs& args) = 0;
  virtual void geglu(const GegluArgs& args) = 0;
  virtual void softmax(const SoftmaxArgs& args) = 0;
  virtual void upsample_nearest2x(const UpsampleArgs& args) = 0;
  virtual void binary(const BinaryArgs& args) = 0;
  virtual void concat(const ConcatArgs& args) = 0;
  virtual void slice(const SliceArgs& args) = 0;
  virtual void permute(const PermuteArgs& args) = 0;
  virtual void cast(const CastArgs& args) = 0;
  virtual void timestep_embedding(const TimestepEmbeddingArgs& args) = 0;
  virtual void attention(const AttentionArgs& args) = 0;
  virtual void latent_step(const LatentStepArgs& args) = 0;

  // A LINEAR weight the caller keeps unchanged, prepared now for calls at
  // precision p instead of at its first call: the CPU kernels' packed panels
  // (a model's load, so that its first step runs at the speed of the next).
  // Nothing for backends that keep nothing. `geglu`: its calls take the
  // GEGLU epilogue (MatmulEpilogue::geglu: a feed-forward's projection).
  virtual void prepare_linear_weight(const Tensor& weight, const Precision& p, bool geglu) {}

  // The inspector's reductions (map_reduce.hpp): computed where the tensor
  // lives, only the result is read back.
  // A step's maps and, when `preview` is given, its latent preview, with one
  // wait on the device for all of them.
  virtual StepReductions reduce_step(std::span<const MapReduceArgs> maps, const LatentPreviewArgs* preview) = 0;
  std::vector<MapReduction> map_reduce_batch(std::span<const MapReduceArgs> maps) {
    return reduce_step(maps, nullptr).maps;
  }
  MapReduction map_reduce(const MapReduceArgs& args) { return map_reduce_batch({&args, 1}).front(); }
  PreviewReduction latent_preview(const LatentPreviewArgs& args) { return *reduce_step({}, &args).preview; }
  // Total time the reductions above spent waiting for the device to finish
  // queued work (an asynchronous device runs the step's kernels meanwhile), so
  // a caller can tell the inspector's own time from the step's.
  virtual double inspect_wait_seconds() const { return 0; }

  // The kernel programs this backend has loaded or built so far, oldest
  // first, and the folder its program cache lives in ("" for a backend with
  // no kernels or no cache).
  virtual std::vector<KernelBuildRecord> kernel_builds() const { return {}; }
  virtual std::string kernel_cache_dir() const { return {}; }
  // The programs a run in these precisions needs and which must be built
  // first, with an estimate (KernelPlan). `calls` (a dry run's, when
  // recorded) picks the variants that follow the shapes. Until every planned
  // program is built, each build event carries its place in the plan
  // (KernelBuildEvent::progress). Empty for a backend without kernels.
  virtual KernelPlan plan_kernels(std::span<const Precision> /*precisions*/, const KernelCalls& /*calls*/) {
    return {};
  }
  // Builds the plan's programs that are not cached yet, several at once where
  // the driver allows (a cold build is seconds of single-threaded compiler
  // work each; built lazily they would run one after another). A failed build
  // is left for the op that needs it to report. No-op without kernels.
  virtual void build_planned(const KernelPlan& /*plan*/) {}
  // Which kernels ran, in plain English: the kernel family and every fallback
  // taken so far with its reason (e.g. "flash attention not used: causal
  // mask"). Each note once. Recorded in run reports.
  virtual std::vector<std::string> kernel_notes() const { return {}; }
  // True when native half arithmetic in this precision (f16 storage with
  // accumulate=native or softmax=native) runs on the device's own half units
  // rather than the exact emulation: the layer trace says so per op.
  virtual bool native_half_in_hardware(const Precision& /*p*/) const { return false; }
  // True when this convolution runs as Winograd F(4x4, 3x3) here (the CPU
  // kernel family's 3x3 stride-1 convolutions with f32 accumulation): sums
  // further from the exact ones than the direct path's, which the device
  // probe judges by their own tolerance.
  virtual bool conv2d_winograd(const Conv2dArgs& /*args*/) const { return false; }
  // True when matmul() applies `epilogue` inside the product for LINEAR's problem (x [m, k] row-major, its own
  // weight [n, k], bias [n] if `bias`; GEGLU: n the product's width) at this precision. The ops ask first
  // (ops::linear_geglu) and run the two ops where it does not: matmul() is never given an epilogue
  // it cannot apply, and every buffer a call needs is one the memory plan sees.
  virtual bool linear_fuses_epilogue(MatmulEpilogue /*epilogue*/, const Precision& /*p*/, std::int64_t /*m*/,
                                     std::int64_t /*n*/, std::int64_t /*k*/, bool /*bias*/) const {
    return false;
  }
  // Out-of-bounds writes the guard buffers caught since the last call
  // (BackendOptions::guard_bytes), one message each naming the buffer; the
  // list is cleared. Buffers are checked when released.
  virtual std::vector<std::string> take_guard_violations() { return {}; }

  // Device memory held by this backend's live buffers (weights, activations,
  // scratch), for memory plans and leak checks; 0 where it is not tracked.
  virtual std::uint64_t allocated_bytes() const { return 0; }
  // Caps what this backend may still take for caches of its own (the OpenCL
  // CPU family's packed LINEAR weights) at `bytes` more than they hold now:
  // the memory plan gives it what the planned run leaves free, so a size the
  // plan accepts never runs out of memory because of a cache.
  virtual void limit_cache_growth(std::uint64_t /*bytes*/) {}
  // The bytes of those caches (within allocated_bytes), and giving them all
  // back: they count as resident in a memory plan, which gives them back
  // when that makes the difference between refusing a size (or tiling a
  // decode) and not. release_caches returns what allocated_bytes drops by.
  virtual std::uint64_t cache_bytes() const { return 0; }
  virtual std::uint64_t release_caches() { return 0; }

  // A call that repeats with the same buffers in the same order (a UNet call,
  // a VAE decode) begins and ends; `key` tells its kinds apart (the model,
  // the input's shape and dtype, traced or not). The OpenCL backend serves a
  // repeated key's buffers from one arena planned from its previous call
  // (memory_pattern.hpp): no buffers made and touched afresh at every call,
  // and no more held than the call has alive at once. Use RepeatedCall.
  virtual void begin_repeated_call(const std::string& /*key*/) {}
  virtual void end_repeated_call(bool /*completed*/) {}

  // True when the tensor's buffer belongs to this backend instance.
  bool owns(const Tensor& t) const { return t.storage() && t.storage()->owner() == storage_owner(); }

 protected:
  // The owner() of the buffers this backend accepts: itself, except for a
  // backend that stands in for another one (the memory planner's dry run).
  virtual const void* storage_owner() const { return this; }
};

// Marks a repeated call for its scope (Backend::begin_repeated_call): declared
// before the call's tensors, so it ends after they are given back; an
// exception ending the call leaves no pattern behind.
class RepeatedCall {
 public:
  RepeatedCall(Backend& backend, const std::string& key) : backend_(backend), exceptions_(std::uncaught_exceptions()) {
    backend_.begin_repeated_call(key);
  }
  ~RepeatedCall() { backend_.end_repeated_call(std::uncaught_exceptions() == exceptions_); }
  RepeatedCall(const RepeatedCall&) = delete;
  RepeatedCall& operator=(const RepeatedCall&) = delete;

 private:
  Backend& backend_;
  int exceptions_;
};

}  // namespace nanscope
