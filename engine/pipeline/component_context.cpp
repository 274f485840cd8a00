#include "pipeline/component_context.hpp"

namespace nanscope::pipeline {

void ComponentPolicy::resolve(std::string_view path, Precision& p, AttentionConfig& a) const {
  p = config_.resolve(component_, path);
  p.dtype = config_.override_dtype(component_, path).value_or(base_);
  a = config_.resolve_attention(component_, path);
}

OpContext component_context(Backend& be, const RunConfig& config, Component c, const ComponentPolicy* policy,
                            DType dtype) {
  OpContext ctx;
  ctx.backend = &be;
  ctx.precision = config.component(c).precision;
  ctx.precision.dtype = dtype;
  ctx.attention = config.component(c).attention;
  if (!config.overrides.empty()) ctx.policy = policy;
  ctx.mixed_precision = config.has_dtype_overrides(c);
  return ctx;
}

}  // namespace nanscope::pipeline
