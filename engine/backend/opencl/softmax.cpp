// SOFTMAX host side (kernels/softmax.cl): one work-group per row. Native
// softmax builds with exact f32 division and, where the device has doubles,
// exp in double (exact_math_options), so it matches the reference.
#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

namespace {

std::string softmax_options(OpenClBackend& be, const Precision& p) {
  return be.precision_options(Precision{p.dtype, Accumulate::f32, p.softmax}) + detail::exact_math_options(be.device());
}

[[maybe_unused]] const bool kRegistered = (register_program_options("softmax", softmax_options), true);

}  // namespace

void OpenClBackend::softmax(const SoftmaxArgs& a) {
  if (a.rows * a.d == 0) return;
  cl_kernel k = kernel("softmax", "softmax_rows", softmax_options(*this, a.precision));
  const size_t local = detail::reduction_group_size(*this);
  set_args(k, buffer(a.x), cl_ulong(0), buffer(a.out), cl_ulong(0), detail::to_uint(a.d, "SOFTMAX", "d"), cl_uint(0),
           cl_uint(0), LocalMem{std::max<size_t>(local, 2) * sizeof(float)});
  const size_t global[1] = {local * static_cast<size_t>(a.rows)};
  const size_t local_size[1] = {local};
  launch(k, "SOFTMAX", 1, global, local_size);
}

}  // namespace nanscope::opencl
