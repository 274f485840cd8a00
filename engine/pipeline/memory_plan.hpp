#pragma once
// The memory plan of a run: before any real work, the UNet call and the VAE
// decode run once on a stand-in backend that allocates nothing and launches
// nothing, only records every buffer the real run would allocate (shape,
// dtype, the op and module that allocate it) and how much is live at once.
// A size whose largest buffer exceeds the device's largest allocation
// (CL_DEVICE_MAX_MEM_ALLOC_SIZE), or whose live buffers exceed its memory,
// is refused before the run starts, with a message naming the buffer, the
// module and what helps; the largest size that fits is found the same way.
//
// Kernels take element counts as 32-bit unsigned arguments (offsets are
// 64-bit): a buffer with more elements is refused too, whatever the device's
// memory.
//
// What the plan does not see: scratch buffers inside a backend's ops (GEMM
// panels, im2col columns, attention scores). Those are split to a budget of
// at most half the largest allocation (backend/opencl/gemm.cpp), so they
// never decide whether a size fits.

#include <cstdint>
#include <string>

#include "core/tensor.hpp"
#include "core/units.hpp"
#include "ops/op_context.hpp"

namespace nanscope::pipeline {

class SdModel;

inline constexpr std::int64_t kMaxKernelElements = 4294967295;  // UINT32_MAX

// One buffer the run allocates.
struct PlannedBuffer {
  std::string component;  // "unet" or "vae"
  std::string op;         // "CONV2D" ("" when not an op's output)
  std::string module;     // diffusers module path, e.g. "decoder.up_blocks.1.upsamplers.0.conv"
  Shape shape;
  DType dtype = DType::f32;
  std::uint64_t bytes = 0;

  // `CONV2D vae decoder.up_blocks.1.upsamplers.0.conv output [1,32,2048,2048] f32 (512.0 MiB)`
  std::string describe() const;
};

struct MemoryPlan {
  int width = 0, height = 0;
  PlannedBuffer largest;             // the largest single buffer of the UNet call or the decode
  std::uint64_t peak_bytes = 0;      // the most live at once (the run's tensors + the component's activations)
  std::string peak_component;        // where that peak is reached
  std::uint64_t resident_bytes = 0;  // already on the device before the run (weights)
  std::uint64_t max_alloc_bytes = 0, global_mem_bytes = 0;  // the device's limits the plan was checked against
  std::string device;
  // Empty when the run fits the device; otherwise why not, in plain English:
  // the buffer, the module, the device's limit, and the settings that help.
  std::string refusal;

  bool fits() const { return refusal.empty(); }
};

// What a run at one size needs from the device.
struct PlanRequest {
  const SdModel* model = nullptr;
  OpContext unet;  // the run's UNet context (backend, precision, attention settings)
  OpContext vae;   // the run's VAE decode context
  int width = 0, height = 0;
  bool cfg = true;  // guidance on: the UNet runs two rows per call
  std::uint64_t resident_bytes = 0;
};

// Plans a run (see above). Allocates nothing on the device. Throws only for a
// request the models themselves reject (a size that is not a multiple of the
// model's factor: check that first).
MemoryPlan plan_memory(const PlanRequest& request);

// The largest square size (a multiple of `multiple`, at most `limit`) whose
// plan fits the device, or 0 when none does.
int largest_square_size(const PlanRequest& request, int multiple, int limit);

}  // namespace nanscope::pipeline
