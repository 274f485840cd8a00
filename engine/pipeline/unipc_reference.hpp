#pragma once
// UniPC as A1111 and ComfyUI run it: the UniPC authors' reference code
// (github.com/wl-zhao/UniPC, uni_pc.py: NoiseScheduleVP, UniPC.sample with
// method "multistep", multistep_uni_pc_bh_update), which neither tool takes
// from diffusers. make_sampler() returns this sampler for kind unipc when the
// config's unipc_impl is a1111 or comfyui (settings unipc.*).
//
// A1111 ("UniPC", modules/sd_samplers_timesteps_impl.py unipc(), the reference
// in modules/models/diffusion/uni_pc/uni_pc.py):
//  - the run takes len(range(0, 1000, 1000 // steps)) steps (CompVisSampler.
//    get_timesteps: A1111 passes that list's length to UniPC), e.g. 31 for 30;
//  - the noise schedule is NoiseScheduleVP('discrete') over the model's
//    alphas_cumprod (LDM's: float64 betas and cumprod, stored as float32):
//    continuous time t in (0, 1], log(alpha_t) interpolated linearly between
//    t_j = (j + 1) / 1000 and 0.5 log(alphas_cumprod[j]) (interpolate_fn);
//  - the steps' times from t_T = 1 to t_0 = 1/1000 by uni_pc_skip_type:
//    time_uniform (torch.linspace), time_quadratic (linspace of sqrt t,
//    squared) or logSNR (linspace in lambda, mapped back by inverse_lambda);
//  - the model sees timestep (t - 1/1000) * 1000 (fractional) and the latent
//    unscaled (x starts as the initial noise), its eps turned into x0 with the
//    schedule's alpha_t and sigma_t;
//  - orders: the first order-1 updates at orders 1, 2, ...; then uni_pc_order,
//    or min(order, steps + 1 - step) with uni_pc_lower_order_final; no
//    corrector on the last update; steps >= order or A1111 fails (assert);
//  - the result is the latent at t_0 (alpha ~ 0.99957), decoded as it is.
// ComfyUI (comfy/extra_samplers/uni_pc.py sample_unipc, uni_pc and
// uni_pc_bh2):
//  - the times are the run's k-diffusion sigmas (ComfyUI's scheduler), the
//    final 0 replaced by 0.001, through SigmaConvert (alpha = 1/sqrt(s^2+1));
//  - x = noise / sqrt(1 + sigma_0^2) (noise already scaled by sqrt(1 +
//    sigma_0^2) at full denoise: the initial noise itself);
//  - order min(3, steps - 1), lower order final, variant bh1 or bh2 (the
//    unipc.* settings may change them: 3 becomes unipc.order);
//  - the model sees the timestep nearest its sigma (ModelSamplingDiscrete.
//    timestep: argmin |log sigma - log sigmas|, an integer);
//  - the result is divided by alpha(0.001).
// Arithmetic: the schedule's scalars in float32 as torch computes them; the
// linear systems in double (torch.linalg.solve in float32: rho differs in the
// last float bits); each update is one linear combination of the latent and
// the stored data predictions (diffusers' own UniPC here does the same), so
// latents agree with the reference to about 1e-6 of their size, not bit for bit.
// Not implemented (ConfigError): A1111's uni_pc_variant vary_coeff, orders
// above 3 (A1111 allows up to 50), v-prediction models, and A1111's img2img
// (hires fix) UniPC, which runs t_enc steps from t = timesteps[t_enc - 1] /
// 1000 + 1/1000 on a latent noised at timesteps[t_enc]: a schedule of its own.

#include <memory>

#include "pipeline/scheduler.hpp"

namespace nanscope::pipeline {

std::unique_ptr<Sampler> make_unipc_reference_sampler(const SchedulerConfig& config);

// The number of steps A1111's UniPC runs when asked for `steps`:
// len(range(0, 1000, 1000 // steps)).
int a1111_unipc_steps(int steps);

}  // namespace nanscope::pipeline
