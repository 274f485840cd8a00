// Reference sinusoidal timestep embedding (diffusers get_timestep_embedding).
// The frequency and argument follow diffusers' f32 steps (exponent, exp, t * freq
// in float32), since the model was trained on exactly those arguments; sin and
// cos of that argument are taken in double and rounded once.

#include <cmath>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

void ReferenceBackend::timestep_embedding(const TimestepEmbeddingArgs& a) {
  detail::Store out(a.out);
  const std::int64_t half = a.dim / 2;
  const auto log_period = static_cast<float>(std::log(static_cast<double>(a.max_period)));  // math.log, then f32
  const float denom = static_cast<float>(half) - a.downscale_freq_shift;
  for (std::size_t b = 0; b < a.timesteps.size(); ++b) {
    const std::int64_t row = static_cast<std::int64_t>(b) * a.dim;
    for (std::int64_t i = 0; i < half; ++i) {
      const float exponent = (-log_period * static_cast<float>(i)) / denom;
      const float freq = std::exp(exponent);
      const float arg = a.timesteps[b] * freq;
      const double s = std::sin(static_cast<double>(arg)), c = std::cos(static_cast<double>(arg));
      out.set(row + i, a.flip_sin_to_cos ? c : s);
      out.set(row + half + i, a.flip_sin_to_cos ? s : c);
    }
    if (a.dim % 2 == 1) out.set_f32(row + a.dim - 1, 0.0f);
  }
}

}  // namespace nanscope::reference
