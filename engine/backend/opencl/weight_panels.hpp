#pragma once
// LINEAR weights packed once: the CPU-family GEMM multiplies B in k-blocked
// column panels (kernels/matmul.cl), and a linear layer's B is its weight,
// the same at every call. Packed per call, the pass over every weight was
// 0.22 s of a 9 s SD 1.5 UNet call on a 2-core Zen 4 (the 1280-wide layers at
// 512 and 128 tokens ran at 77-82% of peak with it); here each weight's
// panels are made at its first use and kept with it. A model's load packs them
// ahead (Backend::prepare_linear_weight, from models::Linear::load): packed at
// the first call instead, the 0.9 GB of an SD 1.5 UNet's panels made that call
// 1.3x the next one, most of it in faulting in fresh memory.
//
// The panels belong to the weight's buffer: they are given back to the pool
// when its last tensor goes (ClStorage's destructor calls forget()), so a
// buffer that is freed and handed out again never finds the old panels. Only
// tensors the caller marks as weights (MatmulArgs::b_weight: LINEAR with its
// own weight, never a converted copy) are kept, and only while the kept
// panels stay within the budget (BackendOptions::weight_panel_bytes); past
// it, B is packed per call as before. Under memory pressure (an allocation
// failed) every kept panel set is given back (BufferPool's relief hook), and
// before each run the memory plan limits the budget to what the run leaves
// free (Backend::limit_cache_growth).
// The results are the same bit for bit: the same packing kernel writes the
// same panels, once instead of at every call.

#include <CL/cl.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/opencl/buffer_pool.hpp"
#include "core/tensor.hpp"

namespace nanscope::opencl {

class WeightPanels {
 public:
  WeightPanels(std::shared_ptr<BufferPool> pool, std::size_t budget_bytes);
  ~WeightPanels();
  WeightPanels(const WeightPanels&) = delete;
  WeightPanels& operator=(const WeightPanels&) = delete;

  // The panels kept for this weight buffer under `key` (the packing's
  // options and the operand's view), or null.
  cl_mem find(const Storage* weight, const std::string& key);
  // A buffer of `bytes` kept for this weight under `key`, for the caller to
  // pack into now (the queue is in order: later launches see the panels), or
  // null when the budget or the device has no room, or when the weight
  // already keeps panels under another key (one view per weight). `ahead`:
  // packed before any call asked (Backend::prepare_linear_weight, at load);
  // such panels give way to the first call that wants another key (a
  // precision or view the load did not foresee) until a call has used them.
  cl_mem make(const Storage* weight, const std::string& key, std::size_t bytes, bool ahead = false);
  // The weight buffer is released: its panels go back to the pool.
  void forget(const Storage* weight);
  // Gives every kept panel set back; returns the bytes freed.
  std::size_t clear();

  // At most `bytes` more than is kept now, and never more than the budget it
  // was made with (the memory plan's room for the next run).
  void limit_growth(std::uint64_t bytes);
  std::size_t budget_bytes() const;
  // At the sizes the pool served: what allocated_bytes drops by when they go.
  std::size_t kept_bytes() const;

 private:
  struct Entry {
    cl_mem mem = nullptr;
    std::size_t bytes = 0;  // the size the pool served (counted in allocated_bytes)
    std::string key;
    bool ahead = false;  // packed at load and not yet used by a call
  };
  std::shared_ptr<BufferPool> pool_;
  std::size_t configured_ = 0;  // BackendOptions::weight_panel_bytes or its default
  std::size_t budget_ = 0;      // configured_, or less while the memory plan limits it
  mutable std::mutex mu_;
  std::unordered_map<const Storage*, Entry> kept_;
  std::size_t kept_bytes_ = 0;
};

}  // namespace nanscope::opencl
