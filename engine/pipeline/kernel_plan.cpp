#include "pipeline/kernel_plan.hpp"

#include <algorithm>

#include "core/log.hpp"

namespace nanscope::pipeline {

std::vector<Precision> run_precisions(const RunConfig& config) {
  std::vector<Precision> out;
  auto add = [&out](const Precision& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (Component c : kComponents) add(config.component(c).precision);
  for (const PrecisionOverride& o : config.overrides) {
    for (Component c : kComponents) {
      if (o.pattern.rfind(std::string(component_name(c)), 0) != 0) continue;
      Precision p = config.component(c).precision;
      if (o.accumulate) p.accumulate = *o.accumulate;
      if (o.softmax) p.softmax = *o.softmax;
      add(p);
      if (o.dtype) {
        p.dtype = *o.dtype;
        add(p);
      }
    }
  }
  return out;
}

KernelPlan plan_run_kernels(Backend& be, const RunConfig& config, const KernelCalls& calls) {
  const std::vector<Precision> ps = run_precisions(config);
  KernelPlan plan = be.plan_kernels(ps, calls);
  if (plan.items.empty()) return plan;
  if (plan.to_build > 0) {
    log::info("kernels: {}", plan.describe(be.device().name));
  } else {
    log::debug("kernels: {}", plan.describe(be.device().name));
  }
  return plan;
}

}  // namespace nanscope::pipeline
