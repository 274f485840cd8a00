// Reference 2-D convolution (cross-correlation, as torch). Each output sums
// its terms in the order k = (ci * kh + ky) * kw + kx ascending, bias last
// (op_args.hpp). Zero padding multiplies like data: a non-finite weight over
// padding gives NaN, as im2col + GEMM does.

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

using detail::Floats;
using detail::round_d;
using detail::round_sum;

void ReferenceBackend::conv2d(const Conv2dArgs& a) {
  const Floats x(a.x), w(a.w);
  std::optional<Floats> bias;
  if (a.bias) bias.emplace(*a.bias);
  detail::Store out(a.out);
  const DType t = a.out.dtype();
  const bool native = a.precision.native_accumulation();
  const std::int64_t s = a.stride, p = a.padding;
  const std::int64_t plane = a.oh * a.ow;
  const double kNaN = std::numeric_limits<double>::quiet_NaN();

  // First and one-past-last output column whose input column ox*s - p + kx is inside the image.
  auto valid_range = [&](std::int64_t kpos, std::int64_t in_size, std::int64_t out_size) {
    std::int64_t lo = 0;
    while (lo < out_size && lo * s - p + kpos < 0) ++lo;
    std::int64_t hi = out_size;
    while (hi > lo && (hi - 1) * s - p + kpos >= in_size) --hi;
    return std::pair<std::int64_t, std::int64_t>{lo, hi};
  };

  const double cost = static_cast<double>(a.c * a.kh * a.kw * plane);
  detail::parallel_for(a.n * a.o, cost, [&](std::int64_t job0, std::int64_t job1) {
    std::vector<double> acc(static_cast<std::size_t>(plane));
    for (std::int64_t job = job0; job < job1; ++job) {
      const std::int64_t ni = job / a.o, oi = job % a.o;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t ci = 0; ci < a.c; ++ci) {
        const float* xplane = x.data() + (ni * a.c + ci) * a.h * a.w_in;
        for (std::int64_t ky = 0; ky < a.kh; ++ky) {
          const auto [oy_lo, oy_hi] = valid_range(ky, a.h, a.oh);
          for (std::int64_t kx = 0; kx < a.kw; ++kx) {
            const double wv = w[((oi * a.c + ci) * a.kh + ky) * a.kw + kx];
            const auto [ox_lo, ox_hi] = valid_range(kx, a.w_in, a.ow);
            const bool pad_poisons = !std::isfinite(wv);  // 0 * Inf or 0 * NaN
            for (std::int64_t oy = 0; oy < a.oh; ++oy) {
              double* arow = acc.data() + oy * a.ow;
              if (oy < oy_lo || oy >= oy_hi) {
                if (pad_poisons) std::fill(arow, arow + a.ow, kNaN);
                continue;
              }
              if (pad_poisons) {
                std::fill(arow, arow + ox_lo, kNaN);
                std::fill(arow + ox_hi, arow + a.ow, kNaN);
              }
              // Input index of output column ox: xbase + ox * s (inside the row for ox in [lo, hi)).
              const std::int64_t xbase = (oy * s - p + ky) * a.w_in - p + kx;
              if (native) {
                for (std::int64_t ox = ox_lo; ox < ox_hi; ++ox) {
                  arow[ox] = round_sum(t, arow[ox], wv * double(xplane[xbase + ox * s]));
                }
              } else if (s == 1) {
                const float* xrow = xplane + xbase + ox_lo;
                double* dst = arow + ox_lo;
                for (std::int64_t i = 0; i < ox_hi - ox_lo; ++i) dst[i] += wv * double(xrow[i]);
              } else {
                for (std::int64_t ox = ox_lo; ox < ox_hi; ++ox) arow[ox] += wv * double(xplane[xbase + ox * s]);
              }
            }
          }
        }
      }
      const double bv = bias ? double((*bias)[oi]) : 0.0;
      const std::int64_t base = job * plane;
      for (std::int64_t i = 0; i < plane; ++i) {
        const double v = acc[static_cast<std::size_t>(i)];
        out.set_f32(base + i, static_cast<float>(native ? (bias ? round_sum(t, v, bv) : v) : round_d(t, v + bv)));
      }
    }
  });
}

}  // namespace nanscope::reference
