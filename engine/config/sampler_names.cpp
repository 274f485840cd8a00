#include "config/sampler_names.hpp"

#include <array>
#include <string>
#include <utility>

namespace nanscope {
namespace {

// k-diffusion samplers in A1111: their default schedule is k-diffusion's own
// (linspace in t, log-sigma interpolation: our `normal`). The others run
// through A1111's timestep samplers (DDIM, UniPC) or diffusers (DDPM, LCM).
bool is_kdiffusion(SamplerId s) {
  switch (s) {
    case SamplerId::euler:
    case SamplerId::euler_a:
    case SamplerId::heun:
    case SamplerId::lms:
    case SamplerId::dpmpp_2m:
    case SamplerId::dpmpp_sde:
    case SamplerId::dpmpp_2m_sde: return true;
    default: return false;
  }
}

ScheduleId old_default(SamplerId s) { return is_kdiffusion(s) ? ScheduleId::normal : ScheduleId::class_default; }

// "Schedule type: Automatic" in A1111 1.9+: the sampler's 'scheduler' option.
ScheduleId automatic(SamplerId s) {
  if (s == SamplerId::dpmpp_2m || s == SamplerId::dpmpp_sde) return ScheduleId::karras;
  if (s == SamplerId::dpmpp_2m_sde) return ScheduleId::exponential;
  return old_default(s);
}

std::optional<SamplerId> a1111_sampler(std::string_view name) {
  for (SamplerId s : kSamplers) {
    if (sampler_a1111_name(s) == name) return s;
  }
  return std::nullopt;
}

// A1111's scheduler labels (modules/sd_schedulers.py). "Uniform" is
// k-diffusion's default spacing, which "Normal" also computes.
std::optional<ScheduleId> a1111_schedule(std::string_view label) {
  static constexpr std::array<std::pair<std::string_view, ScheduleId>, 7> kLabels{{
      {"Uniform", ScheduleId::normal},
      {"Karras", ScheduleId::karras},
      {"Exponential", ScheduleId::exponential},
      {"SGM Uniform", ScheduleId::sgm_uniform},
      {"Simple", ScheduleId::simple},
      {"Normal", ScheduleId::normal},
      {"DDIM", ScheduleId::ddim_uniform},
  }};
  for (const auto& [l, id] : kLabels) {
    if (l == label) return id;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string_view> a1111_schedule_label(ScheduleId s) {
  if (s == ScheduleId::class_default) return std::nullopt;
  return schedule_a1111_name(s);
}

std::optional<SamplerChoice> sampler_from_a1111(std::string_view sampler, std::string_view schedule_type) {
  std::optional<SamplerId> id = a1111_sampler(sampler);
  std::optional<ScheduleId> suffix;
  if (!id) {
    // The pre-1.9 names: "DPM++ 2M Karras", "LMS Karras", "DPM++ 2M SDE Exponential".
    for (const auto& [tail, sched] :
         {std::pair<std::string_view, ScheduleId>{" Karras", ScheduleId::karras},
          std::pair<std::string_view, ScheduleId>{" Exponential", ScheduleId::exponential}}) {
      if (sampler.size() > tail.size() && sampler.substr(sampler.size() - tail.size()) == tail) {
        id = a1111_sampler(sampler.substr(0, sampler.size() - tail.size()));
        suffix = sched;
        break;
      }
    }
    if (!id) return std::nullopt;
  }
  if (schedule_type.empty()) return SamplerChoice{*id, suffix.value_or(old_default(*id))};
  if (schedule_type == "Automatic") return SamplerChoice{*id, suffix.value_or(automatic(*id))};
  const std::optional<ScheduleId> sched = a1111_schedule(schedule_type);
  if (!sched) return std::nullopt;
  return SamplerChoice{*id, *sched};
}

std::optional<SamplerChoice> sampler_from_comfy(std::string_view sampler_name, std::string_view scheduler) {
  // comfy/samplers.py KSAMPLER_NAMES (and SAMPLER_NAMES' "ddim", "uni_pc").
  static constexpr std::array<std::pair<std::string_view, SamplerId>, 13> kNames{{
      {"euler", SamplerId::euler},
      {"euler_ancestral", SamplerId::euler_a},
      {"heun", SamplerId::heun},
      {"lms", SamplerId::lms},
      {"dpmpp_2m", SamplerId::dpmpp_2m},
      {"dpmpp_sde", SamplerId::dpmpp_sde},
      {"dpmpp_sde_gpu", SamplerId::dpmpp_sde},
      {"dpmpp_2m_sde", SamplerId::dpmpp_2m_sde},
      {"dpmpp_2m_sde_gpu", SamplerId::dpmpp_2m_sde},
      {"ddpm", SamplerId::ddpm},
      {"lcm", SamplerId::lcm},
      {"uni_pc", SamplerId::unipc},
      {"uni_pc_bh2", SamplerId::unipc},  // the variant: unipc_settings_from_comfy
  }};
  std::optional<SamplerId> id;
  for (const auto& [n, s] : kNames) {
    if (n == sampler_name) id = s;
  }
  // ComfyUI's "ddim" sampler is k-diffusion's Euler (comfy/samplers.py:
  // ksampler("euler", ...)) over whatever sigmas the scheduler gives.
  if (sampler_name == "ddim") id = SamplerId::euler;
  if (!id) return std::nullopt;
  static constexpr std::array<std::pair<std::string_view, ScheduleId>, 6> kSchedulers{{
      {"normal", ScheduleId::normal},
      {"karras", ScheduleId::karras},
      {"exponential", ScheduleId::exponential},
      {"sgm_uniform", ScheduleId::sgm_uniform},
      {"simple", ScheduleId::simple},
      {"ddim_uniform", ScheduleId::ddim_uniform},
  }};
  for (const auto& [n, s] : kSchedulers) {
    if (n == scheduler) return SamplerChoice{*id, s};
  }
  return std::nullopt;
}

UniPcMapping unipc_settings_from_a1111(std::string_view variant, std::string_view skip_type, std::string_view order,
                                       std::string_view lower_order_final) {
  UniPcMapping m;
  m.sets.emplace_back("unipc.implementation", "a1111");
  if (variant == "bh1" || variant == "bh2") {
    m.sets.emplace_back("unipc.variant", std::string(variant));
  } else if (variant == "vary_coeff") {
    m.not_reproducible.push_back(
        "UniPC variant vary_coeff (the reference's varying-coefficient update) is not implemented by this version; the "
        "run uses bh1");
  } else if (!variant.empty()) {
    m.not_reproducible.push_back("UniPC variant '" + std::string(variant) + "' is unknown; the run uses bh1");
  }
  if (skip_type == "time_uniform" || skip_type == "time_quadratic" || skip_type == "logSNR") {
    m.sets.emplace_back("unipc.skip_type", std::string(skip_type));
  } else if (!skip_type.empty()) {
    m.not_reproducible.push_back("UniPC skip type '" + std::string(skip_type) +
                                 "' is unknown; the run uses time_uniform");
  }
  if (!order.empty()) {
    int n = 0;
    for (char ch : order) n = (ch >= '0' && ch <= '9' && n < 1000) ? n * 10 + (ch - '0') : -1000000;
    if (n >= 1 && n <= 3) {
      m.sets.emplace_back("unipc.order", std::to_string(n));
    } else if (n > 3) {
      m.not_reproducible.push_back("UniPC order " + std::string(order) +
                                   " is above 3, the most this version runs; the run uses order 3");
    } else {
      m.not_reproducible.push_back("UniPC order '" + std::string(order) + "' is not an order; the run uses 3");
    }
  }
  if (lower_order_final == "True" || lower_order_final == "False") {
    m.sets.emplace_back("unipc.lower_order_final", lower_order_final == "True" ? "on" : "off");
  } else if (!lower_order_final.empty()) {
    m.not_reproducible.push_back("UniPC lower order final '" + std::string(lower_order_final) +
                                 "' is not True or False; the run uses True");
  }
  return m;
}

UniPcMapping unipc_settings_from_comfy(std::string_view sampler_name) {
  UniPcMapping m;
  m.sets.emplace_back("unipc.implementation", "comfyui");
  m.sets.emplace_back("unipc.variant", sampler_name == "uni_pc_bh2" ? "bh2" : "bh1");
  return m;
}

}  // namespace nanscope
