#include "pipeline/scheduler_config.hpp"

#include <array>
#include <utility>

#include "core/error.hpp"
#include "models/config_json.hpp"

namespace nanscope::pipeline {
namespace {

struct DiffusersClass {
  SamplerId sampler;
  std::string_view name;
};
constexpr std::array<DiffusersClass, 11> kDiffusersClasses{{
    {SamplerId::euler, "EulerDiscreteScheduler"},
    {SamplerId::euler_a, "EulerAncestralDiscreteScheduler"},
    {SamplerId::ddim, "DDIMScheduler"},
    {SamplerId::dpmpp_2m, "DPMSolverMultistepScheduler"},
    {SamplerId::dpmpp_2m_sde, "DPMSolverMultistepScheduler"},
    {SamplerId::dpmpp_sde, "DPMSolverSDEScheduler"},
    {SamplerId::heun, "HeunDiscreteScheduler"},
    {SamplerId::lms, "LMSDiscreteScheduler"},
    {SamplerId::unipc, "UniPCMultistepScheduler"},
    {SamplerId::ddpm, "DDPMScheduler"},
    {SamplerId::lcm, "LCMScheduler"},
}};

// A string key whose value must be one of `choices`; the error lists them.
template <typename E, std::size_t N>
E choose(const models::ConfigJson& c, const std::string& key, E fallback,
         const std::array<std::pair<std::string_view, E>, N>& choices) {
  if (!c.has(key)) return fallback;
  const std::string value = c.get_string(key, "");
  std::string known;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  c.unsupported(key, "expected one of " + known);
}

void reject_if_true(const models::ConfigJson& c, const std::string& key, const std::string& why) {
  if (c.get_bool(key, false)) c.unsupported(key, why);
}

std::optional<double> optional_number(const models::ConfigJson& c, const std::string& key) {
  if (!c.has(key)) return std::nullopt;
  return c.get_float(key, 0.0);
}

}  // namespace

SamplerId sampler_from_name(std::string_view name) {
  if (const auto id = parse_sampler(name)) return *id;
  if (name == "dpmpp_2m_karras") return SamplerId::dpmpp_2m;
  for (const auto& c : kDiffusersClasses) {
    if (name == c.name) return c.sampler;  // the first: DPMSolverMultistepScheduler is dpmpp_2m
  }
  std::string known;
  for (const SamplerId id : kSamplers) known += (known.empty() ? "" : ", ") + std::string(sampler_name(id));
  throw ConfigError("unknown sampler '" + std::string(name) + "'; known samplers: " + known);
}

std::string_view diffusers_class_name(SamplerId sampler) {
  for (const auto& c : kDiffusersClasses) {
    if (c.sampler == sampler) return c.name;
  }
  return "?";
}

std::string_view to_string(PredictionType p) {
  switch (p) {
    case PredictionType::epsilon: return "epsilon";
    case PredictionType::v_prediction: return "v_prediction";
    case PredictionType::sample: return "sample";
  }
  return "?";
}

std::string_view to_string(TimestepSpacing s) {
  switch (s) {
    case TimestepSpacing::linspace: return "linspace";
    case TimestepSpacing::leading: return "leading";
    case TimestepSpacing::trailing: return "trailing";
  }
  return "?";
}

std::string_view to_string(BetaSchedule b) {
  switch (b) {
    case BetaSchedule::linear: return "linear";
    case BetaSchedule::scaled_linear: return "scaled_linear";
    case BetaSchedule::squaredcos_cap_v2: return "squaredcos_cap_v2";
  }
  return "?";
}

SchedulerConfig SchedulerConfig::defaults(SamplerId kind) {
  SchedulerConfig c;
  c.kind = kind;
  // Every class defaults to linspace spacing except DDIM, DDPM and LCM (leading).
  if (kind == SamplerId::ddim || kind == SamplerId::ddpm || kind == SamplerId::lcm) {
    c.timestep_spacing = TimestepSpacing::leading;
  }
  if (kind == SamplerId::unipc) c.solver_type = DpmSolverType::bh2;
  // Heun, DPM++ SDE and LCM default to SD's betas ("sensible defaults" in diffusers), LCM scaled_linear.
  if (kind == SamplerId::heun || kind == SamplerId::dpmpp_sde || kind == SamplerId::lcm) {
    c.beta_start = 0.00085;
    c.beta_end = 0.012;
  }
  if (kind == SamplerId::lcm) c.beta_schedule = BetaSchedule::scaled_linear;
  if (kind == SamplerId::heun || kind == SamplerId::lcm) c.clip_sample = false;
  return c;
}

SchedulerConfig SchedulerConfig::with_schedule(ScheduleId s) const {
  SchedulerConfig c = *this;
  c.schedule = s;
  if (s == ScheduleId::class_default) return c;
  if (!is_sigma_sampler(kind)) {
    throw ConfigError("schedule=" + std::string(schedule_name(s)) + ": the " + std::string(sampler_name(kind)) +
                      " sampler steps between the training timesteps its diffusers class picks, so it takes only "
                      "schedule=default; use a sigma sampler (euler, euler_a, heun, lms, dpmpp_2m, dpmpp_2m_sde, "
                      "dpmpp_sde, unipc) for " +
                      std::string(schedule_name(s)));
  }
  c.use_karras_sigmas = s == ScheduleId::karras;
  c.use_exponential_sigmas = s == ScheduleId::exponential;
  return c;
}

SchedulerConfig SchedulerConfig::with_unipc(const RunConfig& run) const {
  SchedulerConfig c = *this;
  if (kind != SamplerId::unipc) return c;
  const std::string& impl = run.unipc_implementation;
  if (impl == "diffusers") {
    c.unipc_impl = UniPcImpl::diffusers;
  } else if (impl == "a1111") {
    c.unipc_impl = UniPcImpl::a1111;
  } else if (impl == "comfyui") {
    c.unipc_impl = UniPcImpl::comfyui;
  } else {
    throw ConfigError("unipc.implementation: '" + impl + "' is not one of diffusers, a1111, comfyui");
  }
  const bool reference = c.unipc_impl != UniPcImpl::diffusers;
  // A1111's defaults (modules/shared_options.py uni_pc_*: bh1, order 3, lower order
  // final) are also ComfyUI's (comfy/extra_samplers/uni_pc.py sample_unipc).
  if (run.unipc_variant == "bh1" || (run.unipc_variant == "auto" && reference)) {
    c.solver_type = DpmSolverType::bh1;
  } else if (run.unipc_variant == "bh2") {
    c.solver_type = DpmSolverType::bh2;
  } else if (run.unipc_variant != "auto") {
    throw ConfigError("unipc.variant: '" + run.unipc_variant + "' is not one of auto, bh1, bh2");
  }
  if (run.unipc_order < 0 || run.unipc_order > 3)
    throw ConfigError("unipc.order: " + std::to_string(run.unipc_order) + " is not 0 (auto) or 1 to 3");
  if (run.unipc_order > 0) c.solver_order = run.unipc_order;
  if (run.unipc_order == 0 && reference) c.solver_order = 3;
  if (run.unipc_lower_order_final == "on" || (run.unipc_lower_order_final == "auto" && reference)) {
    c.lower_order_final = true;
  } else if (run.unipc_lower_order_final == "off") {
    c.lower_order_final = false;
  } else if (run.unipc_lower_order_final != "auto") {
    throw ConfigError("unipc.lower_order_final: '" + run.unipc_lower_order_final + "' is not one of auto, on, off");
  }
  if (run.unipc_skip_type == "time_uniform") {
    c.unipc_skip = UniPcSkip::time_uniform;
  } else if (run.unipc_skip_type == "time_quadratic") {
    c.unipc_skip = UniPcSkip::time_quadratic;
  } else if (run.unipc_skip_type == "logSNR") {
    c.unipc_skip = UniPcSkip::log_snr;
  } else {
    throw ConfigError("unipc.skip_type: '" + run.unipc_skip_type +
                      "' is not one of time_uniform, time_quadratic, logSNR");
  }
  return c;
}

SchedulerConfig SchedulerConfig::from_json(const nlohmann::json& j, SamplerId kind, const std::string& origin) {
  if (!j.is_object()) throw ConfigError(origin + ": a scheduler config must be a JSON object, found " + j.dump());
  const models::ConfigJson c(j, origin);
  SchedulerConfig s = defaults(kind);
  s.origin = origin;

  s.num_train_timesteps = static_cast<int>(c.get_int("num_train_timesteps", s.num_train_timesteps));
  if (s.num_train_timesteps < 2 || s.num_train_timesteps > 100000) {
    c.unsupported("num_train_timesteps", "expected 2 to 100000");
  }
  s.beta_start = c.get_float("beta_start", s.beta_start);
  s.beta_end = c.get_float("beta_end", s.beta_end);
  if (!(s.beta_start >= 0.0 && s.beta_end >= 0.0)) c.unsupported("beta_start", "betas must be >= 0");
  s.beta_schedule = choose(c, "beta_schedule", s.beta_schedule,
                           std::array<std::pair<std::string_view, BetaSchedule>, 3>{{
                               {"linear", BetaSchedule::linear},
                               {"scaled_linear", BetaSchedule::scaled_linear},
                               {"squaredcos_cap_v2", BetaSchedule::squaredcos_cap_v2},
                           }});
  if (c.has("trained_betas")) {
    const auto& tb = j["trained_betas"];
    if (!tb.is_array() || tb.size() != static_cast<std::size_t>(s.num_train_timesteps)) {
      c.unsupported("trained_betas", "expected null or a list of num_train_timesteps numbers");
    }
    for (const auto& v : tb) {
      if (!v.is_number()) c.unsupported("trained_betas", "expected a list of numbers");
      s.trained_betas.push_back(static_cast<float>(v.get<double>()));
    }
  }
  // Euler also accepts "original_sample" (an alias of "sample"); Euler ancestral rejects "sample".
  s.prediction_type = choose(c, "prediction_type", s.prediction_type,
                             std::array<std::pair<std::string_view, PredictionType>, 4>{{
                                 {"epsilon", PredictionType::epsilon},
                                 {"v_prediction", PredictionType::v_prediction},
                                 {"sample", PredictionType::sample},
                                 {"original_sample", PredictionType::sample},
                             }});
  if (c.get_string("prediction_type", "") == "original_sample" && kind != SamplerId::euler) {
    c.unsupported("prediction_type", "only the Euler sampler accepts 'original_sample'; use 'sample'");
  }
  if (kind == SamplerId::euler_a && s.prediction_type == PredictionType::sample) {
    c.unsupported("prediction_type", "diffusers' Euler ancestral sampler does not implement 'sample'");
  }
  s.timestep_spacing = choose(c, "timestep_spacing", s.timestep_spacing,
                              std::array<std::pair<std::string_view, TimestepSpacing>, 3>{{
                                  {"linspace", TimestepSpacing::linspace},
                                  {"leading", TimestepSpacing::leading},
                                  {"trailing", TimestepSpacing::trailing},
                              }});
  s.steps_offset = static_cast<int>(c.get_int("steps_offset", s.steps_offset));
  if (s.steps_offset < 0 || s.steps_offset >= s.num_train_timesteps) {
    c.unsupported("steps_offset", "expected 0 <= steps_offset < num_train_timesteps");
  }
  s.rescale_betas_zero_snr = c.get_bool("rescale_betas_zero_snr", false);

  if (is_sigma_sampler(kind)) {
    if (kind != SamplerId::euler_a) {
      s.use_karras_sigmas = c.get_bool("use_karras_sigmas", false);
      s.use_exponential_sigmas = c.get_bool("use_exponential_sigmas", false);
    }
    reject_if_true(c, "use_beta_sigmas", "beta sigmas are not implemented; use use_karras_sigmas");
    // diffusers' from_config keeps sigma_min/sigma_max even for DPM++ (whose __init__ lacks
    // them) and its Karras conversion reads them from the config, so both samplers do.
    s.sigma_min = optional_number(c, "sigma_min");
    s.sigma_max = optional_number(c, "sigma_max");
    s.final_sigmas_type = choose(c, "final_sigmas_type", s.final_sigmas_type,
                                 std::array<std::pair<std::string_view, FinalSigmas>, 2>{{
                                     {"zero", FinalSigmas::zero},
                                     {"sigma_min", FinalSigmas::sigma_min},
                                 }});
  }
  if (kind == SamplerId::euler) {
    if (c.get_string("interpolation_type", "linear") != "linear") {
      c.unsupported("interpolation_type", "only 'linear' is implemented");
    }
    const std::string type = c.get_string("timestep_type", "discrete");
    if (type != "discrete" && type != "continuous") c.unsupported("timestep_type", "expected discrete or continuous");
    s.continuous_timesteps = type == "continuous" && s.prediction_type == PredictionType::v_prediction;
  }
  if (kind == SamplerId::heun && c.get_bool("clip_sample", false)) {
    c.unsupported("clip_sample", "Heun with clip_sample is not implemented");
  }
  if (kind == SamplerId::ddpm) {
    const std::string v = c.get_string("variance_type", "fixed_small");
    if (v != "fixed_small") c.unsupported("variance_type", "only 'fixed_small' is implemented");
  }
  if (kind == SamplerId::lcm) {
    s.original_inference_steps = static_cast<int>(c.get_int("original_inference_steps", 50));
    if (s.original_inference_steps < 1 || s.original_inference_steps > s.num_train_timesteps) {
      c.unsupported("original_inference_steps", "expected 1 to num_train_timesteps");
    }
    s.timestep_scaling = c.get_float("timestep_scaling", 10.0);
  }
  if (kind == SamplerId::ddim || kind == SamplerId::ddpm || kind == SamplerId::lcm) {
    s.clip_sample = c.get_bool("clip_sample", s.clip_sample);
    s.clip_sample_range = c.get_float("clip_sample_range", s.clip_sample_range);
    s.set_alpha_to_one = c.get_bool("set_alpha_to_one", s.set_alpha_to_one);
    reject_if_true(c, "thresholding", "dynamic thresholding is not implemented");
  }
  if (is_dpmpp(kind) || kind == SamplerId::unipc) {
    s.solver_order = static_cast<int>(c.get_int("solver_order", s.solver_order));
    if (s.solver_order < 1 || s.solver_order > 3) c.unsupported("solver_order", "expected 1, 2 or 3");
    if (kind == SamplerId::dpmpp_2m_sde && s.solver_order == 3) {
      c.unsupported("solver_order", "the SDE solver (dpmpp_2m_sde) is implemented for orders 1 and 2");
    }
    // The sampler decides the algorithm (dpmpp_2m_sde: sde-dpmsolver++), as A1111
    // and ComfyUI pick it by name whatever the model's file says.
    if (kind == SamplerId::unipc) {
      const std::string solver = c.get_string("solver_type", "bh2");
      if (solver == "bh1") {
        s.solver_type = DpmSolverType::bh1;
      } else if (solver == "bh2") {
        s.solver_type = DpmSolverType::bh2;
      } else {
        c.unsupported("solver_type", "UniPC takes bh1 or bh2");
      }
      if (!c.get_bool("predict_x0", true)) c.unsupported("predict_x0", "only the data-prediction UniPC is implemented");
      if (c.has("disable_corrector") && !(j["disable_corrector"].is_array() && j["disable_corrector"].empty())) {
        c.unsupported("disable_corrector", "disabling the corrector at some steps is not implemented");
      }
      if (c.has("solver_p") && !j["solver_p"].is_null()) c.unsupported("solver_p", "solver_p is not implemented");
    } else {
      // diffusers maps the UniPC/DEIS solver types onto midpoint.
      const std::string solver = c.get_string("solver_type", "midpoint");
      if (solver == "heun") {
        s.solver_type = DpmSolverType::heun;
      } else if (solver != "midpoint" && solver != "logrho" && solver != "bh1" && solver != "bh2") {
        c.unsupported("solver_type", "expected midpoint or heun");
      }
      s.euler_at_final = c.get_bool("euler_at_final", s.euler_at_final);
      s.lambda_min_clipped = c.get_float("lambda_min_clipped", s.lambda_min_clipped);
      reject_if_true(c, "use_lu_lambdas", "Lu lambdas are not implemented; use use_karras_sigmas");
      if (c.has("variance_type")) c.unsupported("variance_type", "learned variance is not implemented");
    }
    s.lower_order_final = c.get_bool("lower_order_final", s.lower_order_final);
    reject_if_true(c, "thresholding", "dynamic thresholding is not implemented");
  }

  return s;
}

}  // namespace nanscope::pipeline
