#include "pipeline/scheduler_config.hpp"

#include <array>
#include <utility>

#include "core/error.hpp"
#include "models/config_json.hpp"

namespace nanscope::pipeline {
namespace {

struct KindName {
  SamplerKind kind;
  std::string_view name;
  std::string_view diffusers;
};
constexpr std::array<KindName, 4> kKindNames{{
    {SamplerKind::kEuler, "euler", "EulerDiscreteScheduler"},
    {SamplerKind::kEulerAncestral, "euler_a", "EulerAncestralDiscreteScheduler"},
    {SamplerKind::kDdim, "ddim", "DDIMScheduler"},
    {SamplerKind::kDpmPp2m, "dpmpp_2m", "DPMSolverMultistepScheduler"},
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

SamplerKind sampler_kind_from_string(std::string_view name) {
  std::string known;
  for (const auto& k : kKindNames) {
    if (name == k.name || name == k.diffusers) return k.kind;
    known += (known.empty() ? "" : ", ") + std::string(k.name);
  }
  throw ConfigError("unknown sampler '" + std::string(name) + "'; known samplers: " + known);
}

std::string_view to_string(SamplerKind kind) {
  for (const auto& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "?";
}

std::string_view diffusers_class_name(SamplerKind kind) {
  for (const auto& k : kKindNames) {
    if (k.kind == kind) return k.diffusers;
  }
  return "?";
}

std::string_view to_string(PredictionType p) {
  switch (p) {
    case PredictionType::kEpsilon: return "epsilon";
    case PredictionType::kVPrediction: return "v_prediction";
    case PredictionType::kSample: return "sample";
  }
  return "?";
}

std::string_view to_string(TimestepSpacing s) {
  switch (s) {
    case TimestepSpacing::kLinspace: return "linspace";
    case TimestepSpacing::kLeading: return "leading";
    case TimestepSpacing::kTrailing: return "trailing";
  }
  return "?";
}

std::string_view to_string(BetaSchedule b) {
  switch (b) {
    case BetaSchedule::kLinear: return "linear";
    case BetaSchedule::kScaledLinear: return "scaled_linear";
    case BetaSchedule::kSquaredCosCapV2: return "squaredcos_cap_v2";
  }
  return "?";
}

SchedulerConfig SchedulerConfig::defaults(SamplerKind kind) {
  SchedulerConfig c;
  c.kind = kind;
  // Every class defaults to linspace spacing except DDIM (leading).
  if (kind == SamplerKind::kDdim) c.timestep_spacing = TimestepSpacing::kLeading;
  return c;
}

SchedulerConfig SchedulerConfig::from_json(const nlohmann::json& j, SamplerKind kind, const std::string& origin) {
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
                               {"linear", BetaSchedule::kLinear},
                               {"scaled_linear", BetaSchedule::kScaledLinear},
                               {"squaredcos_cap_v2", BetaSchedule::kSquaredCosCapV2},
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
                                 {"epsilon", PredictionType::kEpsilon},
                                 {"v_prediction", PredictionType::kVPrediction},
                                 {"sample", PredictionType::kSample},
                                 {"original_sample", PredictionType::kSample},
                             }});
  if (c.get_string("prediction_type", "") == "original_sample" && kind != SamplerKind::kEuler) {
    c.unsupported("prediction_type", "only the Euler sampler accepts 'original_sample'; use 'sample'");
  }
  if (kind == SamplerKind::kEulerAncestral && s.prediction_type == PredictionType::kSample) {
    c.unsupported("prediction_type", "diffusers' Euler ancestral sampler does not implement 'sample'");
  }
  s.timestep_spacing = choose(c, "timestep_spacing", s.timestep_spacing,
                              std::array<std::pair<std::string_view, TimestepSpacing>, 3>{{
                                  {"linspace", TimestepSpacing::kLinspace},
                                  {"leading", TimestepSpacing::kLeading},
                                  {"trailing", TimestepSpacing::kTrailing},
                              }});
  s.steps_offset = static_cast<int>(c.get_int("steps_offset", s.steps_offset));
  if (s.steps_offset < 0 || s.steps_offset >= s.num_train_timesteps) {
    c.unsupported("steps_offset", "expected 0 <= steps_offset < num_train_timesteps");
  }
  s.rescale_betas_zero_snr = c.get_bool("rescale_betas_zero_snr", false);

  if (kind == SamplerKind::kEuler || kind == SamplerKind::kDpmPp2m) {
    s.use_karras_sigmas = c.get_bool("use_karras_sigmas", false);
    reject_if_true(c, "use_exponential_sigmas", "exponential sigmas are not implemented; use use_karras_sigmas");
    reject_if_true(c, "use_beta_sigmas", "beta sigmas are not implemented; use use_karras_sigmas");
    // diffusers' from_config keeps sigma_min/sigma_max even for DPM++ (whose __init__ lacks
    // them) and its Karras conversion reads them from the config, so both samplers do.
    s.sigma_min = optional_number(c, "sigma_min");
    s.sigma_max = optional_number(c, "sigma_max");
    s.final_sigmas_type = choose(c, "final_sigmas_type", s.final_sigmas_type,
                                 std::array<std::pair<std::string_view, FinalSigmas>, 2>{{
                                     {"zero", FinalSigmas::kZero},
                                     {"sigma_min", FinalSigmas::kSigmaMin},
                                 }});
  }
  if (kind == SamplerKind::kEuler) {
    if (c.get_string("interpolation_type", "linear") != "linear") {
      c.unsupported("interpolation_type", "only 'linear' is implemented");
    }
    const std::string type = c.get_string("timestep_type", "discrete");
    if (type != "discrete" && type != "continuous") c.unsupported("timestep_type", "expected discrete or continuous");
    s.continuous_timesteps = type == "continuous" && s.prediction_type == PredictionType::kVPrediction;
  }
  if (kind == SamplerKind::kDdim) {
    s.clip_sample = c.get_bool("clip_sample", s.clip_sample);
    s.clip_sample_range = c.get_float("clip_sample_range", s.clip_sample_range);
    s.set_alpha_to_one = c.get_bool("set_alpha_to_one", s.set_alpha_to_one);
    reject_if_true(c, "thresholding", "dynamic thresholding is not implemented");
  }
  if (kind == SamplerKind::kDpmPp2m) {
    s.solver_order = static_cast<int>(c.get_int("solver_order", s.solver_order));
    if (s.solver_order < 1 || s.solver_order > 3) c.unsupported("solver_order", "expected 1, 2 or 3");
    if (c.get_string("algorithm_type", "dpmsolver++") != "dpmsolver++") {
      c.unsupported("algorithm_type", "only 'dpmsolver++' is implemented");
    }
    // diffusers maps the UniPC/DEIS solver types onto midpoint.
    const std::string solver = c.get_string("solver_type", "midpoint");
    if (solver == "heun") {
      s.solver_type = DpmSolverType::kHeun;
    } else if (solver != "midpoint" && solver != "logrho" && solver != "bh1" && solver != "bh2") {
      c.unsupported("solver_type", "expected midpoint or heun");
    }
    s.lower_order_final = c.get_bool("lower_order_final", s.lower_order_final);
    s.euler_at_final = c.get_bool("euler_at_final", s.euler_at_final);
    s.lambda_min_clipped = c.get_float("lambda_min_clipped", s.lambda_min_clipped);
    reject_if_true(c, "use_lu_lambdas", "Lu lambdas are not implemented; use use_karras_sigmas");
    reject_if_true(c, "thresholding", "dynamic thresholding is not implemented");
    if (c.has("variance_type")) c.unsupported("variance_type", "learned variance is not implemented");
  }
  return s;
}

}  // namespace nanscope::pipeline
