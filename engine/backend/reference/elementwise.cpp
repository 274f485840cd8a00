// Reference add/sub/mul with b broadcast through strides: computed in double
// (exact for two stored values) and rounded once.

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

void ReferenceBackend::binary(const BinaryArgs& args) {
  const detail::Floats a(args.a), b(args.b);
  detail::Store out(args.out);
  const auto& sh = args.shape4;
  const auto& bs = args.b_strides;
  const std::int64_t inner = sh[3];
  detail::parallel_for(sh[0] * sh[1] * sh[2], static_cast<double>(inner), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t i0 = r / (sh[1] * sh[2]), i1 = (r / sh[2]) % sh[1], i2 = r % sh[2];
      const std::int64_t boff = i0 * bs[0] + i1 * bs[1] + i2 * bs[2];
      for (std::int64_t i3 = 0; i3 < inner; ++i3) {
        const double x = a[r * inner + i3];
        const double y = b[boff + i3 * bs[3]];
        double v = 0.0;
        switch (args.op) {
          case BinaryOp::add: v = x + y; break;
          case BinaryOp::sub: v = x - y; break;
          case BinaryOp::mul: v = x * y; break;
        }
        out.set(r * inner + i3, v);
      }
    }
  });
}

}  // namespace nanscope::reference
