// nanscope-cli probe: the device probe (every distinct op the model runs at
// this size, on the device and on the reference, compared) and, with
// --f16-safety, the f16-safety probe (which modules would overflow in f16,
// and the per-module overrides that keep the run finite).

#include <cmath>
#include <cstdio>
#include <memory>

#include "common.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "inspect/fault_emulation.hpp"
#include "io/atomic_file.hpp"
#include "pipeline/f16_safety.hpp"
#include "pipeline/session.hpp"
#include "studies/device_probe.hpp"
#include "studies/scenario.hpp"

namespace nanscope::cli {

namespace {

// A line per `every` rows, and a status line per phase.
class ProbeProgressPrinter final : public studies::ProbeObserver {
 public:
  explicit ProbeProgressPrinter(int every) : every_(every) {}
  void on_status(std::string_view m) override {
    std::fprintf(stderr, "%.*s...\n", static_cast<int>(m.size()), m.data());
  }
  void on_row(int done, int total, const studies::ProbeRow& row) override {
    if (row.verdict != studies::ProbeVerdict::agrees) ++bad_;
    if (done % every_ == 0 || done == total) {
      std::fprintf(stderr, "  probed %d of %d ops, %d disagree so far (last: %s %s)\n", done, total, bad_,
                   row.op.c_str(), row.modules.empty() ? "" : row.modules.front().c_str());
    }
  }

