// Reference activations: computed in double from the stored input, rounded
// once to the output dtype.

#include <cmath>
#include <numbers>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

// torch's approximate='tanh' form.
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double apply(UnaryOp op, double x, double param) {
  switch (op) {
    case UnaryOp::silu: return detail::silu(x);
    case UnaryOp::gelu_erf: return gelu_erf(x);
    case UnaryOp::gelu_tanh: return gelu_tanh(x);
    case UnaryOp::quick_gelu: return x * sigmoid(1.702 * x);
    case UnaryOp::scale: return x * param;
  }
  return x;
}

}  // namespace

double detail::silu(double x) { return x * sigmoid(x); }

void ReferenceBackend::unary(const UnaryArgs& a) {
  const detail::Floats x(a.x);
  detail::Store out(a.out);
  const double param = a.param;
  detail::parallel_for(a.x.numel(), 20.0, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) out.set(i, apply(a.op, x[i], param));
  });
}

void ReferenceBackend::geglu(const GegluArgs& a) {
  const detail::Floats x(a.x);
  detail::Store out(a.out);
  detail::parallel_for(a.rows, 20.0 * static_cast<double>(a.d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* row = x.data() + r * 2 * a.d;
      for (std::int64_t j = 0; j < a.d; ++j) out.set(r * a.d + j, double(row[j]) * gelu_erf(row[a.d + j]));
    }
  });
}

}  // namespace nanscope::reference
