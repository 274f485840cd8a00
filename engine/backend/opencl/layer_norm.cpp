// PENDING: being written (helper H4). Replaced by the real host code.
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

void OpenClBackend::layer_norm(const LayerNormArgs& args) { throw OpError("OpenCL layer_norm: pending"); }

}  // namespace nanscope::opencl
