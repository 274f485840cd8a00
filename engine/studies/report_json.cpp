#include "studies/report_json.hpp"

#include "config/preset.hpp"
#include "core/version.hpp"

namespace nanscope::studies {

using namespace inspect;

void add_version_fields(nlohmann::json& report) {
  report["nanscope_version"] = std::string(version());
  report["nanscope_commit"] = git_commit().empty() ? nlohmann::json() : nlohmann::json(std::string(git_commit()));
}

nlohmann::json layer_retry_json(const pipeline::LayerRetryReport& lr) {
  if (!lr.active) return nullptr;
  nlohmann::json attempts = nlohmann::json::array();
  for (const auto& a : lr.attempts) {
    attempts.push_back({{"call", a.call},
                        {"origin", a.origin},
                        {"origin_op", a.origin_op},
                        {"upcast", a.upcast},
                        {"nonfinite_before", a.nonfinite_before},
                        {"nonfinite_after", a.nonfinite_after},
                        {"trace_seconds", a.trace_seconds},
                        {"redo_seconds", a.redo_seconds}});
  }
  nlohmann::json overrides = nlohmann::json::array();
  for (const auto& u : lr.upcast) overrides.push_back({{"pattern", u}, {"dtype", "f32"}});
  return {{"clean", lr.clean},
          {"upcast", lr.upcast},
          {"overrides", std::move(overrides)},
          {"attempts", std::move(attempts)},
          {"seconds", lr.seconds()},
          {"limit", lr.limit},
          {"limit_reached", lr.limit_reached},
          {"remaining", lr.remaining.empty() ? nlohmann::json() : nlohmann::json(lr.remaining)}};
}

namespace {

// The LoRAs a run applied: file, weight, A1111 short hash, what they patched.
nlohmann::json loras_json(const pipeline::RunReport& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : r.loras) {
    out.push_back({{"name", l.name},
                   {"path", l.path},
                   {"weight", l.weight},
                   {"unet_weight", l.unet_weight},
                   {"origin", l.origin},
                   {"format", l.format},
                   {"hash", l.short_hash},
                   {"modules", l.modules},
                   {"rank", l.rank},
                   {"mode", r.lora_unmerged ? "unmerged" : "merge"},
                   {"overflows", l.overflows}});
  }
  return out;
}

}  // namespace

nlohmann::json report_json(const RunConfig& config, const std::vector<pipeline::StepReport>& steps,
                           const pipeline::RunReport& report) {
  const RunInspection& ri = report.inspection;
  auto opt = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
  nlohmann::json j = {
      {"nanscope_inspect_report", kReportVersion},
      {"verdict", verdict_name(ri.verdict)},
      {"summary", ri.summary},
      {"origin", opt(ri.origin)},
      {"origin_op", opt(ri.origin_op)},
      {"near_limit_origin", opt(ri.near_limit_origin)},
      {"first_bad_step", ri.first_bad_step >= 0 ? nlohmann::json(ri.first_bad_step + 1) : nlohmann::json()},
      {"first_bad_branch", opt(ri.first_bad_branch)},
      {"first_bad_pass", ri.first_bad_pass > 0 ? nlohmann::json(ri.first_bad_pass) : nlohmann::json()},
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
  add_version_fields(j);
  nlohmann::json st = nlohmann::json::array();
  for (const auto& s : steps) {
    if (s.image != report.image) continue;
    // A step inspect.stats_every skipped has its timings only.
    const bool measured = !s.stats.latent.channels.empty();
    nlohmann::json sj = measured ? to_json(s.stats) : nlohmann::json::object();
    sj["statistics"] = measured;
    sj["step"] = s.index + 1;
    if (s.sampler_steps != s.steps) {
      // Two model calls per sampler step (heun, dpmpp_sde): "step" counts calls.
      sj["sampler_step"] = s.sampler_step + 1;
      sj["call_in_step"] = s.call_in_step + 1;
    }
    sj["pass"] = s.pass;
    sj["timestep"] = s.timestep;
    sj["sigma"] = s.sigma;
    sj["seconds"] = s.seconds;
    sj["inspect_seconds"] = s.inspect_seconds;
    sj["inspect_bytes"] = s.inspect_bytes;
    if (s.decode_seconds > 0) sj["preview_decode_seconds"] = s.decode_seconds;
    st.push_back(std::move(sj));
  }
  j["steps"] = std::move(st);
  nlohmann::json passes = nlohmann::json::array();
  for (const auto& p : report.passes) {
    passes.push_back({{"pass", p.pass},
                      {"kind", p.kind},
                      {"width", p.width},
                      {"height", p.height},
                      {"schedule_steps", p.schedule_steps},
                      {"start_step", p.start_step},
                      {"steps", p.steps},
                      {"note", p.note},
                      {"sampler", p.sampler},
                      {"schedule", p.schedule},
                      {"cfg_scale", p.cfg_scale},
                      {"prompt", p.prompt},
                      {"negative_prompt", p.negative_prompt},
                      {"seconds", p.seconds}});
  }
  j["passes"] = std::move(passes);
  nlohmann::json dec = nlohmann::json::array();
  for (const auto& d : report.decodes) {
    dec.push_back({{"vae", d.vae},
                   {"dtype", dtype_name(d.dtype)},
                   {"nonfinite_pixels", d.image.nonfinite_pixels},
                   {"seconds", d.seconds},
                   {"image", to_json(d.image.map)}});
  }
  j["decodes"] = std::move(dec);
  j["layer_retry"] = layer_retry_json(report.layer_retry);
  j["loras"] = loras_json(report);
  if (report.f16_safety) j["f16_safety"] = pipeline::f16_safety_json(*report.f16_safety);
  j["kernels"] = report.kernel_notes;
  if (!report.reproducibility.empty()) j["reproducibility"] = report.reproducibility;
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
          {"first_nonfinite_pass", r.first_nonfinite_pass},
          {"decodes", decodes},
          {"layer_retry", layer_retry_json(r.layer_retry)},
          {"loras", loras_json(r)},
          {"f16_safety", r.f16_safety ? pipeline::f16_safety_json(*r.f16_safety) : nlohmann::json()},
          {"seconds",
           {{"load", r.load_seconds},
            {"text", r.text_seconds},
            {"sampling", r.sampling_seconds},
            {"decode", r.decode_seconds}}}};
}

}  // namespace nanscope::studies
