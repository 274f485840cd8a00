// TIMESTEP_EMBEDDING host side (kernels/timestep_embedding.cl). The per-run
// constants (log of the period, the exponent's denominator) are computed here
// in f32 exactly as the reference does; the timesteps travel in a small buffer.
#include <algorithm>
#include <cmath>

#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

void OpenClBackend::timestep_embedding(const TimestepEmbeddingArgs& args) {
  const auto batch = static_cast<std::int64_t>(args.timesteps.size());
  if (batch == 0 || args.dim == 0) return;
  const std::int64_t half = args.dim / 2;
  detail::ScratchBuffer ts(*this, args.timesteps.size() * sizeof(float), "timesteps");
  NS_CL_CHECK(
      clEnqueueWriteBuffer(queue(), ts.mem(), CL_TRUE, 0, ts.bytes(), args.timesteps.data(), 0, nullptr, nullptr));
  const float log_period = std::log(args.max_period);
  const float denom = static_cast<float>(half) - args.downscale_freq_shift;
  cl_kernel k =
      kernel("timestep_embedding", "timestep_embedding", precision_options(detail::storage_only(args.out.dtype())));
  set_args(k, ts.mem(), buffer(args.out), detail::to_uint(args.dim, "TIMESTEP_EMBEDDING", "dim"), cl_uint(half),
           log_period, denom, cl_int(args.flip_sin_to_cos ? 1 : 0));
  const size_t global[2] = {static_cast<size_t>(std::max<std::int64_t>(half, 1)), static_cast<size_t>(batch)};
  launch(k, "TIMESTEP_EMBEDDING", 2, global, nullptr);
}

}  // namespace nanscope::opencl
