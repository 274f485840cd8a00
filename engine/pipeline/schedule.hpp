#pragma once
// The noise schedule arithmetic the diffusers 0.31 schedulers do before sampling:
// betas, alphas_cumprod, the training sigma table, timestep spacings, sigma
// interpolation, Karras sigmas and the sigma -> timestep inverse.
//
// diffusers computes these with a mix of float32 torch ops and float64 numpy ops.
// Each helper below reproduces one of those ops with the same precision and
// evaluation order, so alphas_cumprod comes out bit-identical to torch 1.13's
// and the sigmas agree to the last bit or two. That matters more than it looks:
// sigma near t=0 is sqrt((1-a)/a) with a = 0.99915, where one ulp of `a` is a
// 1e-4 relative change of sigma.

#include <cstdint>
#include <vector>

#include "pipeline/scheduler_config.hpp"

namespace nanscope::pipeline::schedule {

// torch.linspace(start, end, steps, dtype=float32) on the CPU: step = (end-start)/(steps-1)
// in float, values computed from both ends towards the middle, 8-wide vector blocks
// whose base is fma(step, idx, start) (the Debian torch 1.13 AVX2 build contracts
// it) and whose lanes add k*step without FMA. Checked bit-exact against torch.
std::vector<float> torch_linspace_f32(float start, float end, std::int64_t steps);

// np.linspace(start, stop, num) in float64 (endpoint included).
std::vector<double> numpy_linspace(double start, double stop, std::int64_t num);

// np.arange(start, stop, step) in float64: length ceil((stop-start)/step), values
// start + i*delta with delta = (start+step) - start, as numpy fills them.
std::vector<double> numpy_arange(double start, double stop, double step);

// np.round: half to even.
double numpy_round(double x);

// The betas of the config's beta_schedule (float32, as torch makes them), rescaled
// to zero terminal SNR when the config asks.
std::vector<float> betas(const SchedulerConfig& config);

// cumprod(1 - betas): torch's CPU cumprod accumulates in double and rounds each
// output to float. With rescale_betas_zero_snr the last entry is 0; Euler, Euler
// ancestral and DPM++ then set it to 2^-24 (`clamp_zero_terminal`), DDIM does not.
std::vector<float> alphas_cumprod(const SchedulerConfig& config, bool clamp_zero_terminal);

// sqrt((1 - a) / a) per training timestep, in float32 (torch ops).
std::vector<float> training_sigmas(const std::vector<float>& alphas_cumprod);

// np.interp(x, arange(len(table)), table) in float64.
double interp(double x, const std::vector<float>& table);

// diffusers' _convert_to_karras: rho = 7 ramp from sigma_max to sigma_min, float64.
std::vector<double> karras_sigmas(double sigma_min, double sigma_max, std::int64_t n);

// diffusers' _sigma_to_t: the fractional training timestep whose log-sigma (linear
// interpolation in the float32 table `log_sigmas`) equals log(sigma).
double sigma_to_t(double sigma, const std::vector<float>& log_sigmas);

// log of each training sigma, in float32 (numpy computes np.log of a float32 array).
std::vector<float> log_sigmas(const std::vector<float>& training_sigmas);

// ---- The k-diffusion / A1111 / ComfyUI schedules over the training sigmas ----
// (k_diffusion/external.py DiscreteSchedule, A1111 modules/sd_schedulers.py,
// ComfyUI comfy/samplers.py), in float32 as torch computes them.

// k-diffusion's t_to_sigma: exp of the log-sigma table interpolated at t.
float t_to_sigma(float t, const std::vector<float>& log_sigmas);

// The sigmas of `schedule` for n steps, descending, without the final 0:
// normal (k-diffusion's get_sigmas: t = linspace(T-1, 0, n)), sgm_uniform
// (t = linspace(t(sigma_max), t(sigma_min), n+1) without its last), simple
// (every len/n-th training sigma from the top), ddim_uniform (ComfyUI's: every
// len//n-th from index 1, which may give a different count), exponential
// (k-diffusion's get_sigmas_exponential from sigma_max to sigma_min). Empty for
// the others (default, karras: the classes' own code).
std::vector<double> kdiffusion_sigmas(ScheduleId schedule, int n, const std::vector<float>& training_sigmas);

// diffusers' _convert_to_exponential: exp(torch.linspace(log max, log min, n)) in float32.
std::vector<double> exponential_sigmas(double sigma_min, double sigma_max, std::int64_t n);

// Solves R rho = b for the Vandermonde-like R[j][q] = r_q^j (j, q < n) by
// Gauss-Jordan elimination with partial pivoting, in double (UniPC's rho).
std::vector<double> solve_vandermonde(const std::vector<double>& r, const std::vector<double>& b, std::size_t n);

}  // namespace nanscope::pipeline::schedule
