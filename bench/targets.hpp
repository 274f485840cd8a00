#pragma once
// The speed targets of the CPU bench, judged from the benches' --json results
// (bench_report runs them and prints this as its table). One row per target:
// what was measured, and whether it was met, missed (by how much) or not
// measured in this run (a stage skipped or a baseline missing).
//
// `results` holds one object per stage, as bench_report names them:
//   ops            bench_ops                       square GEMM, 3x3 conv, attention, memory-bound ops
//   linears        bench_ops --shapes sd15 --only linear   GEMM at the models' shapes: a UNet call's linears
//   unet, unet_128 bench_unet --size 64 / 128      SD 1.5 UNet call, f32 and f16, PyTorch, peers
//   vae, vae_128   bench_unet --component vae      VAE decode at 512x512 / 1024x1024
//   txt2img        bench_txt2img --cold-start 1    embedded model end to end, cold start
//   growth         bench_txt2img --sizes ...       step time and peak RSS per image size
//   inspect        bench_inspect                   the inspector's share of a step

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.hpp"

namespace nanscope::bench {

enum class Verdict { met, missed, not_measured };

inline const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::met: return "met";
    case Verdict::missed: return "missed";
    case Verdict::not_measured: return "not measured";
  }
  return "?";
}

struct Target {
  std::string goal;      // the target in words
  std::string measured;  // what this run measured (and by how much it missed)
  Verdict verdict = Verdict::not_measured;
};

