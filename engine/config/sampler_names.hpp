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
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_config.hpp"

namespace nanscope {

struct SamplerChoice {
  SamplerId sampler;
  ScheduleId schedule;
  friend bool operator==(const SamplerChoice&, const SamplerChoice&) = default;
};

std::optional<SamplerChoice> sampler_from_a1111(std::string_view sampler, std::string_view schedule_type);
std::optional<SamplerChoice> sampler_from_comfy(std::string_view sampler_name, std::string_view scheduler);

// The unipc.* settings (pipeline/unipc_reference.hpp) that reproduce a
// tool's UniPC, as `--set` pairs, and what of it cannot be run.
//  - A1111's "UniPC" runs the UniPC reference code with its options
//    uni_pc_variant (bh1, bh2, vary_coeff), uni_pc_skip_type (time_uniform,
//    time_quadratic, logSNR), uni_pc_order (1-50) and uni_pc_lower_order_final,
//    written into the infotext as "UniPC variant", "UniPC skip type", "UniPC
//    order" and "UniPC lower order final" when they are not the defaults (bh1,
//    time_uniform, 3, True; modules/shared_options.py). Pass each field's
//    value, "" when absent.
//  - ComfyUI's uni_pc and uni_pc_bh2 (comfy/extra_samplers/uni_pc.py): bh1, bh2.
struct UniPcMapping {
  std::vector<std::pair<std::string, std::string>> sets;  // {"unipc.implementation", "a1111"}, ...
  std::vector<std::string> not_reproducible;              // plain sentences
};
UniPcMapping unipc_settings_from_a1111(std::string_view variant, std::string_view skip_type, std::string_view order,
                                       std::string_view lower_order_final);
UniPcMapping unipc_settings_from_comfy(std::string_view sampler_name);

// A1111's "Schedule type" label of a schedule ("Karras"); nullopt for
// `default`, which A1111 has no name for (the field is then left out).
std::optional<std::string_view> a1111_schedule_label(ScheduleId s);

}  // namespace nanscope
