#pragma once
// The cold-start estimate of a run (report R4): before any work, which kernel
// programs the run needs that are not cached on its device, and about how
// long building them takes (Backend::plan_kernels). Logged, and told to the
// observer as a status line; while the run waits on the compiler, every
// build event says "building 7 of 12 programs, about 9 s left".

#include <vector>

#include "backend/backend.hpp"
#include "config/run_config.hpp"

namespace nanscope::pipeline {

// Every precision a run computes in: each component's, and each override's
// fields applied on its component's (both the component's and the module's
// dtype, as mixed-precision modules cast on use).
std::vector<Precision> run_precisions(const RunConfig& config);

// Plans the run's programs on `be` (logged at info when some must be built);
// `calls`: the run's GEMM, convolution and attention calls from the memory
// plan's dry run (pipeline/memory_plan.hpp), whose shapes pick the variants.
KernelPlan plan_run_kernels(Backend& be, const RunConfig& config, const KernelCalls& calls);

}  // namespace nanscope::pipeline
