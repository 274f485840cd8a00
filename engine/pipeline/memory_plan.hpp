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

#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "core/units.hpp"
#include "models/vae.hpp"
#include "models/vae_tiling.hpp"
#include "ops/op_context.hpp"

namespace nanscope::pipeline {

class SdModel;

inline constexpr std::int64_t kMaxKernelElements = 4294967295;  // UINT32_MAX

// One buffer the run allocates.
struct PlannedBuffer {
  std::string component;  // "unet", "vae" or "vae encoder"
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
  // When it does not fit and decoding in VAE tiles makes it fit: the settings
  // that do it, as `--set` assignments ("vae.tiling=on", "vae.tile_size=640"),
  // found by planning the tiled decode (the largest tile that fits), and what
  // that plan needs. Empty when tiling does not help (the UNet is what does
  // not fit). Attention is not part of it: its score matrices are scratch the
  // ops split to the device's limit (see above), so slicing never decides
  // whether a size fits.
  std::vector<std::string> fix;
  std::string fix_note;

  bool fits() const { return refusal.empty(); }
};

// A size the memory plan refuses, with the settings that make it fit (when
// there are any): front ends offer them ("Apply").
class MemoryPlanError : public DeviceError {
 public:
  MemoryPlanError(const std::string& what, std::vector<std::string> fix) : DeviceError(what), fix_(std::move(fix)) {}
  const std::vector<std::string>& fix() const { return fix_; }

 private:
  std::vector<std::string> fix_;
};

// What a run at one size needs from the device.
struct PlanRequest {
  const SdModel* model = nullptr;
  OpContext unet;  // the run's UNet context (backend, precision, attention settings)
  OpContext vae;   // the run's VAE decode context
  int width = 0, height = 0;
  bool cfg = true;  // guidance on: the UNet runs two rows per call
  std::uint64_t resident_bytes = 0;
  models::VaeTiles vae_tiles = {};  // the decode in tiles (vae.tiling); untiled when not enabled
  int tile_overlap_px = 64;         // vae.tile_overlap, for the advice
  bool advise = true;               // when it does not fit: look for the VAE tiling that fits (MemoryPlan::fix)
  // img2img's init image and the hires fix's Lanczos upscale are encoded by
  // the VAE encoder first, whole (VAE tiling tiles the decode only): `encoder`
  // (Session::encoder_vae) on an image of encode_width x encode_height in the
  // VAE's context; null when the run encodes nothing. Planned as its own
  // component, "vae encoder": a size whose encode does not fit is refused
  // naming the encoder's buffer, and no decode tiling is offered for it.
  const models::Vae* encoder = nullptr;
  int encode_width = 0, encode_height = 0;
  // The run's text-encoder context: with plan_memory's `calls`, the text
  // encoders run on the stand-in too (for their calls; not in the memory plan).
  const OpContext* text_encoder = nullptr;
};

// Plans a run (see above). Allocates nothing on the device. Throws only for a
// request the models themselves reject (a size that is not a multiple of the
// model's factor: check that first). `calls` (optional): receives the dry
// run's GEMM, convolution and attention calls for the kernel plan
// (Backend::plan_kernels), added to what it holds.
MemoryPlan plan_memory(const PlanRequest& request, KernelCalls* calls = nullptr);

// Whether decoding a latent of `latent_shape` with `vae` in ctx fits the
// device untiled, on top of `resident_bytes` (vae.tiling=auto asks this).
bool decode_fits(const models::Vae& vae, const OpContext& ctx, const Shape& latent_shape, std::uint64_t resident_bytes);

// The largest square size (a multiple of `multiple`, at most `limit`) whose
// plan fits the device, or 0 when none does.
int largest_square_size(const PlanRequest& request, int multiple, int limit);

}  // namespace nanscope::pipeline
