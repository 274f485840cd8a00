// TIMESTEP_EMBEDDING: sinusoidal embedding of the diffusion timesteps.

#include <cmath>
#include <vector>

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

Tensor timestep_embedding(const OpContext& ctx, std::span<const float> timesteps, int dim, bool flip_sin_to_cos,
                          float downscale_freq_shift, float max_period) {
  const detail::OpCall call(ctx, "TIMESTEP_EMBEDDING", {});
  call.require(!timesteps.empty(), "no timesteps given");
  call.require(dim >= 2, "dim must be at least 2, got " + std::to_string(dim));
  call.require(max_period > 0.0f && std::isfinite(max_period), "max_period must be positive and finite");
  call.require(static_cast<float>(dim / 2) - downscale_freq_shift != 0.0f,
               "dim / 2 - downscale_freq_shift is zero: the frequencies would divide by zero");
  for (float t : timesteps) call.require(std::isfinite(t), "a timestep is not finite");
  Tensor out = call.allocate({static_cast<std::int64_t>(timesteps.size()), dim});
  TimestepEmbeddingArgs args{std::vector<float>(timesteps.begin(), timesteps.end()),
                             out,
                             dim,
                             flip_sin_to_cos,
                             downscale_freq_shift,
                             max_period};
  call.run(&Backend::timestep_embedding, args);
  call.trace({}, out);
  return out;
}

}  // namespace nanscope::ops
