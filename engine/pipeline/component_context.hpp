#pragma once
// The op context a component's root runs in: its precision, attention and,
// when the config has per-module overrides, the policy that resolves each
// module's own (a run, the device probe, the benches).

#include "config/run_config.hpp"
#include "ops/op_context.hpp"

namespace nanscope::pipeline {

// Per-module overrides within one component: accumulation, softmax,
// attention, and the dtype a module computes in (its weights stay stored in
// the component's dtype and are cast on use; OpContext::mixed_precision).
// `base`: the component's dtype in this call (a decode retried in f32 passes f32).
class ComponentPolicy final : public PrecisionPolicy {
 public:
  ComponentPolicy(const RunConfig& config, Component c, DType base) : config_(config), component_(c), base_(base) {}
  void resolve(std::string_view path, Precision& p, AttentionConfig& a) const override;

 private:
  const RunConfig& config_;
  Component component_;
  DType base_;
};

// The context of a component's root in `dtype`, with `policy` (made for the
// same config and component) when the config has overrides.
OpContext component_context(Backend& be, const RunConfig& config, Component c, const ComponentPolicy* policy,
                            DType dtype);

}  // namespace nanscope::pipeline
