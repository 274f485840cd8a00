// PENDING: being written (helper H4). Replaced by the real host code.
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

void OpenClBackend::conv2d(const Conv2dArgs& args) { throw OpError("OpenCL conv2d: pending"); }

}  // namespace nanscope::opencl
