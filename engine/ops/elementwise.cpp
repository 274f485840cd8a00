// ADD, SUB, MUL with numpy broadcasting of b onto a's shape. The shapes are
// collapsed to the rank-4 form of BinaryArgs: runs of dimensions where b is
// (or is not) broadcast merge into one, so any rank works as long as the
// broadcast pattern alternates at most four times.

#include <array>
#include <vector>

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

namespace {

// `over_a`: the output is written over a's buffer (detail::reusable(ctx, a), checked by the caller).
Tensor binary(const OpContext& ctx, std::string_view op, const Tensor& a, const Tensor& b, BinaryOp kind,
              bool over_a = false) {
  if (detail::needs_conform(ctx, {&a, &b})) {
    return binary(ctx, op, detail::conform(ctx, a), detail::conform(ctx, b), kind);
  }
  const detail::OpCall call(ctx, op, {{"a", &a}, {"b", &b}});
  call.check_tensor("a", a);
  call.check_tensor("b", b);
  call.check_rank("a", a, 1, 1 << 20);
  call.check_rank("b", b, 1, a.rank());
  const int r = a.rank();
  const int lead = r - b.rank();
  // Groups of consecutive dims sharing one broadcast state: {size, broadcast}.
  std::vector<std::pair<std::int64_t, bool>> groups;
  for (int i = 0; i < r; ++i) {
    const std::int64_t ad = a.dim(i);
    const std::int64_t bd = i < lead ? 1 : b.dim(i - lead);
    call.require(bd == ad || bd == 1, "b cannot broadcast to a: dimension " + std::to_string(i) + " is " +
                                          std::to_string(bd) + " in b and " + std::to_string(ad) + " in a");
    if (ad == 1) continue;  // size-1 dims change nothing
    const bool bcast = bd == 1;
    if (!groups.empty() && groups.back().second == bcast) {
      groups.back().first *= ad;
    } else {
      groups.emplace_back(ad, bcast);
    }
  }
  call.require(groups.size() <= 4, "the broadcast pattern of b alternates more than 4 times; reshape the inputs");
  std::array<std::int64_t, 4> shape4{1, 1, 1, 1}, strides{0, 0, 0, 0};
  const std::size_t off = 4 - groups.size();
  std::int64_t stride = 1;  // b is contiguous over its non-broadcast dims
  for (std::size_t g = groups.size(); g-- > 0;) {
    shape4[off + g] = groups[g].first;
    if (!groups[g].second) {
      strides[off + g] = stride;
      stride *= groups[g].first;
    }
  }
  Tensor out = over_a ? a : call.allocate(a.shape());
  call.run(&Backend::binary, BinaryArgs{a, b, out, kind, shape4, strides, ctx.precision});
  call.trace({&a, &b}, out);
  return out;
}

}  // namespace

Tensor add(const OpContext& ctx, const Tensor& a, const Tensor& b) { return binary(ctx, "ADD", a, b, BinaryOp::add); }
Tensor add_reusing(const OpContext& ctx, Tensor a, const Tensor& b) {
  const bool over_a = detail::reusable(ctx, a) && a.storage() != b.storage();
  return binary(ctx, "ADD", a, b, BinaryOp::add, over_a);
}
Tensor sub(const OpContext& ctx, const Tensor& a, const Tensor& b) { return binary(ctx, "SUB", a, b, BinaryOp::sub); }
Tensor mul(const OpContext& ctx, const Tensor& a, const Tensor& b) { return binary(ctx, "MUL", a, b, BinaryOp::mul); }

}  // namespace nanscope::ops
