// GROUP_NORM host side (kernels/group_norm.cl): one work-group per (sample,
// group), SILU fused when asked. Built with exact f32 division/sqrt so native statistics match the
// reference bit for bit.
#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

namespace {

std::string norm_options(OpenClBackend& be, const Precision& p) {
  return be.precision_options(Precision{p.dtype, p.accumulate, SoftmaxPrecision::f32}) +
         detail::exact_math_options(be.device());
}

[[maybe_unused]] const bool kRegistered = (register_program_options("group_norm", norm_options), true);

}  // namespace

void OpenClBackend::group_norm(const GroupNormArgs& a) {
  const char* op = "GROUP_NORM";
  if (a.n * a.c * a.s == 0) return;
  cl_kernel k = kernel("group_norm", "group_norm", norm_options(*this, a.precision));
  const size_t local = detail::reduction_group_size(*this);
  set_args(k, buffer(a.x), a.gamma ? buffer(*a.gamma) : cl_mem{nullptr}, a.beta ? buffer(*a.beta) : cl_mem{nullptr},
           buffer(a.out), detail::to_uint(a.c, op, "c"), cl_ulong(a.s), cl_uint(a.groups), a.eps,
           cl_int(a.gamma ? 1 : 0), cl_int(a.beta ? 1 : 0), cl_int(a.silu ? 1 : 0),
           cl_uint(streams_output(a.out.bytes()) ? 1 : 0), LocalMem{std::max<size_t>(local, 2) * sizeof(float)});
  const size_t global[1] = {local * static_cast<size_t>(a.n * a.groups)};
  const size_t local_size[1] = {local};
  launch(k, op, 1, global, local_size);
}

}  // namespace nanscope::opencl
