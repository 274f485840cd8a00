#pragma once
// Shared helpers of the reference op files: element access in the storage
// format, the single-rounding primitives of op_args.hpp, and a tiny parallel
// loop. Internal to engine/backend/reference/.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/reference/reference_backend.hpp"
#include "core/dtype.hpp"

namespace nanscope::reference::detail {

HostStorage& storage_of(const Tensor& t);

// The elements of a tensor as floats (f16/bf16 widen exactly). f32 tensors are
// read in place; other dtypes are converted once into an owned buffer.
class Floats {
 public:
  explicit Floats(const Tensor& t);
  const float* data() const { return ptr_; }
  float operator[](std::int64_t i) const { return ptr_[i]; }

 private:
  std::vector<float> owned_;
  const float* ptr_ = nullptr;
};

// Writes into a tensor, rounding once to its dtype.
class Store {
 public:
  explicit Store(Tensor& t);
  // Stores v rounded once (round-to-nearest-even) to the dtype.
  void set(std::int64_t i, double v);
  // Stores a float already representable in the dtype (or rounds it from f32).
  void set_f32(std::int64_t i, float v) {
    const auto k = static_cast<std::size_t>(i);
    if (dtype_ == DType::f32) {
      std::memcpy(data_ + 4 * k, &v, 4);
    } else {
      const std::uint16_t b = dtype_ == DType::f16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
      std::memcpy(data_ + 2 * k, &b, 2);
    }
  }

 private:
  std::uint8_t* data_;
  DType dtype_;
};

// round_dtype(v): one correct round-to-nearest-even from double to the
// storage dtype (the same result as core's round_to_from_double, checked by
// tests/test_reference_rounding.cpp), done on the double's bits because it runs
// once per partial sum in native accumulation.
inline double round_d(DType t, double v) {
  if (t == DType::f32) return static_cast<double>(static_cast<float>(v));
  // f16: 10 stored mantissa bits, normal from 2^-14, subnormal quantum 2^-24, Inf from 65520.
  // bf16: 7 stored mantissa bits, normal from 2^-126, subnormal quantum 2^-133, Inf from 2^128 - 2^119 (0x1.ffp127).
  const bool half = t == DType::f16;
  const double a = std::fabs(v);
  if (!(a == a)) return v;                              // NaN stays NaN
  const double overflow = half ? 65520.0 : 0x1.ffp127;  // halfway past the largest finite value
  if (a >= overflow) return std::copysign(HUGE_VAL, v);
  const double min_normal = half ? 0x1p-14 : 0x1p-126;
  if (a < min_normal) {
    // Fixed quantum: scaling by powers of two is exact; rint rounds to nearest even.
    const double q = half ? 0x1p-24 : 0x1p-133;
    return std::copysign(std::rint(a / q) * q, v);
  }
  const int drop = half ? 42 : 45;  // double mantissa bits below the narrow type's
  std::uint64_t u;
  std::memcpy(&u, &a, 8);
  const std::uint64_t lsb = (u >> drop) & 1u;
  u += ((std::uint64_t{1} << (drop - 1)) - 1u) + lsb;  // a carry into the exponent is right
  u &= ~((std::uint64_t{1} << drop) - 1u);
  double r;
  std::memcpy(&r, &u, 8);
  return std::copysign(r, v);
}

inline void Store::set(std::int64_t i, double v) { set_f32(i, static_cast<float>(round_d(dtype_, v))); }

// round_dtype(a + b) of the exact sum a + b, with one rounding. The double sum
// can itself be inexact when the magnitudes are far apart; if that error would
// decide a tie of the narrow type, the exact remainder (two-sum) breaks it.
double round_sum_slow(DType t, double s, double err);
inline double round_sum(DType t, double a, double b) {
  const double s = a + b;
  // Knuth's two-sum: err is the exact remainder a + b - s.
  const double bb = s - a;
  const double err = (a - (s - bb)) + (b - bb);
  if (err == 0.0 || !std::isfinite(err)) return round_d(t, s);
  return round_sum_slow(t, s, err);
}

// NaN-propagating maximum (std::max drops a NaN in its second argument).
inline double nan_max(double a, double b) {
  if (std::isnan(a)) return a;
  return (std::isnan(b) || b > a) ? b : a;
}

// Mean and 1/sqrt(var + eps) of a contiguous run of values (biased variance),
// shared by group and layer norm. accumulate=f32: two passes in double.
// Native: the sums of x and x*x are rounded to the storage dtype after every
// partial sum, in memory order (so an f16 sum past 65504 is Inf, as in naive
// half kernels), and mean/var/rstd are then computed in f32. `native` tells
// normalize() which arithmetic to use.
struct NormStats {
  double mean = 0.0;
  double rstd = 0.0;
  bool native = false;
};
NormStats norm_stats(const float* x, std::int64_t count, float eps, const Precision& p);
// ((x - mean) * rstd) * gamma + beta in the stats' arithmetic (double, or f32
// when native), rounded once to the dtype.
double normalize(DType t, const NormStats& st, float x, float gamma, float beta);

// x * sigmoid(x) in double (SILU; GROUP_NORM's fused SILU).
double silu(double x);

// Softmax of one row (softmax.cpp): probabilities in double; with native they
// are already rounded to t at every step (x - max, exp, sequential sum, quotient).
void softmax_row(const float* s, std::int64_t n, DType t, bool native, double* p);

// Runs fn(begin, end) over [0, count) split into contiguous chunks on a few
// threads; serial when the work (count * cost_per_item) is small.
void parallel_for(std::int64_t count, double cost_per_item, const std::function<void(std::int64_t, std::int64_t)>& fn);

}  // namespace nanscope::reference::detail
