#include "inspect/layer_trace.hpp"

#include <cmath>

#include "backend/backend.hpp"

namespace nanscope::inspect {

LayerTracer::LayerTracer(std::string component, std::string call) : component_(std::move(component)) {
  trace_.call = std::move(call);
}

bool LayerTracer::finite(Backend& be, const Tensor& t) {
  const std::weak_ptr<Storage> key = t.storage_ptr();
  auto it = finite_.find(key);
  if (it != finite_.end()) return it->second;
  const std::vector<float> v = be.download(t).to_f32();
  bool ok = true;
  for (float x : v) {
    if (!std::isfinite(x)) {
      ok = false;
      break;
    }
  }
  finite_.emplace(key, ok);
  return ok;
}

void LayerTracer::on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const> inputs,
                        const Tensor& output) {
  Backend& be = ctx.be();
  OpRecord r;
  r.index = static_cast<int>(trace_.ops.size());
  r.component = component_;
  r.path = ctx.path;
  r.op = std::string(op);
  r.shape = output.shape();
  r.dtype = output.dtype();
  r.precision = ctx.precision.describe();
  if (ctx.backend && ctx.backend->native_half_in_hardware(ctx.precision)) r.precision += " (half units)";
  if (op == "ATTENTION") {
    r.attention = std::string(attention_impl_name(ctx.attention.impl));
    if (ctx.attention.impl == AttentionImpl::sliced)
      r.attention += "(" + std::to_string(ctx.attention.slice_size) + ")";
  }
  for (const Tensor* in : inputs) {
    if (in != nullptr && !finite(be, *in)) r.inputs_finite = false;
  }
  const std::vector<float> out = be.download(output).to_f32();
  r.output = compute_stats(out, dtype_max(output.dtype()));
  r.emulated_fault = ctx.faults != nullptr && ctx.faults->altered(output);
  finite_[std::weak_ptr<Storage>(output.storage_ptr())] = r.output.nonfinite() == 0;
  trace_.ops.push_back(std::move(r));
}

LayerTrace LayerTracer::trace() const {
  LayerTrace t = trace_;
  t.origin = t.near_limit = -1;
  for (const OpRecord& r : t.ops) {
    if (t.origin < 0 && r.inputs_finite && r.output.nonfinite() > 0) t.origin = r.index;
    // Within 10% of the limit, or past it (an overflow to +-Inf from finite inputs).
    const bool overflowed = r.inputs_finite && r.output.pos_inf + r.output.neg_inf > 0;
    if (t.near_limit < 0 && (r.output.near_limit > 0 || overflowed)) t.near_limit = r.index;
  }
  return t;
}

}  // namespace nanscope::inspect
