#include "ops/op_util.hpp"

#include <new>

#include "ops/ops.hpp"

namespace nanscope::ops::detail {

void OpCall::fail(std::string_view what) const { throw OpError(format_op_message(ctx_, op_, tensors_, what)); }

Backend& OpCall::be() const {
  if (ctx_.backend == nullptr) fail("no backend in the op context: set OpContext::backend (make_backend)");
  return *ctx_.backend;
}

void OpCall::check_tensor(std::string_view name, const Tensor& t, bool check_dtype) const {
  const std::string n(name);
  require(t.defined(), "input " + n + " is an undefined tensor (never allocated or uploaded)");
  require(be().owns(t), "input " + n + " lives on another device; upload it to \"" + be().device().name +
                            "\" first (work never moves between devices silently)");
  for (auto d : t.shape()) {
    require(d > 0,
            "input " + n + " " + shape_str(t.shape()) + " has a zero-size dimension; ops need non-empty tensors");
  }
  if (check_dtype) {
    const DType want = ctx_.precision.dtype;
    require(t.dtype() == want, "input " + n + " is " + std::string(dtype_name(t.dtype())) + " but the precision is " +
                                   std::string(dtype_name(want)) + "; cast it first (ops::cast)");
  }
}

void OpCall::check_rank(std::string_view name, const Tensor& t, int min_rank, int max_rank) const {
  if (t.rank() >= min_rank && t.rank() <= max_rank) return;
  std::string want = min_rank == max_rank ? std::to_string(min_rank)
                     : max_rank > 64      ? "at least " + std::to_string(min_rank)
                                          : std::to_string(min_rank) + " to " + std::to_string(max_rank);
  fail("input " + std::string(name) + " " + shape_str(t.shape()) + " has rank " + std::to_string(t.rank()) +
       ", expected rank " + want);
}

void OpCall::check_vector(std::string_view name, const Tensor* t, std::int64_t n) const {
  if (t == nullptr) return;
  check_tensor(name, *t);
  require(t->rank() == 1 && t->dim(0) == n,
          std::string(name) + " must have shape [" + std::to_string(n) + "], got " + shape_str(t->shape()));
}

Tensor OpCall::allocate(const Shape& shape, DType dtype) const {
  Backend& backend = be();
  try {
    return backend.empty(shape, dtype);
  } catch (const DeviceError& e) {
    // The backend's message names the buffer already ("cannot allocate [2,64,8,8] f32 (...) on ...").
    std::string_view what = e.what();
    const std::string_view prefix = "cannot allocate ";
    if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
    throw DeviceError(format_op_message(ctx_, op_, tensors_, "cannot allocate the output " + std::string(what)));
  } catch (const std::bad_alloc&) {
    throw DeviceError(format_op_message(ctx_, op_, tensors_,
                                        "cannot allocate the output " + shape_str(shape) + " " +
                                            std::string(dtype_name(dtype)) + ": out of host memory"));
  }
}

void OpCall::rethrow_in_context() const {
  const auto in_context = [this](const Error& e) {
    std::string_view what = e.what();
    // Backend messages often start with the op's name already.
    if (what.starts_with(op_ + ": ")) what.remove_prefix(op_.size() + 2);
    return format_op_message(ctx_, op_, tensors_, what);
  };
  try {
    throw;
  } catch (const ClError& e) {
    throw ClError(in_context(e), e.status());
  } catch (const DeviceError& e) {
    throw DeviceError(in_context(e));
  } catch (const OpError& e) {
    throw OpError(in_context(e));
  }
}

void OpCall::trace(std::initializer_list<const Tensor*> inputs, const Tensor& out) const {
  if (ctx_.tracer == nullptr) return;
  std::vector<const Tensor*> present;
  for (const Tensor* t : inputs) {
    if (t != nullptr) present.push_back(t);
  }
  ctx_.tracer->on_op(ctx_, op_, present, out);
}

std::int64_t dims_product(const Shape& s, int begin, int end) {
  std::int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= s[static_cast<std::size_t>(i)];
  return p;
}

int normalize_dim(const OpCall& call, int dim, int rank) {
  const int d = dim < 0 ? dim + rank : dim;
  call.require(d >= 0 && d < rank,
               "dimension " + std::to_string(dim) + " is out of range for rank " + std::to_string(rank));
  return d;
}

bool needs_conform(const OpContext& ctx, std::initializer_list<const Tensor*> inputs) {
  if (!ctx.mixed_precision) return false;
  for (const Tensor* t : inputs) {
    if (t != nullptr && t->defined() && t->dtype() != ctx.precision.dtype) return true;
  }
  return false;
}

bool reusable(const OpContext& ctx, const Tensor& t) {
  return !traces_each_module(ctx) && ctx.faults == nullptr && t.defined() && t.dtype() == ctx.precision.dtype &&
         t.storage_ptr().use_count() == 1;
}

Tensor conform(const OpContext& ctx, const Tensor& t, bool traced) {
  if (!t.defined() || t.dtype() == ctx.precision.dtype) return t;
  if (traced) return cast(ctx, t, ctx.precision.dtype);
  OpContext quiet = ctx;
  quiet.tracer = nullptr;
  return cast(quiet, t, ctx.precision.dtype);
}

Tensor conform_optional(const OpContext& ctx, const Tensor* t, bool traced) {
  return t == nullptr ? Tensor() : conform(ctx, *t, traced);
}

}  // namespace nanscope::ops::detail
