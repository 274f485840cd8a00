// Reference group norm over [n, c, s]: statistics per (sample, group of c/groups
// channels) over all their spatial positions, then a per-channel affine (and,
// fused, SILU of the stored value).

#include <cmath>
#include <optional>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

namespace detail {

NormStats norm_stats(const float* x, std::int64_t count, float eps, const Precision& p) {
  NormStats st;
  if (p.native_accumulation()) {
    const DType t = p.dtype;
    double sum = 0.0, sumsq = 0.0;
    for (std::int64_t i = 0; i < count; ++i) {
      const double v = x[i];
      sum = round_sum(t, sum, v);
      sumsq = round_sum(t, sumsq, v * v);
    }
    const float n = static_cast<float>(count);
    const float mean = static_cast<float>(sum) / n;
    float var = static_cast<float>(sumsq) / n - mean * mean;
    if (var < 0.0f) var = 0.0f;  // cancellation; a NaN variance stays NaN
    st.mean = mean;
    st.rstd = 1.0f / std::sqrt(var + eps);
    st.native = true;
    return st;
  }
  double sum = 0.0;
  for (std::int64_t i = 0; i < count; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(count);
  double ss = 0.0;
  for (std::int64_t i = 0; i < count; ++i) {
    const double d = x[i] - mean;
    ss += d * d;
  }
  st.mean = mean;
  st.rstd = 1.0 / std::sqrt(ss / static_cast<double>(count) + static_cast<double>(eps));
  return st;
}

double normalize(DType t, const NormStats& st, float x, float gamma, float beta) {
  if (st.native) {
    const float mean = static_cast<float>(st.mean), rstd = static_cast<float>(st.rstd);
    return round_to(t, ((x - mean) * rstd) * gamma + beta);
  }
  return round_d(t, ((double(x) - st.mean) * st.rstd) * double(gamma) + double(beta));
}

}  // namespace detail

void ReferenceBackend::group_norm(const GroupNormArgs& a) {
  const detail::Floats x(a.x);
  std::optional<detail::Floats> gamma, beta;
  if (a.gamma) gamma.emplace(*a.gamma);
  if (a.beta) beta.emplace(*a.beta);
  detail::Store out(a.out);
  const DType t = a.out.dtype();
  const std::int64_t cg = a.c / a.groups;
  const std::int64_t count = cg * a.s;

  detail::parallel_for(a.n * a.groups, static_cast<double>(3 * count), [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t job = j0; job < j1; ++job) {
      const std::int64_t base = job * count;  // groups are contiguous runs of [cg, s]
      const detail::NormStats st = detail::norm_stats(x.data() + base, count, a.eps, a.precision);
      const std::int64_t c0 = (job % a.groups) * cg;
      for (std::int64_t ci = 0; ci < cg; ++ci) {
        const float g = gamma ? (*gamma)[c0 + ci] : 1.0f;
        const float b = beta ? (*beta)[c0 + ci] : 0.0f;
        for (std::int64_t si = 0; si < a.s; ++si) {
          const std::int64_t i = base + ci * a.s + si;
          const auto y = static_cast<float>(detail::normalize(t, st, x[i], g, b));
          if (a.silu) {
            out.set(i, detail::silu(y));
          } else {
            out.set_f32(i, y);
          }
        }
      }
    }
  });
}

}  // namespace nanscope::reference
