#include "backend/op_args.hpp"

#include <string>

#include "core/error.hpp"

namespace nanscope {

void check_latent_step(const LatentStepArgs& a) {
  auto check = [&](const Tensor& t, const char* what, std::int64_t needed) {
    if (t.dtype() != DType::f32) {
      throw OpError(std::string("LATENT_STEP: ") + what + " must be f32, got " + std::string(dtype_name(t.dtype())));
    }
    if (t.numel() < needed) {
      throw OpError(std::string("LATENT_STEP: ") + what + " holds " + std::to_string(t.numel()) + " values, needs " +
                    std::to_string(needed));
    }
  };
  check(a.x, "x", a.x_offset + a.n);
  check(a.out, "out", a.out_offset + a.n);
  if (a.m) check(*a.m, "m", a.m_offset + a.n);
  if (a.h1) check(*a.h1, "h1", a.n);
  if (a.h2) check(*a.h2, "h2", a.n);
  if (a.x0) check(*a.x0, "x0", a.n);
  const bool needs_m = a.op != LatentOp::scale && a.op != LatentOp::mul;
  const bool lin = a.op == LatentOp::lincomb;
  if (lin && (a.flag < 2 || a.flag > 4)) throw OpError("LATENT_STEP: lincomb takes 2 to 4 terms");
  const bool needs_h1 = a.op == LatentOp::dpm2 || a.op == LatentOp::dpm3 || (lin && a.flag >= 3);
  const bool needs_h2 = a.op == LatentOp::dpm3 || (lin && a.flag >= 4);
  if ((needs_m && !a.m) || (needs_h1 && !a.h1) || (needs_h2 && !a.h2)) {
    throw OpError("LATENT_STEP: op " + std::to_string(static_cast<int>(a.op)) + " is missing an input");
  }
}

}  // namespace nanscope
