#include "inspect/report_json.hpp"

#include <cmath>

#include "config/preset.hpp"

namespace nanscope::inspect {

namespace {

// JSON has no NaN/Inf: non-finite doubles become null.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

nlohmann::json to_json(const Stats& s) {
  return {{"min", num(s.min)},         {"max", num(s.max)},         {"mean", num(s.mean)},
          {"std", num(s.std)},         {"max_abs", num(s.max_abs)}, {"count", s.count},
          {"nan", s.nan},              {"pos_inf", s.pos_inf},      {"neg_inf", s.neg_inf},
          {"near_limit", s.near_limit}, {"near_limit_share", num(s.near_limit_share)}};
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

nlohmann::json report_json(const RunConfig& config, const std::vector<pipeline::StepReport>& steps,
                           const pipeline::RunReport& report) {
  const RunInspection& ri = report.inspection;
  auto opt = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
  nlohmann::json j = {{"nanscope_inspect_report", kReportVersion},
                      {"verdict", verdict_name(ri.verdict)},
                      {"summary", ri.summary},
                      {"origin", opt(ri.origin)},
                      {"origin_op", opt(ri.origin_op)},
                      {"near_limit_origin", opt(ri.near_limit_origin)},
                      {"first_bad_step", ri.first_bad_step >= 0 ? nlohmann::json(ri.first_bad_step + 1) : nlohmann::json()},
                      {"first_bad_branch", opt(ri.first_bad_branch)},
                      {"emulation", ri.emulation},
                      {"emulation_note", ri.emulation_note},
                      {"outcome", report.outcome},
                      {"stopped", report.stopped},
                      {"cancelled", report.cancelled},
                      {"device", report.device},
                      {"model", report.model},
                      {"family", report.family},
                      {"image_index", report.image},
                      {"timings",
                       {{"load", report.load_seconds},
                        {"text", report.text_seconds},
                        {"sampling", report.sampling_seconds},
                        {"decode", report.decode_seconds}}}};
  nlohmann::json st = nlohmann::json::array();
  for (const auto& s : steps) {
    if (s.image != report.image) continue;
    // A step inspect.stats_every skipped has its timings only.
    const bool measured = !s.stats.latent.channels.empty();
    nlohmann::json sj = measured ? to_json(s.stats) : nlohmann::json::object();
    sj["statistics"] = measured;
    sj["step"] = s.index + 1;
    sj["timestep"] = s.timestep;
    sj["sigma"] = s.sigma;
    sj["seconds"] = s.seconds;
    sj["inspect_seconds"] = s.inspect_seconds;
    sj["inspect_bytes"] = s.inspect_bytes;
    if (s.decode_seconds > 0) sj["preview_decode_seconds"] = s.decode_seconds;
    st.push_back(std::move(sj));
  }
  j["steps"] = std::move(st);
  nlohmann::json dec = nlohmann::json::array();
  for (const auto& d : report.decodes) {
    dec.push_back({{"vae", d.vae},
                   {"dtype", dtype_name(d.dtype)},
                   {"nonfinite_pixels", d.image.nonfinite_pixels},
                   {"seconds", d.seconds},
                   {"image", to_json(d.image.map)}});
  }
  j["decodes"] = std::move(dec);
  j["image"] = ri.image ? to_json(ri.image->map) : nlohmann::json();
  nlohmann::json tr = nlohmann::json::array();
  for (const auto& t : ri.traces) tr.push_back(to_json(t));
  j["traces"] = std::move(tr);
  j["config"] = nanscope::to_json(config);
  return j;
}

nlohmann::json image_report_json(const pipeline::RunReport& r) {
  nlohmann::json decodes = nlohmann::json::array();
  for (const auto& d : r.decodes)
    decodes.push_back(
        {{"vae", d.vae}, {"dtype", dtype_name(d.dtype)}, {"nonfinite", d.nonfinite}, {"seconds", d.seconds}});
  return {{"device", r.device},
          {"model", r.model},
          {"family", r.family},
          {"outcome", r.outcome},
          {"first_nonfinite_step", r.first_nonfinite_step},
          {"decodes", decodes},
          {"seconds",
           {{"load", r.load_seconds}, {"text", r.text_seconds}, {"sampling", r.sampling_seconds},
            {"decode", r.decode_seconds}}}};
}

}  // namespace nanscope::inspect
