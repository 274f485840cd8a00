#pragma once
// What the sampler files share (samplers.cpp defines it): the Euler family's
// step coefficients, timestep spacing and initial noise sigma, and x0 for its
// prediction types. Only for samplers*.cpp; the pipeline uses scheduler.hpp.

#include <array>
#include <vector>

#include "pipeline/scheduler.hpp"

namespace nanscope::pipeline::sampler_detail {

// LatentOp::euler's coefficients: sigma, dt, and for v-prediction
// c_out = -sigma / sqrt(sigma^2 + 1) and var = sigma^2 + 1.
std::array<float, 8> euler_coefficients(float sigma, float dt);
// EulerDiscreteScheduler's float32 timesteps (its spacing rules; Heun, LMS and DPM++ SDE share them).
std::vector<float> euler_timesteps(const SchedulerConfig& c, int n);
// The Euler family's init_noise_sigma for a schedule's sigmas.
float euler_init_noise_sigma(const SchedulerConfig& c, const std::vector<float>& sigmas);
// x0 of (x, m) at `sigma` for the Euler family's prediction types.
void predict_x0(const Sampler& s, Backend& be, float sigma, const Tensor& x, const Tensor& m, Tensor& x0);

}  // namespace nanscope::pipeline::sampler_detail
