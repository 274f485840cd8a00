// CONCAT, SLICE, PERMUTE and CAST: copies into a new contiguous tensor.

#include <algorithm>
#include <array>
#include <vector>

#include "ops/op_util.hpp"
#include "ops/ops.hpp"

namespace nanscope::ops {

using detail::OpCall;

Tensor concat(const OpContext& ctx, std::span<const Tensor> parts, int dim) {
  if (ctx.mixed_precision && std::any_of(parts.begin(), parts.end(), [&ctx](const Tensor& p) {
        return p.defined() && p.dtype() != ctx.precision.dtype;
      })) {
    std::vector<Tensor> conformed;
    for (const Tensor& p : parts) conformed.push_back(detail::conform(ctx, p));
    return concat(ctx, conformed, dim);
  }
  const Tensor* first = parts.empty() ? nullptr : &parts[0];
  const Tensor* second = parts.size() > 1 ? &parts[1] : nullptr;
  const OpCall call(ctx, "CONCAT", {{"parts[0]", first}, {"parts[1]", second}});
  call.require(!parts.empty(), "no tensors to concatenate");
  const int r = parts[0].rank();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string name = "parts[" + std::to_string(i) + "]";
    call.check_tensor(name, parts[i]);
    call.check_rank(name, parts[i], 1, 1 << 20);
  }
  const int d = detail::normalize_dim(call, dim, r);
  Shape out_shape = parts[0].shape();
  out_shape[static_cast<std::size_t>(d)] = 0;
  std::vector<std::int64_t> dims;
  std::vector<const Tensor*> inputs;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    bool same = p.rank() == r;
    for (int j = 0; same && j < r; ++j) same = j == d || p.dim(j) == parts[0].dim(j);
    call.require(same, "parts[" + std::to_string(i) + "] " + shape_str(p.shape()) + " does not match parts[0] " +
                           shape_str(parts[0].shape()) + " outside dimension " + std::to_string(d));
    dims.push_back(p.dim(d));
    out_shape[static_cast<std::size_t>(d)] += p.dim(d);
    inputs.push_back(&p);
  }
  Tensor out = call.allocate(out_shape);
  ConcatArgs args{inputs, out, detail::dims_product(out_shape, 0, d), detail::dims_product(out_shape, d + 1, r), dims};
  call.run(&Backend::concat, args);
  if (ctx.tracer) ctx.tracer->on_op(ctx, "CONCAT", inputs, out);
  return out;
}

Tensor slice(const OpContext& ctx, const Tensor& x, int dim, std::int64_t begin, std::int64_t end) {
  if (detail::needs_conform(ctx, {&x})) return slice(ctx, detail::conform(ctx, x), dim, begin, end);
  const OpCall call(ctx, "SLICE", {{"x", &x}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 1, 1 << 20);
  const int d = detail::normalize_dim(call, dim, x.rank());
  const std::int64_t size = x.dim(d);
  call.require(begin >= 0 && begin < end && end <= size,
               "slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of dimension " + std::to_string(d) +
                   " (size " + std::to_string(size) + ") must be non-empty and inside it");
  Shape out_shape = x.shape();
  out_shape[static_cast<std::size_t>(d)] = end - begin;
  Tensor out = call.allocate(out_shape);
  call.run(&Backend::slice, SliceArgs{x, out, detail::dims_product(x.shape(), 0, d), size,
                                      detail::dims_product(x.shape(), d + 1, x.rank()), begin, end});
  call.trace({&x}, out);
  return out;
}

Tensor permute(const OpContext& ctx, const Tensor& x, std::span<const int> perm) {
  if (detail::needs_conform(ctx, {&x})) return permute(ctx, detail::conform(ctx, x), perm);
  const OpCall call(ctx, "PERMUTE", {{"x", &x}});
  call.check_tensor("x", x);
  call.check_rank("x", x, 1, 4);
  const int r = x.rank();
  std::string perm_str;
  for (int p : perm) perm_str += (perm_str.empty() ? "" : ",") + std::to_string(p);
  std::vector<bool> seen(static_cast<std::size_t>(r), false);
  bool valid = static_cast<int>(perm.size()) == r;
  for (std::size_t i = 0; valid && i < perm.size(); ++i) {
    valid = perm[i] >= 0 && perm[i] < r && !seen[static_cast<std::size_t>(perm[i])];
    if (valid) seen[static_cast<std::size_t>(perm[i])] = true;
  }
  call.require(valid, "perm (" + perm_str + ") is not a permutation of the " + std::to_string(r) + " dimensions");
  // Pad to rank 4 with leading size-1 dimensions that stay in place.
  const int pad = 4 - r;
  std::array<std::int64_t, 4> in_shape{1, 1, 1, 1};
  std::array<int, 4> perm4{0, 1, 2, 3};
  Shape out_shape;
  for (int i = 0; i < r; ++i) {
    in_shape[static_cast<std::size_t>(pad + i)] = x.dim(i);
    perm4[static_cast<std::size_t>(pad + i)] = perm[static_cast<std::size_t>(i)] + pad;
    out_shape.push_back(x.dim(perm[static_cast<std::size_t>(i)]));
  }
  Tensor out = call.allocate(out_shape);
  call.run(&Backend::permute, PermuteArgs{x, out, in_shape, perm4});
  call.trace({&x}, out);
  return out;
}

Tensor cast(const OpContext& ctx, const Tensor& x, DType to) {
  const OpCall call(ctx, "CAST", {{"x", &x}});
  call.check_tensor("x", x, /*check_dtype=*/false);
  Tensor out = call.allocate(x.shape(), to);
  call.run(&Backend::cast, CastArgs{x, out});
  call.trace({&x}, out);
  return out;
}

}  // namespace nanscope::ops
