#pragma once
// The sampler and schedule names other tools write into their images, mapped
// to NaNscope's SamplerId + ScheduleId.
//
// A1111 / Forge / SD.Next infotext: "Sampler: DPM++ 2M Karras" (before 1.9,
// the schedule folded into the name) or "Sampler: DPM++ 2M, Schedule type:
// Karras" (1.9 and later). Pass the "Schedule type" value, or "" when the
// field is absent. Without a suffix and without the field (old A1111), the
// k-diffusion samplers ran k-diffusion's default sigmas (our `normal`); with
// "Schedule type: Automatic" (1.9+), each sampler's own default: Karras for
// DPM++ 2M and DPM++ SDE, exponential for DPM++ 2M SDE, `normal` for Euler,
// Euler a, LMS and Heun (modules/sd_samplers_kdiffusion.py, its
// samplers_k_diffusion options). DDIM, UniPC, DDPM and LCM are timestep
// samplers there: their schedule is ours `default`.
//
// run_config_from_a1111 (the settings table) reads a plain name without
// "Schedule type" as schedule=default instead: that is the text NaNscope
// writes for default (which A1111 has no name for), and it must read back.
//
// ComfyUI KSampler: sampler_name ("dpmpp_2m", "euler_ancestral", "uni_pc",
// ...) and scheduler ("normal", "karras", "exponential", "sgm_uniform",
// "simple", "ddim_uniform"), as comfy/samplers.py names them.
//
// Unknown names give nullopt: the caller says which field held what.

#include <optional>
#include <string_view>

#include "config/run_config.hpp"

namespace nanscope {

struct SamplerChoice {
  SamplerId sampler;
  ScheduleId schedule;
  friend bool operator==(const SamplerChoice&, const SamplerChoice&) = default;
};

std::optional<SamplerChoice> sampler_from_a1111(std::string_view sampler, std::string_view schedule_type);
std::optional<SamplerChoice> sampler_from_comfy(std::string_view sampler_name, std::string_view scheduler);

// A1111's "Schedule type" label of a schedule ("Karras"); nullopt for
// `default`, which A1111 has no name for (the field is then left out).
std::optional<std::string_view> a1111_schedule_label(ScheduleId s);

}  // namespace nanscope
