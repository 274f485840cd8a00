// Reference LATENT_STEP, on host memory: it runs the element functions of
// kernels/latent.cl itself (that file's first part is C++ as well), so both
// backends do the same f32 operations in the same order.

#include <string>

#include "backend/reference/host_access.hpp"
#include "core/error.hpp"

namespace nanscope::reference {

namespace latent_math {
#include "latent.cl"
}  // namespace latent_math

namespace {

float* f32_data(const Tensor& t, const char* what) {
  if (t.dtype() != DType::f32) {
    throw OpError(std::string("LATENT_STEP: ") + what + " must be f32, got " + std::string(dtype_name(t.dtype())));
  }
  return reinterpret_cast<float*>(detail::storage_of(t).data());
}

}  // namespace

void ReferenceBackend::latent_step(const LatentStepArgs& a) {
  check_latent_step(a);
  const float* x = f32_data(a.x, "x") + a.x_offset;
  const float* m = a.m ? f32_data(*a.m, "m") + a.m_offset : nullptr;
  const float* h1 = a.h1 ? f32_data(*a.h1, "h1") : nullptr;
  const float* h2 = a.h2 ? f32_data(*a.h2, "h2") : nullptr;
  float* out = f32_data(a.out, "out") + a.out_offset;
  float* x0 = a.x0 ? f32_data(*a.x0, "x0") : nullptr;
  const int op = static_cast<int>(a.op);
  for (std::int64_t i = 0; i < a.n; ++i) {
    float d = 0.0f;
    const float r = latent_math::ns_latent_element(op, a.prediction, a.flag, x[i], m ? m[i] : 0.0f, h1 ? h1[i] : 0.0f,
                                                   h2 ? h2[i] : 0.0f, a.c.data(), &d);
    out[i] = r;
    if (x0) x0[i] = d;
  }
}

}  // namespace nanscope::reference
