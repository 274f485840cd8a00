#pragma once
// The four samplers behind make_sampler() (scheduler.hpp). Each file-local class
// holds its schedule rules and a short step function; see samplers.cpp.

#include <memory>

#include "pipeline/scheduler.hpp"

namespace nanscope::pipeline {

std::unique_ptr<Sampler> make_euler_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_euler_ancestral_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_ddim_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_dpmpp_sampler(const SchedulerConfig& config);

}  // namespace nanscope::pipeline
