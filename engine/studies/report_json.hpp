#pragma once
// The inspector's JSON report: what `nanscope-cli inspect --json` and
// `scenario run --json` write, and what a front end can save. Keys are
// snake_case; verdicts use their names ("non-finite").
//
//   {
//     "nanscope_inspect_report": 1,
//     "nanscope_version": "0.1.0", "nanscope_commit": "20587d2c1f" (null when built without git),
//     "verdict": "non-finite", "summary": "...", "origin": "vae.decoder....conv1",
//     "origin_op": "CONV2D", "near_limit_origin": "...", "first_bad_step": 3,
//     "first_bad_branch": "noise_cond", "first_bad_pass": 2 (the hires fix's second pass; null: none),
//     "emulation": false, "emulation_note": "",
//     "outcome": "...", "device": "...", "model": "...",
//     "timings": {"load": s, "text": s, "sampling": s, "decode": s},
//     "passes": [{"pass": 1, "kind": "txt2img", "width", "height", "schedule_steps", "start_step",
//                 "steps", "note", "seconds"}, {"pass": 2, "kind": "hires", ...}],
//     "steps": [{"step": 1, "pass": 1, "timestep": 999, "sigma": .., "sigma_after": .., "verdict": "clean",
//                "latent": {...map...}, "noise_cond": {...}, "noise_uncond": {...}, "seconds": ..}],
//     "decodes": [{"vae": "...", "dtype": "f16", "nonfinite_pixels": 12, "image": {...map...}}],
//     "layer_retry": null, or (nan_policy=retry-layer-f32 after a failed call) {"clean": true,
//       "upcast": ["vae.decoder....conv1", ...], "overrides": [{"pattern": "...", "dtype": "f32"}],
//       "attempts": [{"call": "vae decode", "origin", "origin_op", "upcast", "nonfinite_before",
//                     "nonfinite_after", "trace_seconds", "redo_seconds"}],
//       "seconds": s, "limit": 8, "limit_reached": false, "remaining": null or "..."},
//     "f16_safety": (only with inspect.f16_safety=on) pipeline::f16_safety_json: {"safe", "flagged",
//       "overrides": ["vae.decoder....conv1.dtype=f32", ...], "modules": [...], ...},
//     "image": {...map...},
//     "traces": [{"call": "vae decode", "origin": 17, "near_limit": 17, "ops": [...]}],
//     "config": {...preset JSON...}
//   }
//
// A map: {"verdict", "note", "min", "max", "mean", "std", "max_abs", "count", "nan", "pos_inf",
// "neg_inf", "near_limit", "near_limit_share", "band_score", "band_rows", "band_cols",
// "saturation", "clipped", "channels": [{min, max, mean, std, max_abs, nan, pos_inf, neg_inf, near_limit}]}.

#include <nlohmann/json.hpp>
#include <vector>

#include "config/run_config.hpp"
#include "inspect/stats_json.hpp"
#include "pipeline/run_report.hpp"

namespace nanscope::studies {

inline constexpr int kReportVersion = 1;

// Sets "nanscope_version" and "nanscope_commit" (null when the build had no
// git commit) in a report object: every JSON report says which NaNscope wrote it.
void add_version_fields(nlohmann::json& report);

// The short run report a PNG's `nanscope` chunk carries beside the config (CLI
// generate and the workbench's Save write the same): device, model, family,
// outcome, first_nonfinite_step, decodes [{vae, dtype, nonfinite, seconds}],
// layer_retry (as in report_json), seconds {load, text, sampling, decode}.
nlohmann::json image_report_json(const pipeline::RunReport& report);

// The retry-layer-f32 part of a report; null when the policy did nothing.
nlohmann::json layer_retry_json(const pipeline::LayerRetryReport& report);

// The whole report of one image of a run.
nlohmann::json report_json(const RunConfig& config, const std::vector<pipeline::StepReport>& steps,
                           const pipeline::RunReport& report);

}  // namespace nanscope::studies
