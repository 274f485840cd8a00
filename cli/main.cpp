// nanscope-cli: the global options and the subcommands (each registers itself
// from its cmd_*.cpp file). Global options are accepted before or after the
// subcommand.
#include <cstdio>
#include <exception>

#include "common.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/version.hpp"

namespace nanscope::cli {

std::string device_pin(const GlobalOptions& g, const std::string& override_pin) {
  if (!override_pin.empty()) return override_pin;
  if (!g.device.empty()) return g.device;
  return device_pin_from_env();
}

BackendOptions backend_options(const GlobalOptions& g) {
  // The environment is read here, once, not deep in the engine.
  BackendOptions o = backend_options_from_environment();
  o.kernel_cache_dir = g.kernel_cache;  // empty: ProgramCache::default_dir() reads NANSCOPE_KERNEL_CACHE
  o.memory_limit_bytes = g.memory_limit_mib << 20;
  if (g.max_alloc_limit_mib) o.max_alloc_limit_bytes = g.max_alloc_limit_mib << 20;
  return o;
}

SelectedDevice select(const GlobalOptions& g, const std::string& override_pin) {
  SelectedDevice s;
  s.list = enumerate_devices();
  s.info = select_device(s.list, device_pin(g, override_pin));
  return s;
}

std::string format_mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }
std::string format_kib(std::uint64_t bytes) { return std::to_string(bytes >> 10) + " KiB"; }

}  // namespace nanscope::cli

int main(int argc, char** argv) {
  using namespace nanscope;
  // The name is fixed, not argv[0]: usage lines (and the manual page made from them) say nanscope-cli.
  CLI::App app{"NaNscope: the numerics workbench for diffusion image generation (command line)", "nanscope-cli"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_line("nanscope-cli"), "Print the version and the git commit, and exit");
  app.fallthrough();  // subcommands pass the global options below up: `generate --device 1` works
  cli::GlobalOptions g;
  app.add_flag("-v,--verbose", g.verbose, "Debug logs (device discovery, builds, cache)");
  app.add_option("--log", g.log_level, "Log level: trace, debug, info, warn, error, off");
  app.add_option("--device", g.device, "Device to run on: index, id, name or part of a name (also NANSCOPE_DEVICE)");
  app.add_option(
      "--kernel-cache", g.kernel_cache,
      "Kernel binary cache directory (also NANSCOPE_KERNEL_CACHE; default $XDG_CACHE_HOME/nanscope/kernels)");
  app.add_option("--memory-limit", g.memory_limit_mib,
                 "Use at most this much device memory, in MiB (as if the device were smaller; sizes that would not "
                 "fit are refused before the run)")
      ->check(CLI::Range(std::uint64_t{64}, std::uint64_t{1} << 30));
  app.add_option("--max-alloc-limit", g.max_alloc_limit_mib,
                 "Cap the device's largest single buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE), in MiB (also "
                 "NANSCOPE_MAX_ALLOC_MB): as on a card with a smaller allocation limit")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 30));

  cli::Action action;
  cli::add_devices_command(app, g, action);
  cli::add_precompile_command(app, g, action);
  cli::add_tune_command(app, g, action);
  cli::add_demo_command(app, g, action);
  cli::add_generate_command(app, g, action);
  cli::add_inspect_command(app, g, action);
  cli::add_scenario_command(app, g, action);
  cli::add_ab_command(app, g, action);
  cli::add_sweep_command(app, g, action);
  cli::add_config_command(app, g, action);
  cli::add_reproduce_command(app, g, action);
  cli::add_cache_command(app, g, action);
  cli::add_probe_command(app, g, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (g.verbose) log::set_level("debug");
    if (!g.log_level.empty()) log::set_level(g.log_level);
    return action ? action() : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: unexpected failure: %s\n", e.what());
    return 1;
  }
}
