// PENDING: being written (helper H4). Replaced by the real host code.
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

void OpenClBackend::softmax(const SoftmaxArgs& args) { throw OpError("OpenCL softmax: pending"); }

}  // namespace nanscope::opencl
