#include "inspect/stats_json.hpp"

#include <cmath>

namespace nanscope::inspect {

namespace {

// JSON has no NaN/Inf: non-finite doubles become null.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

nlohmann::json to_json(const Stats& s) {
  return {{"min", num(s.min)},
          {"max", num(s.max)},
          {"mean", num(s.mean)},
          {"std", num(s.std)},
          {"max_abs", num(s.max_abs)},
          {"count", s.count},
          {"nan", s.nan},
          {"pos_inf", s.pos_inf},
          {"neg_inf", s.neg_inf},
          {"near_limit", s.near_limit},
          {"near_limit_share", num(s.near_limit_share)}};
}

nlohmann::json to_json(const MapStats& m) {
  nlohmann::json j = to_json(m.all);
  j["verdict"] = verdict_name(m.verdict);
  j["note"] = m.note;
  j["band_score"] = num(m.bands.score());
  j["band_rows"] = m.bands.band_rows;
  j["band_cols"] = m.bands.band_cols;
  j["saturation"] = num(m.saturation);
  j["clipped"] = num(m.clipped);
  nlohmann::json ch = nlohmann::json::array();
  for (const auto& c : m.channels) {
    nlohmann::json cj = to_json(c);
    cj.erase("count");
    cj.erase("near_limit_share");
    ch.push_back(std::move(cj));
  }
  j["channels"] = std::move(ch);
  if (m.mask.any()) {
    j["nonfinite_mask"] = {{"rows", m.mask.rows}, {"cols", m.mask.cols}, {"share", m.mask.share}};
  }
  return j;
}

nlohmann::json to_json(const StepStats& s) {
  nlohmann::json j = {{"verdict", verdict_name(s.verdict)},
                      {"sigma_after", num(s.sigma_after)},
                      {"latent", to_json(s.latent)},
                      {"noise_cond", to_json(s.noise_cond)}};
  if (s.noise_uncond) j["noise_uncond"] = to_json(*s.noise_uncond);
  return j;
}

nlohmann::json to_json(const OpRecord& r) {
  nlohmann::json j = {{"index", r.index},
                      {"module", r.full_path()},
                      {"op", r.op},
                      {"shape", r.shape},
                      {"dtype", dtype_name(r.dtype)},
                      {"precision", r.precision},
                      {"output", to_json(r.output)},
                      {"inputs_finite", r.inputs_finite}};
  if (!r.attention.empty()) j["attention"] = r.attention;
  if (r.emulated_fault) j["emulated_fault"] = true;
  return j;
}

nlohmann::json to_json(const LayerTrace& t) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& r : t.ops) ops.push_back(to_json(r));
  nlohmann::json j = {{"call", t.call}, {"ops", std::move(ops)}};
  j["origin"] = t.origin_op() ? nlohmann::json(t.origin_op()->full_path()) : nlohmann::json();
  j["near_limit"] = t.near_limit_op() ? nlohmann::json(t.near_limit_op()->full_path()) : nlohmann::json();
  return j;
}

}  // namespace nanscope::inspect