namespace detail {

inline std::string format(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}
inline std::string pct(double v) { return format("%.0f%%", v); }
inline std::string times(double v) { return format("%.2fx", v); }
inline std::string secs(double v) { return format("%.2f s", v); }
// A gap in percentage points, as printed: "1 point", "9 points".
inline std::string points(double v) { return format(std::lround(v) == 1 ? "%.0f point" : "%.0f points", v); }

// The first row of `stage` whose field `key` equals `value` (and whose dtype is `dtype`, when given).
inline const nlohmann::json* find_row(const nlohmann::json& stage, const std::string& key, const std::string& value,
                                      const std::string& dtype = {}) {
  if (!stage.is_object() || !stage.contains("rows")) return nullptr;
  for (const auto& r : stage["rows"])
    if (r.value(key, "") == value && (dtype.empty() || r.value("dtype", "") == dtype)) return &r;
  return nullptr;
}
inline const nlohmann::json* ours(const nlohmann::json& stage, const std::string& dtype) {
  return find_row(stage, "engine", "nanscope", dtype);
}
inline const nlohmann::json* pytorch(const nlohmann::json& stage) { return find_row(stage, "engine", "torch", "f32"); }
// The peer row with the smallest `key` (call time, peak RSS); null without peers.
inline const nlohmann::json* best_peer(const nlohmann::json& stage, const char* key) {
  const nlohmann::json* best = nullptr;
  if (!stage.is_object() || !stage.contains("rows")) return nullptr;
  for (const auto& r : stage["rows"])
    if (r.value("engine", "") == "peer" && (!best || r.at(key).get<double>() < best->at(key).get<double>())) best = &r;
  return best;
}

inline Verdict at_least(double v, double goal) { return v >= goal ? Verdict::met : Verdict::missed; }
inline Verdict at_most(double v, double goal) { return v <= goal ? Verdict::met : Verdict::missed; }

// "<what> <value>" plus ", missed by <gap>" when missed.
inline std::string with_gap(const std::string& text, Verdict v, const std::string& gap) {
  return v == Verdict::missed ? text + "; short by " + gap : text;
}

// Share of peak over rows of ops whose names start with `prefix` (the lowest counts).
inline void share_of_peak(std::vector<Target>& out, const nlohmann::json& ops, const std::string& prefix,
                          const std::string& goal_text, double goal) {
  Target t{goal_text, "", Verdict::not_measured};
  double lowest = 1e9;
  std::string where, all;
  if (ops.is_object() && ops.contains("rows")) {
    for (const auto& r : ops["rows"]) {
      const std::string name = r.value("name", "");
      if (name.rfind(prefix, 0) != 0 || !r.contains("pct_peak") || name.find("(bmm)") != std::string::npos) continue;
      const double p = r["pct_peak"].get<double>();
      all += (all.empty() ? "" : ", ") + name.substr(0, name.find(' ')) + " " + pct(p);
      if (p < lowest) lowest = p, where = name.substr(0, name.find(' '));
    }
  }
  if (!where.empty()) {
    t.verdict = at_least(lowest, goal);
    t.measured = with_gap(all, t.verdict, points(goal - lowest) + " (" + where + ")");
  }
  out.push_back(t);
}

// GEMM at the models' shapes: the linear layers of one SD 1.5 UNet call (bench_ops --shapes sd15 --only linear:
// each distinct shape with its count in the call), their FLOPs over their time, as the call spends it. The
// square SGEMMs of the ops stage (1024, 2048: not shapes of the models; 2048's power-of-two rows alias in the
// caches) are given beside it.
inline void gemm_at_model_shapes(std::vector<Target>& out, const nlohmann::json& linears, const nlohmann::json& ops,
                                 double goal) {
  Target t{"GEMM at the models' shapes (an SD 1.5 UNet call's linear layers, by their FLOPs in the call): >= " +
               pct(goal) + " of the measured FP32 peak",
           "", Verdict::not_measured};
  double flops = 0, secs_total = 0, lowest = 1e9;
  int shapes = 0;
  std::string where;
  const double peak = linears.is_object() ? linears.value("peak_gflops", 0.0) : 0.0;
  if (peak > 0 && linears.contains("rows")) {
    for (const auto& r : linears["rows"]) {
      const std::string name = r.value("name", "");
      if (name.rfind("linear_", 0) != 0 || !r.contains("gflops") || !r.contains("ms")) continue;
      const double count = r.value("count", 1), s = r["ms"].get<double>() / 1e3;
      flops += count * r["gflops"].get<double>() * 1e9 * s;
      secs_total += count * s;
      ++shapes;
      if (const double p = r.value("pct_peak", 0.0); p < lowest) lowest = p, where = name;
    }
  }
  std::string square;
  if (ops.is_object() && ops.contains("rows")) {
    for (const auto& r : ops["rows"]) {
      const std::string name = r.value("name", "");
      if (name.rfind("gemm_", 0) == 0 && r.contains("pct_peak"))
        square += (square.empty() ? "" : ", ") + name + " " + pct(r["pct_peak"].get<double>());
    }
  }
  if (shapes && secs_total > 0) {
    const double share = 100.0 * flops / secs_total / (peak * 1e9);
    t.verdict = at_least(share, goal);
    t.measured = with_gap(pct(share) + " over the call's " + std::to_string(shapes) + " linear shapes (lowest " +
                              where + " " + pct(lowest) + ")",
                          t.verdict, points(goal - share));
    if (!square.empty()) t.measured += "; square SGEMM: " + square;
    // Why a miss: how far the register block itself gets without any memory traffic (bench_ops measures it).
    if (const double block = linears.value("gemm_block_gflops", 0.0); block > 0) {
      t.measured += "; the register block alone (operands in L1) " + pct(100.0 * block / peak) +
                    " of the peak, the linears " + pct(share * peak / block) + " of that";
    }
  } else if (!square.empty()) {
    t.measured = "square SGEMM only (not the models' shapes; run the linears stage): " + square;
  }
  out.push_back(t);
}

// A component's f32 call against PyTorch (>= 2x) and against the fastest peer (faster), as two targets.
inline void against_baselines(std::vector<Target>& out, const nlohmann::json& s, const std::string& label) {
  const nlohmann::json* f32 = ours(s, "f32");
  Target vs{label + ": >= 2x PyTorch", "", Verdict::not_measured};
  if (const nlohmann::json* pt = pytorch(s); f32 && pt) {
    const double r = pt->at("call").get<double>() / f32->at("call").get<double>();
    vs.verdict = at_least(r, 2.0);
    vs.measured = times(r);
  }
  out.push_back(vs);
  Target peer{label + ": faster than the fastest of ONNX Runtime and OpenVINO", "", Verdict::not_measured};
  if (const nlohmann::json* p = best_peer(s, "call"); f32 && p) {
    const double r = p->at("call").get<double>() / f32->at("call").get<double>();
    peer.verdict = r > 1.0 ? Verdict::met : Verdict::missed;
    peer.measured = times(r) + " the speed of " + p->value("name", "?");
  }
  out.push_back(peer);
}

}  // namespace detail

