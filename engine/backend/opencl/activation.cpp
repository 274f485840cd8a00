// PENDING: being written (helper H4). Replaced by the real host code.
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

void OpenClBackend::unary(const UnaryArgs& args) { throw OpError("OpenCL unary: pending"); }

void OpenClBackend::geglu(const GegluArgs& args) { throw OpError("OpenCL geglu: pending"); }

}  // namespace nanscope::opencl
