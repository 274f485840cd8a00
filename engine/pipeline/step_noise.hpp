#pragma once
// A1111's "Eta noise seed delta" (ENSD, setting noise.eta_seed_delta): the seed
// of the generator that the samplers' per-step noise comes from.
//
// A1111 (modules/rng.py ImageRNG, since 1.6; processing.py before it, with
// torch.manual_seed(seed + ENSD) after the initial noise): the initial noise
// is the first draw of a generator seeded `seed`; then, when
// opts.eta_noise_seed_delta is not 0, every image's generator is replaced by
// create_generator(seed + ENSD), a new generator of the same source, and the
// step noise (k-diffusion's randn_like, hijacked by TorchHijack: Euler a, DPM2
// a, DPM++ 2S a, LCM, DDIM with eta) is drawn from it in order:
//  - RNG CPU: torch.Generator("cpu").manual_seed(seed + ENSD), torch.randn on
//    the CPU (NaNscope's torch-cpu source seeded seed + ENSD; MT19937 takes
//    the low 32 bits of that sum);
//  - RNG GPU: torch.Generator("cuda").manual_seed(seed + ENSD) (curand
//    Philox, key = the whole 64-bit seed, offset 0), and RNG NV: A1111's
//    rng_philox.Generator(seed + ENSD), its CPU computation of the same: both
//    NaNscope's torch-cuda source seeded seed + ENSD, starting at offset 0.
// With ENSD 0 the step noise continues the initial noise's generator (what
// diffusers does with its one generator). The SDE samplers (DPM++ SDE, DPM++
// 2M SDE) draw Brownian-tree noise seeded by the image seed in A1111, which
// ENSD does not change; NaNscope, which cannot reproduce that noise anyway,
// applies the delta to every sampler's step noise alike. A1111 writes "ENSD"
// into the infotext only for samplers flagged uses_ensd with eta != 0
// (sd_samplers_common.is_sampler_using_eta_noise_seed_delta).

#include <cstdint>

namespace nanscope::pipeline {

// seed + delta modulo 2^64 (a negative sum wraps, as torch's manual_seed reads it).
constexpr std::uint64_t step_noise_seed(std::uint64_t seed, std::int64_t delta) {
  return seed + static_cast<std::uint64_t>(delta);
}

}  // namespace nanscope::pipeline
