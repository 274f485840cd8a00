// nanscope-cli inspect: any preset run under the inspector (step table,
// verdict, origin op, JSON report, optional layer trace). And
// nanscope-cli scenario list / run: the five field reports (R0-R4) with their
// fixed twins.

#include <spawn.h>
#include <spdlog/fmt/fmt.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common.hpp"
#include "config/lora_list.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "pipeline/session.hpp"
#include "studies/ab.hpp"
#include "studies/report_json.hpp"
#include "studies/scenario.hpp"
#include "studies/sweep.hpp"

namespace nanscope::cli {

namespace fs = std::filesystem;

namespace {

class StatusObserver final : public pipeline::RunObserver {
 public:
  void on_status(std::string_view m) override {
    std::fprintf(stderr, "%.*s...\n", static_cast<int>(m.size()), m.data());
  }
};

std::string count_str(std::int64_t n) { return n == 0 ? "-" : std::to_string(n); }

void print_steps(const studies::InspectedRun& run) {
  if (run.steps.empty()) return;
  std::printf("%4s %7s %10s %11s %8s %8s %8s %6s %6s  %s\n", "step", "t", "sigma", "latent|x|", "lat.bad", "cond.bad",
              "unc.bad", "band", "sat%", "verdict");
  int pass = 0;
  for (const auto& s : run.steps) {
    if (s.image != 0) continue;
    if (s.passes > 1 && s.pass != pass) {
      // Each pass's header says what it ran with (the hires pass may have its own sampler, prompt and CFG).
      pass = s.pass;
      std::string with;
      if (!run.reports.empty()) {
        for (const auto& p : run.reports.front().passes) {
          if (p.pass != pass) continue;
          with = ": " + p.sampler + " (" + p.schedule + " schedule), CFG " + fmt::format("{}", p.cfg_scale) +
                 ", prompt \"" + p.prompt + "\"";
          if (!p.negative_prompt.empty()) with += ", negative \"" + p.negative_prompt + "\"";
        }
      }
      std::printf("-- pass %d%s%s --\n", pass, pass > 1 ? " (hires fix)" : "", with.c_str());
    }
    const auto& st = s.stats;
    if (st.latent.channels.empty()) {  // inspect.stats_every skipped this step
      std::printf("%4d %7.1f %10.4g  (no statistics at this step: inspect.stats_every)\n", s.index + 1,
                  static_cast<double>(s.timestep), static_cast<double>(s.sigma));
      continue;
    }
    std::printf("%4d %7.1f %10.4g %11.4g %8s %8s %8s %6.1f %6.2f  %s\n", s.index + 1, static_cast<double>(s.timestep),
                static_cast<double>(s.sigma), st.latent.all.max_abs, count_str(st.latent.all.nonfinite()).c_str(),
                count_str(st.noise_cond.all.nonfinite()).c_str(),
                st.noise_uncond ? count_str(st.noise_uncond->all.nonfinite()).c_str() : "n/a", st.latent.bands.score(),
                st.latent.saturation * 100.0, std::string(inspect::verdict_name(st.verdict)).c_str());
  }
}

void print_trace(const inspect::LayerTrace& t) {
  std::printf("\nlayer trace: %s (%zu ops)\n", t.call.c_str(), t.ops.size());
  std::printf("%5s  %-58s %-18s %-5s %11s %8s  %s\n", "#", "module", "op", "dtype", "max|x|", "bad", "");
  for (const auto& r : t.ops) {
    std::string flags;
    if (r.index == t.origin) flags += " <- ORIGIN (finite inputs, non-finite output)";
    if (r.index == t.near_limit) flags += " <- first op near the dtype limit";
    if (r.emulated_fault) flags += " [EMULATED FAULT]";
    std::printf("%5d  %-58s %-18s %-5s %11.4g %8s %s\n", r.index, r.full_path().c_str(), r.op.c_str(),
                std::string(dtype_name(r.dtype)).c_str(), r.output.max_abs, count_str(r.output.nonfinite()).c_str(),
                flags.c_str());
  }
}

// nan_policy=retry-layer-f32: each upcast with its origin and time, the set
// found, and the same fix as --set arguments.
void print_layer_retry(const pipeline::LayerRetryReport& lr) {
  if (!lr.active) return;
  std::printf("\nretry-layer-f32 (limit %d upcast modules per image):\n", lr.limit);
  for (std::size_t i = 0; i < lr.attempts.size(); ++i) {
    const auto& a = lr.attempts[i];
    // The first trace of a failed decode is the inspector's own (inspect.trace): it costs the policy nothing.
    char trace[48] = "the inspector's trace";
    if (a.trace_seconds > 0) std::snprintf(trace, sizeof trace, "trace %.3f s", a.trace_seconds);
    std::printf(
        "  %zu. %s: %s (%s) broke with %lld non-finite values; computed it in f32, redid the call: %s "
        "(%s, redo %.3f s)\n",
        i + 1, a.call.c_str(), a.origin.c_str(), a.origin_op.c_str(), static_cast<long long>(a.nonfinite_before),
        a.nonfinite_after == 0 ? "clean" : (std::to_string(a.nonfinite_after) + " non-finite left").c_str(), trace,
        a.redo_seconds);
  }
  std::printf("  modules in f32: %zu, retries took %.3f s: %s\n", lr.upcast.size(), lr.seconds(),
              lr.clean ? "clean" : lr.remaining.c_str());
  if (!lr.upcast.empty()) {
    std::string sets;
    for (const auto& u : lr.upcast) sets += " --set " + u + ".dtype=f32";
    std::printf("  the fix as settings:%s\n", sets.c_str());
  }
}

void print_result(const studies::InspectedRun& run, bool trace, const std::string& note) {
  if (!run.error.empty()) std::printf("error: %s\n\n", run.error.c_str());
  print_steps(run);
  if (trace && !run.reports.empty())
    for (const auto& t : run.reports.front().inspection.traces) print_trace(t);
  std::printf("\n");
  if (!run.reports.empty() && run.reports.front().inspection.emulation)
    std::printf("EMULATION: %s\n", run.reports.front().inspection.emulation_note.c_str());
  if (!note.empty()) std::printf("note: %s\n", note.c_str());
  std::printf("verdict: %s\n", std::string(inspect::verdict_name(run.verdict)).c_str());
  std::printf("summary: %s\n", run.summary.c_str());
  std::printf("origin: %s\n", run.origin.empty() ? "(none)" : run.origin.c_str());
  if (!run.reports.empty()) {
    const auto& ri = run.reports.front().inspection;
    if (ri.first_bad_step >= 0)
      std::printf(
          "first bad step: %s%d (%s)\n",
          run.reports.front().passes.size() > 1 ? ("pass " + std::to_string(ri.first_bad_pass) + " step ").c_str() : "",
          ri.first_bad_step + 1, ri.first_bad_branch.c_str());
    if (!ri.near_limit_origin.empty()) std::printf("first op near the dtype limit: %s\n", ri.near_limit_origin.c_str());
    if (!run.reports.front().outcome.empty()) std::printf("outcome: %s\n", run.reports.front().outcome.c_str());
    print_layer_retry(run.reports.front().layer_retry);
  }
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  io::write_file_atomic(path, j.dump(2) + "\n");
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

}  // namespace

studies::InspectedRun inspect_config(const GlobalOptions& g, RunConfig config, bool trace) {
  if (trace) config.set("inspect.trace", "always");
  if (config.device.empty()) config.device = device_pin(g);
  studies::resolve_vae_path(config);
  pipeline::Session session(backend_options(g));
  StatusObserver status;
  studies::InspectedRun run = studies::run_inspected(session, config, &status);
  print_result(run, trace, "");
  return run;
}

void add_inspect_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  struct Opts {
    std::string preset, json, nan_policy;
    std::vector<std::string> sets, loras;
    bool trace = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "Run a preset under the inspector: step table, verdict, origin op, JSON report");
  cmd->add_option("--preset", o->preset, "Preset JSON file (any preset, e.g. resources/presets/R2.json)")->required();
  cmd->add_option("--set", o->sets, "key=value on top of the preset (repeatable), e.g. --set vae.dtype=f32");
  cmd->add_option("--json", o->json, "Write the JSON report to this file");
  cmd->add_option("--nan-policy", o->nan_policy,
                  "report, stop, retry-vae-f32, retry-vae:PATH or retry-layer-f32 (instead of the preset's)");
  cmd->add_option("--lora", o->loras,
                  "A LoRA to apply as FILE[:WEIGHT] or FILE:TE:UNET (repeatable); with --set lora.mode=unmerged its "
                  "ops are traced apart as <module>.lora");
  cmd->add_flag(
      "--trace", o->trace,
      "Trace every op of the last step's UNet call and of the decode (inspect.trace=always) and print the trace");
  cmd->callback([&g, &action, o] {
    action = [&g, o]() -> int {
      RunConfig config = load_preset(o->preset);
      if (!o->nan_policy.empty()) config.set("nan_policy", o->nan_policy);
      for (const auto& s : o->sets) config.set(s);
      for (const auto& l : o->loras) add_loras(config, l, "--lora");
      const studies::InspectedRun run = inspect_config(g, config, o->trace);
      write_json(o->json, run.report);
      return 0;
    };
  });
}

void add_scenario_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  CLI::App* cmd = app.add_subcommand("scenario", "The five field reports (R0-R4) as runnable scenarios");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "Name the scenarios, one line each");
  list->callback([&action] {
    action = [] {
      for (const auto& s : studies::scenarios()) {
        std::printf("%s  %s\n    broken: %s -> expect %s; fixed (--fixed): %s\n", s.id.c_str(), s.title.c_str(),
                    s.preset.c_str(), std::string(inspect::verdict_name(s.broken_verdict)).c_str(), s.fix.c_str());
      }
      return 0;
    };
  });
  struct Opts {
    std::string id, json;
    bool fixed = false, trace = false;
    std::vector<std::string> sets;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* run = cmd->add_subcommand("run", "Run one scenario (broken, or its fixed twin with --fixed)");
  run->add_option("id", o->id, "R0, R1, R2, R3 or R4")->required();
  run->add_flag("--fixed", o->fixed, "Run the fixed twin");
  run->add_option("--json", o->json, "Write the JSON report to this file");
  run->add_option("--set", o->sets, "key=value on top of the scenario's preset (repeatable)");
  run->add_flag("--trace", o->trace, "Print the layer traces taken");
  run->callback([&g, &action, o] {
    action = [&g, o]() -> int {
      const studies::Scenario* s = studies::find_scenario(o->id);
      if (s == nullptr) throw ConfigError("scenario '" + o->id + "': expected one of R0, R1, R2, R3, R4");
      studies::ScenarioOptions so;
      so.sets = o->sets;
      so.backend = backend_options(g);
      if (!g.device.empty() && s->id != "R3") so.sets.push_back("device=" + g.device);
      StatusObserver status;
      so.observer = &status;
      std::printf("%s%s: %s\n\n", s->id.c_str(), o->fixed ? " (fixed)" : "", s->title.c_str());
      const studies::ScenarioRun r = studies::run_scenario(*s, o->fixed, so);
      print_result(r.run, o->trace, r.note);
      if (r.run.verdict == inspect::Verdict::device_missing && r.run.report.contains("devices")) {
        std::printf("devices:\n");
        for (const auto& d : r.run.report["devices"])
          std::printf("  [%d] %s (%s)%s: %s\n", d["index"].get<int>(), d["name"].get<std::string>().c_str(),
                      d["id"].get<std::string>().c_str(), d["default"].get<bool>() ? " default" : "",
                      d["reason"].get<std::string>().c_str());
      }
      write_json(o->json, r.run.report);
      return 0;
    };
  });
}

