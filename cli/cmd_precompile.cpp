// `nanscope-cli precompile`: builds every kernel program for the chosen device
// in every precision variant and, on GPUs, in every variant the shapes of SD
// 1.x/2.x/XL and the embedded model take (GEMM tiles, tensor-core blocks,
// flash tiles: OpenClBackend::precompile_variants), and fills the kernel
// cache (report R4), so the first real run pays no compile time. Prints what
// each build cost.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "backend/opencl/opencl_backend.hpp"
#include "common.hpp"
#include "core/log.hpp"

namespace nanscope::cli {

namespace {

int run_precompile(const GlobalOptions& g, const std::string& pin) {
  const SelectedDevice sel = select(g, pin);
  if (sel.info.kind == DeviceKind::reference) {
    std::cout << "Device " << sel.info.index << " \"" << sel.info.name
              << "\" is the built-in reference device: plain C++, nothing to compile.\n";
    return 0;
  }
  opencl::OpenClBackend backend(sel.info, backend_options(g));
  const std::string dir = backend.programs().dir();
  std::cout << "Precompiling kernels for " << sel.info.index << " \"" << sel.info.name << "\" (driver "
            << sel.info.driver_version << ")\n"
            << "kernel cache: " << (dir.empty() ? "(disabled: nothing will be kept)" : dir) << std::endl;

  const auto t0 = std::chrono::steady_clock::now();
  const auto records = backend.precompile();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::size_t width = 7;
  for (const auto& r : records) width = std::max(width, r.program.size());
  double total = 0.0;
  std::size_t hits = 0, failures = 0;
  std::printf("%-*s  %-9s  %9s  %s\n", static_cast<int>(width), "program", "result", "ms", "options");
  for (const auto& r : records) {
    const char* result = r.failed ? "FAILED" : r.cache_hit ? "cache hit" : "build";
    std::printf("%-*s  %-9s  %9.0f  %s%s%s\n", static_cast<int>(width), r.program.c_str(), result, r.ms,
                r.options.c_str(), r.note.empty() || r.failed ? "" : "  # ", r.failed ? "" : r.note.c_str());
    total += r.ms;
    hits += r.cache_hit ? 1 : 0;
    failures += r.failed ? 1 : 0;
  }
  // Builds run in parallel: the summed time exceeds the wall time.
  std::printf("total: %zu programs, %zu built, %zu from cache, %zu failed; %.0f ms of build/load time, %.0f ms wall\n",
              records.size(), records.size() - hits - failures, hits, failures, total, wall_ms);
  if (records.empty()) std::printf("(no kernel programs are embedded in this build)\n");
  std::fflush(stdout);
  if (failures) {
    // The first failure in full (with its build log); the others usually share the cause.
    for (const auto& r : records) {
      if (r.failed) {
        std::fprintf(stderr, "error: %s\n", r.error.c_str());
        break;
      }
    }
    return 1;
  }
  return 0;
}

}  // namespace

void add_precompile_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* cmd = app.add_subcommand("precompile", "Build every kernel program for a device and fill the kernel cache");
  auto pin = std::make_shared<std::string>();
  cmd->add_option("--device", *pin, "Device to build for (default: the global --device / NANSCOPE_DEVICE / default)");
  cmd->callback([&g, &action, pin] { action = [&g, pin] { return run_precompile(g, *pin); }; });
}

}  // namespace nanscope::cli
