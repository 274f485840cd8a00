// Reference layer norm: statistics per row over the last dimension, then a
// per-feature affine. Same statistics rules as group norm (host_access.hpp).

#include <optional>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

void ReferenceBackend::layer_norm(const LayerNormArgs& a) {
  const detail::Floats x(a.x);
  std::optional<detail::Floats> gamma, beta;
  if (a.gamma) gamma.emplace(*a.gamma);
  if (a.beta) beta.emplace(*a.beta);
  detail::Store out(a.out);
  const DType t = a.out.dtype();

  detail::parallel_for(a.rows, static_cast<double>(3 * a.d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t base = r * a.d;
      const detail::NormStats st = detail::norm_stats(x.data() + base, a.d, a.eps, a.precision);
      for (std::int64_t j = 0; j < a.d; ++j) {
        const float g = gamma ? (*gamma)[j] : 1.0f;
        const float b = beta ? (*beta)[j] : 0.0f;
        out.set_f32(base + j, static_cast<float>(detail::normalize(t, st, x[base + j], g, b)));
      }
    }
  });
}

}  // namespace nanscope::reference