void add_ab_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  struct Opts {
    std::string preset, json;
    std::vector<std::string> sets, a, b;
    double threshold = 1e-2;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "ab", "The same seed under two configs or devices: per-step divergence of the latents, and of the images");
  cmd->add_option("--preset", o->preset, "Preset JSON both sides start from (default: the built-in defaults)");
  cmd->add_option("--set", o->sets, "key=value for both sides (repeatable)");
  cmd->add_option("--a", o->a, "key=value for side A only (repeatable)");
  cmd->add_option("--b", o->b, "key=value for side B only (repeatable), e.g. --b device=reference");
  cmd->add_option("--threshold", o->threshold, "Relative L2 above which a step counts as divergent (default 0.01)");
  cmd->add_option("--json", o->json, "Write the A/B report to this file");
  cmd->callback([&g, &action, o] {
    action = [&g, o]() -> int {
      RunConfig base = o->preset.empty() ? RunConfig{} : load_preset(o->preset);
      for (const auto& s : o->sets) base.set(s);
      if (base.device.empty()) base.device = device_pin(g);
      RunConfig a = base, b = base;
      for (const auto& s : o->a) a.set(s);
      for (const auto& s : o->b) b.set(s);
      studies::resolve_vae_path(a);
      studies::resolve_vae_path(b);
      StatusObserver status;
      const studies::AbResult r = studies::run_ab(a, b, o->threshold, &status, backend_options(g));
      std::printf("A: %s\nB: %s\n\n%4s %14s %12s %8s %8s\n", r.a.summary.c_str(), r.b.summary.c_str(), "step",
                  "latent rel L2", "max|a-b|", "A bad", "B bad");
      for (const auto& s : r.steps)
        std::printf("%4d %14.4g %12.4g %8s %8s\n", s.step, s.latent_rel_l2, s.latent_max_abs,
                    count_str(s.nonfinite_a).c_str(), count_str(s.nonfinite_b).c_str());
      std::printf("\nimage: relative L2 %.4g, largest channel difference %d of 255\n", r.image_rel_l2,
                  r.image_max_diff);
      if (r.first_divergent_step > 0)
        std::printf("first step above %.3g: %d\n", r.threshold, r.first_divergent_step);
      else
        std::printf("no step above %.3g\n", r.threshold);
      write_json(o->json, r.report);
      return 0;
    };
  });
}

