// LAYER_NORM host side (kernels/layer_norm.cl): one work-group per row, same
// statistics rules and build options as group norm.
#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

namespace {

std::string norm_options(OpenClBackend& be, const Precision& p) {
  return be.precision_options(Precision{p.dtype, p.accumulate, SoftmaxPrecision::f32}) +
         detail::exact_math_options(be.device());
}

[[maybe_unused]] const bool kRegistered = (register_program_options("layer_norm", norm_options), true);

}  // namespace

void OpenClBackend::layer_norm(const LayerNormArgs& a) {
  if (a.rows * a.d == 0) return;
  cl_kernel k = kernel("layer_norm", "layer_norm", norm_options(*this, a.precision));
  const size_t local = detail::reduction_group_size(*this);
  set_args(k, buffer(a.x), a.gamma ? buffer(*a.gamma) : cl_mem{nullptr}, a.beta ? buffer(*a.beta) : cl_mem{nullptr},
           buffer(a.out), cl_ulong(a.d), a.eps, cl_int(a.gamma ? 1 : 0), cl_int(a.beta ? 1 : 0),
           LocalMem{std::max<size_t>(local, 2) * sizeof(float)});
  const size_t global[1] = {local * static_cast<size_t>(a.rows)};
  const size_t local_size[1] = {local};
  launch(k, "LAYER_NORM", 1, global, local_size);
}

}  // namespace nanscope::opencl
