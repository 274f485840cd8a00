// Reference softmax over the last dimension.
// softmax=f32 (or f32 storage): max, exp, sum and quotient in double, rounded
// once. softmax=native: every step in the storage dtype, as half kernels do:
// x - max, exp, the sequential sum and each quotient are rounded to dtype.

#include <cmath>
#include <limits>
#include <vector>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

namespace detail {

// Softmax of one row of n values into probabilities (double, each already
// rounded to dtype when native). Shared with attention.
void softmax_row(const float* s, std::int64_t n, DType t, bool native, double* p) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = nan_max(m, s[j]);
  if (native) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < n; ++j) {
      p[j] = round_d(t, std::exp(round_d(t, double(s[j]) - m)));
      sum = round_sum(t, sum, p[j]);
    }
    for (std::int64_t j = 0; j < n; ++j) p[j] = round_d(t, p[j] / sum);
    return;
  }
  double sum = 0.0;
  for (std::int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(double(s[j]) - m);
    sum += p[j];
  }
  for (std::int64_t j = 0; j < n; ++j) p[j] /= sum;
}

}  // namespace detail

void ReferenceBackend::softmax(const SoftmaxArgs& a) {
  const detail::Floats x(a.x);
  detail::Store out(a.out);
  const DType t = a.out.dtype();
  const bool native = a.precision.native_softmax();
  detail::parallel_for(a.rows, 30.0 * static_cast<double>(a.d), [&](std::int64_t r0, std::int64_t r1) {
    std::vector<double> p(static_cast<std::size_t>(a.d));
    for (std::int64_t r = r0; r < r1; ++r) {
      detail::softmax_row(x.data() + r * a.d, a.d, t, native, p.data());
      for (std::int64_t j = 0; j < a.d; ++j) out.set(r * a.d + j, p[static_cast<std::size_t>(j)]);
    }
  });
}

}  // namespace nanscope::reference