void add_sweep_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  struct Opts {
    std::string spec;
    int workers = 1;
    int cell = -1;
    bool merge_only = false;
    bool count = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Run configs x seeds x sizes x devices as independent cells (resumable) and merge a table");
  cmd->add_option("spec", o->spec, "Sweep spec JSON (docs/sweep/README.md)")->required();
  cmd->add_option("--workers", o->workers, "Cells run at once locally, each its own process (default 1)");
  cmd->add_option("--cell", o->cell,
                  "Run only this cell (0-based): one Slurm array task ($SLURM_ARRAY_TASK_ID) or Kubernetes "
                  "indexed-Job pod ($JOB_COMPLETION_INDEX)");
  cmd->add_flag("--merge", o->merge_only, "Only merge the finished cells' reports into summary.csv / summary.md");
  cmd->add_flag("--count", o->count,
                "Only print the number of cells (a job array's size: Slurm --array=0-$((N-1))) and exit");
  cmd->callback([&g, &action, o] {
    action = [&g, o]() -> int {
      const studies::SweepSpec spec = studies::SweepSpec::load(o->spec);
      const int n = static_cast<int>(spec.cells.size());
      if (o->count) {
        std::printf("%d\n", n);
        return 0;
      }
      if (o->cell >= 0) {
        const bool ran = studies::run_sweep_cell(spec, o->cell);
        std::printf("cell %d (%s): %s\n", o->cell, spec.cells[static_cast<std::size_t>(o->cell)].id.c_str(),
                    ran ? "done" : "report exists, skipped");
        return 0;
      }
      if (!o->merge_only) {
        // Each cell in its own process: a crash or an out-of-memory kill costs one cell, and
        // the same command line is what a Slurm or Kubernetes task runs.
        const std::string exe = fs::read_symlink("/proc/self/exe").string();
        std::vector<pid_t> running;
        int next = 0, failed = 0;
        auto wait_one = [&] {
          int status = 0;
          const pid_t pid = ::wait(&status);
          if (pid <= 0) return;
          running.erase(std::remove(running.begin(), running.end(), pid), running.end());
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
        };
        while (next < n || !running.empty()) {
          while (next < n && static_cast<int>(running.size()) < std::max(1, o->workers)) {
            if (fs::exists(spec.report_path(spec.cells[static_cast<std::size_t>(next)]))) {
              std::printf("cell %d (%s): report exists, skipped\n", next,
                          spec.cells[static_cast<std::size_t>(next)].id.c_str());
              ++next;
              continue;
            }
            std::vector<std::string> args = {exe, "sweep", o->spec, "--cell", std::to_string(next)};
            if (!g.kernel_cache.empty()) args.insert(args.begin() + 1, {"--kernel-cache", g.kernel_cache});
            if (g.memory_limit_mib)
              args.insert(args.begin() + 1, {"--memory-limit", std::to_string(g.memory_limit_mib)});
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            pid_t pid = 0;
            if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
              throw Error("sweep: cannot start a worker process for cell " + std::to_string(next));
            }
            running.push_back(pid);
            ++next;
          }
          if (!running.empty()) wait_one();
        }
        if (failed > 0)
          std::fprintf(stderr, "sweep: %d cell(s) failed; rerun the same command to retry them\n", failed);
      }
      const int done = studies::merge_sweep(spec);
      std::printf("%d of %d cells finished; wrote %s and %s\n", done, n, (spec.out / "summary.csv").c_str(),
                  (spec.out / "summary.md").c_str());
      return done == n ? 0 : 1;
    };
  });
}

}  // namespace nanscope::cli
