// LATENT_STEP host side: the samplers' per-element arithmetic on the device
// (kernels/latent.cl; the reference backend compiles the same file as C++,
// backend/reference/latent_step.cpp).

#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

namespace {

// latent.cl is f32 only; its divisions must be correctly rounded to match the
// reference (and torch) where the device allows it.
std::string latent_options(OpenClBackend& be, const Precision&) {
  return be.precision_options(detail::storage_only(DType::f32)) + detail::exact_math_options(be.device());
}
[[maybe_unused]] const bool kRegistered = (register_program_options("latent", latent_options), true);

}  // namespace

void OpenClBackend::latent_step(const LatentStepArgs& a) {
  if (a.n == 0) return;
  check_latent_step(a);
  const cl_mem x = buffer(a.x);
  // Unused inputs are bound to x (the kernel does not read them).
  const cl_mem m = a.m ? buffer(*a.m) : x, h1 = a.h1 ? buffer(*a.h1) : x, h2 = a.h2 ? buffer(*a.h2) : x;
  const cl_mem x0 = a.x0 ? buffer(*a.x0) : x;
  cl_float16 coef{};
  for (std::size_t i = 0; i < a.c.size(); ++i) coef.s[i] = a.c[i];
  cl_kernel k = kernel("latent", "latent_step", latent_options(*this, detail::storage_only(DType::f32)));
  set_args(k, cl_int(static_cast<int>(a.op)), cl_int(a.prediction), cl_int(a.flag), x, cl_ulong(a.x_offset), m,
           cl_ulong(a.m_offset), h1, h2, buffer(a.out), cl_ulong(a.out_offset), x0, cl_int(a.x0 ? 1 : 0), coef,
           detail::to_uint(a.n, "LATENT_STEP", "n"));
  const size_t global[1] = {detail::ceil_div(a.n, 64) * 64};
  launch(k, "LATENT_STEP", 1, global, nullptr);
}

}  // namespace nanscope::opencl
