// PENDING: being written (helper H4). Replaced by the real host code.
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

void OpenClBackend::timestep_embedding(const TimestepEmbeddingArgs& args) { throw OpError("OpenCL timestep_embedding: pending"); }

}  // namespace nanscope::opencl
