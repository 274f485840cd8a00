// PENDING: being written (helper H4). Replaced by the real host code.
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

void OpenClBackend::group_norm(const GroupNormArgs& args) { throw OpError("OpenCL group_norm: pending"); }

}  // namespace nanscope::opencl
