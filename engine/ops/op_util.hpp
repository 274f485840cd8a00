#pragma once
// Checks, allocation and tracing shared by the op files (internal to engine/ops).
// Every failure throws OpError (DeviceError for allocation) with op_message().

#include <array>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "ops/op_context.hpp"

namespace nanscope::ops::detail {

using Named = std::initializer_list<std::pair<std::string_view, const Tensor*>>;

// One op call: its name, context and named inputs, so every check can build
// the standard message.
class OpCall {
 public:
  // Throws Cancelled when the context's run was cancelled: no op starts after a Cancel.
  OpCall(const OpContext& ctx, std::string_view op, Named tensors) : ctx_(ctx), op_(op), tensors_(tensors) {
    if (ctx.cancel != nullptr && ctx.cancel->cancelled()) throw Cancelled("cancelled before " + op_);
  }

  [[noreturn]] void fail(std::string_view what) const;
  void require(bool ok, std::string_view what) const {
    if (!ok) fail(what);
  }
  // Defined, on ctx.backend, no zero-size dimension, and (when `dtype` is set)
  // of that dtype. `name` is the argument's name in messages.
  void check_tensor(std::string_view name, const Tensor& t, bool check_dtype = true) const;
  // As check_tensor, for an optional tensor (null passes).
  void check_optional(std::string_view name, const Tensor* t) const {
    if (t) check_tensor(name, *t);
  }
  void check_rank(std::string_view name, const Tensor& t, int min_rank, int max_rank) const;
  // A 1-D tensor of `n` elements (bias, gamma, beta).
  void check_vector(std::string_view name, const Tensor* t, std::int64_t n) const;

  // ctx.be().empty with a failure message that names the op.
  Tensor allocate(const Shape& shape, DType dtype) const;
  Tensor allocate(const Shape& shape) const { return allocate(shape, ctx_.precision.dtype); }

  // Runs the backend's implementation of the op. A failure there (an allocation
  // the device refuses, a count too large for a kernel argument, an OpenCL
  // error) is rethrown as the same error type with this op's standard message
  // prefix, so it names the module and the inputs as well as the buffer.
  template <class Args>
  void run(void (Backend::*fn)(const Args&), const Args& args) const {
    try {
      (be().*fn)(args);
    } catch (const Error&) {
      rethrow_in_context();
    }
  }

  // Reports the op to ctx.tracer (if any) with the non-null inputs.
  void trace(std::initializer_list<const Tensor*> inputs, const Tensor& out) const;

  const OpContext& ctx() const { return ctx_; }
  Backend& be() const;
  const std::string& op() const { return op_; }

 private:
  [[noreturn]] void rethrow_in_context() const;

  const OpContext& ctx_;
  std::string op_;
  std::vector<std::pair<std::string_view, const Tensor*>> tensors_;
};

// Mixed precision (OpContext::mixed_precision): whether any defined input has
// another dtype than ctx.precision.dtype, and the input in that dtype. An op
// that needs it calls itself again with the conformed inputs. `traced`: the
// cast is a CAST op in the layer trace (activations: where a value stops
// fitting its module's dtype shows there); weights are cast untraced.
bool needs_conform(const OpContext& ctx, std::initializer_list<const Tensor*> inputs);

// Whether an op may write its output over input `t`: the caller handed over
// the only handle to the buffer (no view or copy of it remains), the input
// needs no cast, and nothing looks at the op's inputs afterwards (no layer
// trace, no fault emulation). Elementwise ops only: each output element replaces the
// input element it is computed from.
bool reusable(const OpContext& ctx, const Tensor& t);
Tensor conform(const OpContext& ctx, const Tensor& t, bool traced = true);
// As above; an undefined tensor for a null `t`.
Tensor conform_optional(const OpContext& ctx, const Tensor* t, bool traced);
// &t when `t` is defined, else null (the optional argument of the op's second call).
inline const Tensor* optional_arg(const Tensor& t) { return t.defined() ? &t : nullptr; }

// op_message for a list built at run time (op_context.cpp).
std::string format_op_message(const OpContext& ctx, std::string_view op,
                              std::span<const std::pair<std::string_view, const Tensor*>> tensors,
                              std::string_view what);

// Product of dims [begin, end).
std::int64_t dims_product(const Shape& s, int begin, int end);
// Normalises a possibly negative dimension index for rank r (throws through call).
int normalize_dim(const OpCall& call, int dim, int rank);

}  // namespace nanscope::ops::detail
