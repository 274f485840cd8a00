// ADD / SUB / MUL host side: one launch over the 4-D view of BinaryArgs, b read
// through its broadcast strides (kernels/elementwise.cl).
#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl {

using detail::ceil_div;
using detail::to_uint;

void OpenClBackend::binary(const BinaryArgs& args) {
  const auto& s = args.shape4;
  const auto& bs = args.b_strides;
  if (s[0] * s[1] * s[2] * s[3] == 0) return;
  const char* name = "binary_add";
  const char* op = "ADD";
  if (args.op == BinaryOp::sub) name = "binary_sub", op = "SUB";
  if (args.op == BinaryOp::mul) name = "binary_mul", op = "MUL";
  cl_kernel k = kernel("elementwise", name, precision_options(detail::storage_only(args.out.dtype())));
  set_args(k, buffer(args.a), buffer(args.b), buffer(args.out), to_uint(s[1], op, "dim 1"), to_uint(s[2], op, "dim 2"),
           to_uint(s[3], op, "dim 3"), cl_ulong(bs[0]), cl_ulong(bs[1]), cl_ulong(bs[2]), cl_ulong(bs[3]));
  to_uint(s[0] * s[1], op, "dims 0*1");
  const size_t global[3] = {ceil_div(s[3], 16), static_cast<size_t>(s[2]), static_cast<size_t>(s[0] * s[1])};
  launch(k, op, 3, global, nullptr);
}

}  // namespace nanscope::opencl
