#pragma once
// The samplers behind make_sampler() (scheduler.hpp). Each file-local class
// holds its schedule rules and a short step function: samplers.cpp (Euler,
// Euler ancestral, DDIM), samplers_dpm.cpp, samplers_kdiffusion.cpp and
// samplers_timestep.cpp.

#include <memory>

#include "pipeline/scheduler.hpp"

namespace nanscope::pipeline {

std::unique_ptr<Sampler> make_euler_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_euler_ancestral_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_ddim_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_dpmpp_sampler(const SchedulerConfig& config);  // dpmpp_2m and dpmpp_2m_sde
std::unique_ptr<Sampler> make_unipc_sampler(const SchedulerConfig& config);
// The ones below: 2 model calls per step (heun, dpmpp_sde) or noise each step (ddpm, lcm).
std::unique_ptr<Sampler> make_heun_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_lms_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_dpmpp_sde_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_ddpm_sampler(const SchedulerConfig& config);
std::unique_ptr<Sampler> make_lcm_sampler(const SchedulerConfig& config);

}  // namespace nanscope::pipeline