inline std::vector<Target> evaluate_targets(const nlohmann::json& results) {
  using namespace detail;
  std::vector<Target> out;
  const auto stage = [&](const char* name) -> const nlohmann::json& {
    static const nlohmann::json none;
    return results.is_object() && results.contains(name) ? results[name] : none;
  };
  const nlohmann::json& ops = stage("ops");

  // Kernels at the models' shapes.
  gemm_at_model_shapes(out, stage("linears"), ops, 85);
  share_of_peak(out, ops, "conv3x3_", "3x3 convolution (UNet and VAE shapes): >= 85% of peak", 85);
  for (const char* tokens : {"4096", "16384"}) {
    share_of_peak(out, ops, std::string("attention_") + tokens + "x8x40",
                  std::string("attention, fused, ") + tokens + " tokens x 8 heads x 40: >= 50% of peak", 50);
  }
  {
    Target t{"memory-bound ops (norms, activations, add, upsampling): >= 70% of the measured bandwidth", "",
             Verdict::not_measured};
    int n = 0, ok = 0;
    std::string misses;
    if (ops.is_object() && ops.contains("rows")) {
      for (const auto& r : ops["rows"]) {
        if (!r.contains("pct_bandwidth")) continue;
        const double p = r["pct_bandwidth"].get<double>();
        ++n;
        if (p >= 70) {
          ++ok;
        } else {
          misses += (misses.empty() ? "" : ", ") + r.value("name", "?") + " " + pct(p);
        }
      }
    }
    if (n) {
      t.verdict = ok == n ? Verdict::met : Verdict::missed;
      t.measured = std::to_string(ok) + " of " + std::to_string(n) + " at or above" +
                   (misses.empty() ? std::string() : "; below: " + misses);
    }
    out.push_back(t);
  }

  // Whole components against PyTorch and the peers.
  for (const auto& [key, label] :
       {std::pair{"unet", "SD 1.5 UNet call, latent 64"}, std::pair{"unet_128", "SD 1.5 UNet call, latent 128"}}) {
    const nlohmann::json& s = stage(key);
    const nlohmann::json* f32 = ours(s, "f32");
    const double peak = s.is_object() ? s.value("peak_gflops", 0.0) : 0.0;
    Target share{std::string(label) + ", f32: >= 60% of peak over the whole call", "", Verdict::not_measured};
    if (f32 && peak > 0) {
      const double p = 100.0 * s["gflop"].get<double>() / f32->at("call").get<double>() / peak;
      share.verdict = at_least(p, 60);
      share.measured = with_gap(pct(p), share.verdict, points(60 - p));
    }
    out.push_back(share);
    against_baselines(out, s, std::string(label) + ", f32");
    Target half{std::string(label) + ": f16 storage no slower than f32", "", Verdict::not_measured};
    if (const nlohmann::json* f16 = ours(s, "f16"); f32 && f16) {
      const double r = f16->at("call").get<double>() / f32->at("call").get<double>();
      half.verdict = at_most(r, 1.0);
      half.measured = "f16 takes " + times(r) + " f32's time";
      // Rounds with the dtypes taking turns (bench_unet --rounds): the median of each round's ratio, over the
      // rounds both dtypes ran.
      std::vector<double> ratios;
      std::string each;
      for (const std::optional<double>& q : round_ratios(*f16, *f32)) {
        if (!q) continue;
        ratios.push_back(*q);
        each += (each.empty() ? "" : ", ") + times(*q);
      }
      if (!ratios.empty()) {
        const double m = median(ratios);
        half.verdict = at_most(m, 1.0);
        half.measured = "f16 takes " + times(m) + " f32's time (the median of " + std::to_string(ratios.size()) +
                        " rounds taking turns: " + each + ")";
      }
    }
    out.push_back(half);
  }
  for (const auto& [key, label] :
       {std::pair{"vae", "VAE decode, 512x512"}, std::pair{"vae_128", "VAE decode, 1024x1024"}}) {
    const nlohmann::json& s = stage(key);
    const nlohmann::json* f32 = ours(s, "f32");
    against_baselines(out, s, label);
    Target busy{std::string(label) + ": all cores busy (CPU time / wall time >= 90% of the cores)", "",
                Verdict::not_measured};
    if (f32 && s.value("cpus", 0) > 0) {
      const double cores = f32->value("cores", 0.0);
      busy.verdict = at_least(cores, 0.9 * s["cpus"].get<double>());
      busy.measured = format("%.2f", cores) + " of " + std::to_string(s["cpus"].get<int>()) + " cores";
    }
    out.push_back(busy);
  }

  // First call, peak memory: every NaNscope row of every component stage.
  {
    Target first{"first call <= 1.3x a warm call (kernel cache warm)", "", Verdict::not_measured};
    Target memory{"peak RSS <= the lowest peer's (f32, each component and size)", "", Verdict::not_measured};
    double worst_first = 0;
    std::string first_text, memory_text;
    bool memory_missed = false;
    for (const char* key : {"unet", "unet_128", "vae", "vae_128"}) {
      const nlohmann::json& s = stage(key);
      if (!s.is_object() || !s.contains("rows")) continue;
      for (const auto& r : s["rows"]) {
        if (r.value("engine", "") != "nanscope") continue;
        // bench_unet --rounds: the median of each round's own first / call.
        const double ratio = r.contains("first_ratio") ? r.at("first_ratio").get<double>()
                                                       : r.at("first").get<double>() / r.at("call").get<double>();
        worst_first = std::max(worst_first, ratio);
        first_text +=
            (first_text.empty() ? "" : ", ") + std::string(key) + " " + r.value("dtype", "") + " " + times(ratio);
      }
      const nlohmann::json* f32 = ours(s, "f32");
      const nlohmann::json* lean = best_peer(s, "peak_rss_mb");
      if (f32 && lean) {
        const double ratio = f32->at("peak_rss_mb").get<double>() / lean->at("peak_rss_mb").get<double>();
        memory_missed = memory_missed || ratio > 1.0;
        memory_text += (memory_text.empty() ? "" : ", ") + std::string(key) + " " + times(ratio);
      }
    }
    if (!first_text.empty()) {
      first.verdict = at_most(worst_first, 1.3);
      first.measured = first_text;
    }
    if (!memory_text.empty()) {
      memory.verdict = memory_missed ? Verdict::missed : Verdict::met;
      memory.measured = memory_text + " of the lowest peer's";
    }
    out.push_back(first);
    out.push_back(memory);
  }

  // Growth with the image size (the embedded model): every size ran, and the peak RSS against diffusers'.
  {
    const nlohmann::json& g = stage("growth");
    Target runs{"every image size runs (no crash or stall), time per step against the pixel count", "",
                Verdict::not_measured};
    Target memory{"txt2img peak RSS <= diffusers' at every size", "", Verdict::not_measured};
    if (g.is_object() && g.contains("sizes") && !g["sizes"].empty()) {
      const auto& sizes = g["sizes"];
      const auto& first = sizes.front();
      std::string text, mem;
      bool mem_missed = false, mem_any = false;
      for (const auto& r : sizes) {
        const double px = std::pow(r["size"].get<double>() / first["size"].get<double>(), 2.0);
        text += (text.empty() ? "" : "; ") + std::to_string(r["size"].get<int>()) + ": " + format("%.0fx pixels", px) +
                ", " + times(r["per_step"].get<double>() / first["per_step"].get<double>()) + " the step time";
        if (r.contains("torch")) {
          const double ratio = r["peak_rss_mb"].get<double>() / r["torch"]["peak_rss_mb"].get<double>();
          mem_any = true;
          mem_missed = mem_missed || ratio > 1.0;
          mem += (mem.empty() ? "" : ", ") + std::to_string(r["size"].get<int>()) + ": " + times(ratio);
        } else if (r.value("torch_failed", false)) {
          // diffusers did not finish that size (out of memory): ours ran, at this peak.
          mem_any = true;
          mem += (mem.empty() ? "" : ", ") + std::to_string(r["size"].get<int>()) + ": diffusers failed, ours " +
                 format("%.0f MB", r["peak_rss_mb"].get<double>());
        }
      }
      runs.verdict = Verdict::met;  // a size that crashed or failed ends the stage without its JSON
      runs.measured = text;
      if (mem_any) {
        memory.verdict = mem_missed ? Verdict::missed : Verdict::met;
        memory.measured = mem + " (ours / diffusers')";
      }
    }
    out.push_back(runs);
    out.push_back(memory);
  }

  // Cold start and warm start (report R4), the embedded model end to end, the inspector.
  {
    const nlohmann::json& t = stage("txt2img");
    Target e2e{"embedded model, 20 steps with CFG at 64x64, end to end: < 2 s", "", Verdict::not_measured};
    if (t.is_object() && t.contains("sizes") && !t["sizes"].empty()) {
      const double s = t["sizes"].front()["total"].get<double>();
      e2e.verdict = s < 2.0 ? Verdict::met : Verdict::missed;
      e2e.measured = secs(s);
    }
    out.push_back(e2e);
    Target cold{"cold start (both kernel caches empty), whole run: < 10 s", "", Verdict::not_measured};
    Target warm{"warm start, loading the cached kernels: < 0.3 s", "", Verdict::not_measured};
    if (t.is_object() && t.contains("cold_start")) {
      const auto& h = t["cold_start"]["helpers"];
      const double c = h["cold"].get<double>(), w = h["warm_kernel_s"].get<double>();
      cold.verdict = c < 10.0 ? Verdict::met : Verdict::missed;
      cold.measured = with_gap(secs(c), cold.verdict, secs(c - 10.0));
      warm.verdict = w < 0.3 ? Verdict::met : Verdict::missed;
      warm.measured = secs(w) + " (whole warm run " + secs(h["warm"].get<double>()) + ")";
    }
    out.push_back(cold);
    out.push_back(warm);
    const nlohmann::json& in = stage("inspect");
    Target insp{"inspector: <= 3% of a step at every size", "", Verdict::not_measured};
    if (in.is_object() && in.contains("sizes") && !in["sizes"].empty()) {
      double worst = -1e9;
      std::string text;
      for (const auto& r : in["sizes"]) {
        worst = std::max(worst, r["overhead_pct"].get<double>());
        text += (text.empty() ? "" : ", ") + std::to_string(r["size"].get<int>()) + ": " +
                format("%+.1f%%", r["overhead_pct"].get<double>());
      }
      insp.verdict = at_most(worst, 3.0);
      insp.measured = text;
    }
    out.push_back(insp);
  }
  return out;
}

}  // namespace nanscope::bench
