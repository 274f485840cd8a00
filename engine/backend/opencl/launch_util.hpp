#pragma once
// Small helpers shared by the OpenCL op files: grid arithmetic, range checks
// for 32-bit kernel arguments, the storage-only precision of data-movement
// ops, and the kernel style (CPU-style register blocking vs GPU-style local
// memory tiles). Internal to engine/backend/opencl/.

#include <cstdint>
#include <string>
#include <string_view>

#include "backend/opencl/opencl_backend.hpp"
#include "core/precision.hpp"

namespace nanscope::opencl::detail {

inline size_t ceil_div(std::int64_t a, std::int64_t b) { return static_cast<size_t>((a + b - 1) / b); }

// A size passed to a kernel as uint; throws OpError naming the op when it does not fit.
cl_uint to_uint(std::int64_t v, std::string_view op, std::string_view what);

// Ops whose arithmetic does not depend on accumulation or softmax precision
// (data movement, elementwise, activations) share one program per dtype.
inline Precision storage_only(DType t) { return Precision{t, Accumulate::f32, SoftmaxPrecision::f32}; }

// Work-items per work-group for row/group reductions (norms, softmax): 1 on
// CPU-style devices (one work-item walks its row with vector loads, no
// barriers to pay), up to 256 on GPUs.
size_t reduction_group_size(const OpenClBackend& be);

// The work-group size of a launch that leaves it to the driver, on a CPU
// device: the largest power of two up to kCpuGroupCap that divides the first
// global size (other dimensions get 1). A CPU driver runs a work-group's
// work-items as a loop on one worker thread and keeps their private values
// side by side on that thread's stack: PoCL, left to itself, picks groups of
// up to 4096 work-items, and the GEMM's register blocks (about 1.2 KB each)
// then overflow the stack (a SIGSEGV at 1024x1024, where a 1x1 conv first has
// 8192 column panels). A bounded, predictable size also keeps PoCL from
// compiling the kernel again for every new size it would have picked.
inline constexpr size_t kCpuGroupCap = 64;
size_t cpu_group_size(size_t global0);

// Kernels whose every work-item is a whole block of work (a GEMM micro-panel
// over all of k, a packed panel row, an im2col panel, a packed key block): on
// a CPU device they run one work-item per group. More work-items per group
// gain them nothing (the work-item is already a loop nest over vectors), and
// each further group size costs a cold PoCL a compile of the kernel (0.3-1 s
// each for these; 7 group sizes of gemm_cpu_direct_a in one embedded-model
// run: report R4's first-run time).
bool runs_whole_blocks(std::string_view kernel_name);

// Device options added to the precision -D set for programs whose exactness
// needs them: correctly rounded f32 division and square root (the default
// allows 2.5-3 ulp), and -DHAS_FP64 where the device has doubles (native
// softmax takes exp in double so its rounding to f16/bf16 matches the reference).
std::string exact_math_options(const DeviceInfo& device);

// A short-lived device buffer for intermediate results (packed GEMM panels,
// im2col columns, attention scores), from the backend's buffer pool and given
// back to it when it goes out of scope (the in-order queue makes reuse safe).
class ScratchBuffer {
 public:
  ScratchBuffer(OpenClBackend& be, std::size_t bytes, std::string_view what);
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  cl_mem mem() const { return mem_; }
  std::size_t bytes() const { return bytes_; }

 private:
  BufferPool* pool_;  // the backend's; a scratch buffer never outlives the op that made it
  cl_mem mem_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace nanscope::opencl::detail
