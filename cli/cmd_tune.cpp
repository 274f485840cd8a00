// `nanscope-cli tune`: times the GPU-style GEMM tile shapes the device can run
// on one f32 GEMM and keeps the fastest for this device next to the kernel
// cache (engine/backend/opencl/gemm.hpp), where later runs take it in place of
// the built-in tuning table. Prints a table.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "common.hpp"
#include "core/error.hpp"

namespace nanscope::cli {

namespace {

struct TuneOptions {
  std::string shape = "2048x2048x2048";
  int reps = 5;
  bool dry_run = false;
};

int run_tune(const GlobalOptions& g, const TuneOptions& o) {
  std::int64_t m = 0, n = 0, k = 0;
  {
    std::istringstream in(o.shape);
    char x1 = 0, x2 = 0;
    if (!(in >> m >> x1 >> n >> x2 >> k) || x1 != 'x' || x2 != 'x' || m <= 0 || n <= 0 || k <= 0 || !in.eof()) {
      throw ConfigError("--shape \"" + o.shape + "\" is not MxNxK with positive sizes, e.g. 2048x2048x2048");
    }
  }
  const SelectedDevice sel = select(g);
  if (sel.info.kind == DeviceKind::reference) {
    std::cout << "Device " << sel.info.index << " \"" << sel.info.name
              << "\" is the built-in reference device: it has no kernels to tune.\n";
    return 0;
  }
  opencl::OpenClBackend backend(sel.info, backend_options(g));
  if (backend.kernel_style() != opencl::KernelStyle::gpu) {
    std::cout << "Device " << sel.info.index << " \"" << sel.info.name
              << "\" runs the CPU-style kernels (register-blocked panels sized to its vector registers): "
                 "there are no GPU tiles to tune. NANSCOPE_KERNEL_STYLE=gpu tunes the GPU tiles anyway.\n";
    return 0;
  }
  std::cout << "Tuning the GEMM tiles of " << sel.info.index << " \"" << sel.info.name << "\" (driver "
            << sel.info.driver_version << ") on an f32 " << m << "x" << n << "x" << k << " GEMM, median of " << o.reps
            << "\n\n";
  std::printf("| tiles (M x N x K / per work-item) | work-items | ms | GFLOP/s |\n|---|---:|---:|---:|\n");
  opencl::gemm::TileTiming best;
  for (const auto& t : opencl::gemm::tile_candidates(sel.info)) {
    const auto r = opencl::gemm::time_tiles(backend, t, m, n, k, o.reps);
    const int items = (t.ts_m / t.wpt_m) * (t.ts_n / t.wpt_n);
    if (!r.error.empty()) {
      std::printf("| %dx%dx%d / %dx%d | %d | cannot run: %s | |\n", t.ts_m, t.ts_n, t.ts_k, t.wpt_m, t.wpt_n, items,
                  r.error.c_str());
      continue;
    }
    std::printf("| %dx%dx%d / %dx%d | %d | %.3f | %.1f |\n", t.ts_m, t.ts_n, t.ts_k, t.wpt_m, t.wpt_n, items, r.ms,
                r.gflops);
    std::fflush(stdout);
    if (best.gflops < r.gflops) best = r;
  }
  if (best.gflops <= 0) throw DeviceError("no GEMM tile shape could run on \"" + sel.info.name + "\"");
  const auto& w = best.tiles;
  std::printf("\nfastest: %dx%dx%d / %dx%d, %.1f GFLOP/s\n", w.ts_m, w.ts_n, w.ts_k, w.wpt_m, w.wpt_n, best.gflops);
  if (o.dry_run) {
    std::printf("not stored (--dry-run)\n");
  } else {
    std::printf("stored in %s (later runs on this device use it)\n",
                opencl::gemm::store_tuned_tiles(backend, best).c_str());
  }
  return 0;
}

}  // namespace

void add_tune_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* cmd =
      app.add_subcommand("tune", "Time the GPU GEMM tile shapes on the device and keep the fastest for later runs");
  auto o = std::make_shared<TuneOptions>();
  cmd->add_option("--shape", o->shape, "The GEMM to time, MxNxK (default 2048x2048x2048)");
  cmd->add_option("--reps", o->reps, "Timed repetitions per tile shape (median)")->check(CLI::Range(1, 1000));
  cmd->add_flag("--dry-run", o->dry_run, "Print the table without storing the winner");
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_tune(g, *o); }; });
}

}  // namespace nanscope::cli
