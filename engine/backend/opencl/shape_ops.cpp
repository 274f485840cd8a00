// PENDING: being written (helper H4). Replaced by the real host code.
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

void OpenClBackend::upsample_nearest2x(const UpsampleArgs& args) { throw OpError("OpenCL upsample_nearest2x: pending"); }

void OpenClBackend::concat(const ConcatArgs& args) { throw OpError("OpenCL concat: pending"); }

void OpenClBackend::slice(const SliceArgs& args) { throw OpError("OpenCL slice: pending"); }

void OpenClBackend::permute(const PermuteArgs& args) { throw OpError("OpenCL permute: pending"); }

void OpenClBackend::cast(const CastArgs& args) { throw OpError("OpenCL cast: pending"); }

}  // namespace nanscope::opencl