 private:
  int every_;
  int bad_ = 0;
};

std::string fmt(double v, const char* f = "%.3g") {
  if (std::isinf(v)) return "inf";
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void print_probe(const studies::ProbeReport& r, int top) {
  std::printf("device probe: \"%s\" against \"%s\", %dx%d, %s\n", r.device.c_str(), r.reference.c_str(), r.width,
              r.height, r.precision.c_str());
  std::printf("model %s (vae %s): %d op calls, %d distinct\n", r.model.c_str(), r.vae.c_str(), r.recorded_calls,
              r.distinct);
  if (!r.emulation.empty()) std::printf("EMULATION: %s\n", r.emulation.c_str());
  std::printf("\n%4s  %-40s %-18s %-22s %9s %9s %6s %6s  %-5s %s\n", "#", "verdict", "op", "precision", "max rel",
              "nmse", "ulp", "bad", "calls", "modules / shapes");
  int shown = 0;
  for (const auto& row : r.rows) {
    if (top > 0 && shown >= top) {
      std::printf("  ... %zu more rows (all of them: --top 0, or --json)\n",
                  r.rows.size() - static_cast<std::size_t>(shown));
      break;
    }
    ++shown;
    std::string mods = row.modules.empty() ? "" : row.modules.front();
    if (row.modules.size() > 1) mods += " (+" + std::to_string(row.modules.size() - 1) + " more)";
    std::printf("%4d  %-40s %-18s %-22s %9s %9s %6llu %6lld  %-5d %s%s\n", shown,
                std::string(studies::probe_verdict_name(row.verdict)).c_str(), row.op.c_str(), row.precision.c_str(),
                fmt(row.max_rel).c_str(), fmt(row.nmse).c_str(), static_cast<unsigned long long>(row.max_ulp),
                static_cast<long long>(row.nonfinite + row.mismatched_nonfinite), row.calls, mods.c_str(),
                row.emulated ? " [EMULATED FAULT]" : "");
    if (row.verdict != studies::ProbeVerdict::agrees) {
      std::printf("%6s %s %s (tolerance nmse %s, max rel %s; seed %llu)\n", "", row.shapes().c_str(),
                  row.params.c_str(), fmt(row.tol_nmse).c_str(), fmt(row.tol_max_rel).c_str(),
                  static_cast<unsigned long long>(row.seed));
      for (std::size_t i = 1; i < row.modules.size(); ++i) std::printf("%6s also %s\n", "", row.modules[i].c_str());
    }
  }
  std::printf("\n%s\n", r.summary.c_str());
}

void print_f16(const pipeline::F16SafetyReport& r, int top) {
  std::printf("f16 safety: %s at %dx%d on \"%s\" (one UNet call and one decode in f32)\n", r.model.c_str(), r.width,
              r.height, r.device.c_str());
  std::printf("vae: %s\n\n", r.vae.c_str());
  std::printf("%-64s %-14s %11s %12s %12s  %s\n", "module", "op", "max|x|", "f16 headroom", "bf16 headroom", "");
  int shown = 0;
  for (const auto& m : r.modules) {
    if (top > 0 && shown >= top) break;
    ++shown;
    std::string flag = m.overflows_f16   ? "OVERFLOWS f16"
                       : m.at_risk       ? "at risk (headroom < " + fmt(pipeline::kF16RiskHeadroom) + "x)"
                       : m.reads_at_risk ? "reads a value at risk"
                                         : "";
    std::printf("%-64s %-14s %11.4g %12s %12s  %s\n", m.module.c_str(), m.op.c_str(), m.max_abs,
                fmt(m.headroom_f16, "%.3gx").c_str(), fmt(m.headroom_bf16, "%.3gx").c_str(), flag.c_str());
  }
  // Modules that read an overflow can sit low in the |x| order: name them all.
  for (const auto& m : r.modules) {
    if (m.reads_at_risk && !m.at_risk)
      std::printf("  %s reads %.4g from another module (past 65504, an f16 input cast makes that Inf)\n",
                  m.module.c_str(), m.input_max);
  }
  std::printf("\n%s\n", r.summary.c_str());
  if (!r.overrides.empty()) {
    std::printf("keeps an f16 run finite (computes these modules in f32):\n");
    for (const auto& o : r.overrides) std::printf("  --set %s\n", o.c_str());
  }
}

}  // namespace

void add_probe_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  struct Opts {
    std::string preset, model, vae, size, json, reference = "reference", emulate;
    std::vector<std::string> sets;
    int every = 10, top = 40;
    std::uint64_t seed = 1;
    bool f16 = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Device probe: every distinct op the model runs at this size, on the device and on the reference device, "
      "compared; --f16-safety: which modules would overflow in f16, and the overrides that fix it");
  cmd->add_option("--preset", o->preset, "Start from this preset (precision, size, prompt, model)");
  cmd->add_option("--model", o->model, "Diffusers folder or single-file checkpoint (default: the embedded model)");
  cmd->add_option("--vae", o->vae, "VAE folder or file replacing the model's");
  cmd->add_option("--size", o->size, "WxH (default: the model's own size)");
  cmd->add_option("--set", o->sets, "key=value (repeatable), e.g. --set unet.dtype=f16");
  cmd->add_option("--json", o->json, "Write the table (or the f16-safety result) as JSON to this file");
  cmd->add_option("--reference", o->reference, "The device to compare against (default: reference)");
  cmd->add_option("--every", o->every, "A progress line every N ops")->check(CLI::Range(1, 100000));
  cmd->add_option("--top", o->top, "Rows to print, worst first (0: all)")->check(CLI::Range(0, 1000000));
  cmd->add_option("--seed", o->seed, "Seed of the probe's inputs");
  cmd->add_option("--emulate-fault", o->emulate,
                  "EMULATION: break this op kind (CONV2D, MATMUL, GROUP_NORM, ...) on the probed device, to see the "
                  "probe name it");
  cmd->add_flag("--f16-safety", o->f16,
                "Instead: one UNet call and one VAE decode in f32, every module's largest |x| against the f16 and "
                "bf16 limits, and the --set lines that keep an f16 run finite");
  cmd->callback([&g, &action, o] {
    action = [&g, o]() -> int {
      RunConfig config = o->preset.empty() ? RunConfig{} : load_preset(o->preset);
      if (!o->model.empty()) config.model = o->model;
      if (!o->vae.empty()) config.vae = o->vae;
      if (!o->size.empty()) {
        const auto x = o->size.find('x');
        if (x == std::string::npos) throw ConfigError("--size: expected WxH such as 512x512, found '" + o->size + "'");
        config.set("width", o->size.substr(0, x));
        config.set("height", o->size.substr(x + 1));
      }
      for (const auto& s : o->sets) config.set(s);
      if (config.device.empty()) config.device = device_pin(g);
      studies::resolve_vae_path(config);
      pipeline::Session session(backend_options(g));
      if (o->f16) {
        if (!o->emulate.empty()) throw ConfigError("--emulate-fault belongs to the device probe, not --f16-safety");
        const pipeline::F16SafetyReport r = pipeline::check_f16_safety(session, config);
        print_f16(r, o->top);
        if (!o->json.empty()) {
          io::write_file_atomic(o->json, pipeline::f16_safety_json(r).dump(2) + "\n");
          std::fprintf(stderr, "wrote %s\n", o->json.c_str());
        }
        return 0;
      }
      std::unique_ptr<inspect::OpFaultEmulator> faults;
      if (!o->emulate.empty()) faults = std::make_unique<inspect::OpFaultEmulator>(o->emulate);
      studies::ProbeOptions po;
      po.config = config;
      po.reference = o->reference;
      po.seed = o->seed;
      po.faults = faults.get();
      ProbeProgressPrinter progress(o->every);
      const studies::ProbeReport r = studies::probe_device(session, po, &progress);
      print_probe(r, o->top);
      if (!o->json.empty()) {
        io::write_file_atomic(o->json, studies::probe_json(r).dump(2) + "\n");
        std::fprintf(stderr, "wrote %s\n", o->json.c_str());
      }
      return 0;
    };
  });
}

}  // namespace nanscope::cli
