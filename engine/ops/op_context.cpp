#include "ops/op_context.hpp"

#include "core/error.hpp"
#include "ops/op_util.hpp"

namespace nanscope {

OpContext OpContext::child(std::string_view name) const {
  OpContext c = *this;
  if (name.empty()) return c;
  c.path = path.empty() ? std::string(name) : path + "." + std::string(name);
  if (policy != nullptr) policy->resolve(c.path, c.precision, c.attention);
  return c;
}

Backend& OpContext::be() const {
  if (backend == nullptr) {
    throw OpError("op called without a backend" + (path.empty() ? std::string() : " in " + path) +
                  ": set OpContext::backend to the device's backend (make_backend)");
  }
  return *backend;
}

std::string repeated_call_key(const OpContext& ctx, std::string_view what, const Tensor& input) {
  std::string key(what);
  key += ' ';
  key += shape_str(input.shape());
  key += ' ';
  key += dtype_name(input.dtype());
  key += ' ';
  key += dtype_name(ctx.precision.dtype);
  if (ctx.mixed_precision) key += " mixed";
  if (traces_each_module(ctx)) key += " traced";
  if (ctx.faults != nullptr) key += " faults";
  return key;
}

namespace ops::detail {

std::string format_op_message(const OpContext& ctx, std::string_view op,
                              std::span<const std::pair<std::string_view, const Tensor*>> tensors,
                              std::string_view what) {
  std::string s(op);
  if (!ctx.path.empty()) s += " " + ctx.path;
  for (const auto& [name, t] : tensors) {
    s += " ";
    s += name;
    if (t == nullptr || !t->defined()) {
      s += t == nullptr ? "=none" : "=undefined";
    } else {
      s += shape_str(t->shape()) + " " + std::string(dtype_name(t->dtype()));
    }
  }
  if (ctx.backend != nullptr) s += " on \"" + ctx.backend->device().name + "\"";
  s += ": ";
  s += what;
  return s;
}

}  // namespace ops::detail

std::string op_message(const OpContext& ctx, std::string_view op,
                       std::initializer_list<std::pair<std::string_view, const Tensor*>> tensors,
                       std::string_view what) {
  return ops::detail::format_op_message(ctx, op, {tensors.begin(), tensors.size()}, what);
}

}  // namespace nanscope
