#include "backend/opencl/launch_util.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/units.hpp"

namespace nanscope::opencl::detail {

cl_uint to_uint(std::int64_t v, std::string_view op, std::string_view what) {
  if (v < 0 || v > static_cast<std::int64_t>(std::numeric_limits<cl_uint>::max())) {
    throw OpError(std::string(op) + ": " + std::string(what) + " = " + std::to_string(v) +
                  " does not fit the 32-bit kernel argument; split the work (smaller batch or resolution)");
  }
  return static_cast<cl_uint>(v);
}

size_t cpu_group_size(size_t global0) {
  size_t g = kCpuGroupCap;
  while (g > 1 && global0 % g != 0) g /= 2;
  return g;
}

bool runs_whole_blocks(std::string_view kernel_name) {
  static constexpr std::string_view kNames[] = {"gemm_cpu",
                                                "gemm_cpu_direct_a",
                                                "gemm_cpu_direct_f32a",
                                                "gemm_cpu_direct_a_geglu",
                                                "gemm_cpu_direct_f32a_geglu",
                                                "gemm_native",
                                                "gemm_pack_a",
                                                "gemm_pack_b",
                                                "conv_im2col_panels",
                                                "attn_pack_kt",
                                                "attn_pack_v",
                                                "conv_cpu",
                                                "winograd_weights",
                                                "winograd_input",
                                                "winograd_output",
                                                "winograd_fused_cpu"};
  return std::find(std::begin(kNames), std::end(kNames), kernel_name) != std::end(kNames);
}

size_t reduction_group_size(const OpenClBackend& be) {
  if (be.kernel_style() == KernelStyle::cpu) return 1;
  const size_t max = be.device().max_work_group_size ? be.device().max_work_group_size : 64;
  return std::min<size_t>(256, max);
}

std::string exact_math_options(const DeviceInfo& device) {
  std::string o;
  // The option is only valid where the device supports it.
  cl_device_fp_config fp = 0;
  if (device.cl_device &&
      clGetDeviceInfo(static_cast<cl_device_id>(device.cl_device), CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp,
                      nullptr) == CL_SUCCESS &&
      (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)) {
    o += " -cl-fp32-correctly-rounded-divide-sqrt";
  }
  if (device.fp64) o += " -DHAS_FP64";
  return o;
}

ScratchBuffer::ScratchBuffer(OpenClBackend& be, std::size_t bytes, std::string_view what)
    : pool_(&be.pool()), bytes_(std::max<std::size_t>(bytes, 1)) {
  cl_int err = CL_SUCCESS;
  mem_ = pool_->acquire(bytes_, err);
  if (err != CL_SUCCESS) {
    throw_cl_error(err, "clCreateBuffer",
                   "scratch buffer for " + std::string(what) + " (" + mib_text(bytes) + ") on \"" + be.device().name +
                       "\"; use a smaller resolution or batch, or attention slicing");
  }
}

ScratchBuffer::~ScratchBuffer() {
  if (mem_) pool_->release(mem_, bytes_);
}

}  // namespace nanscope::opencl::detail
