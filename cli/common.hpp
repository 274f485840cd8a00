#pragma once
// Shared pieces of nanscope-cli: global options, device resolution, and one
// registration function per subcommand (one file each, so new commands such as
// generate or inspect slot in beside them).

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "config/run_config.hpp"

namespace nanscope::studies {
struct InspectedRun;
}

namespace nanscope::cli {

struct GlobalOptions {
  bool verbose = false;
  std::string log_level;               // empty: keep NANSCOPE_LOG / info
  std::string device;                  // --device; empty: NANSCOPE_DEVICE, else the default device
  std::string kernel_cache;            // --kernel-cache; empty: NANSCOPE_KERNEL_CACHE, else the XDG cache dir
  std::uint64_t memory_limit_mib = 0;  // --memory-limit; 0: the device's own memory
  // --max-alloc-limit; 0: the device's own largest allocation
  std::uint64_t max_alloc_limit_mib = 0;
};

// What the chosen subcommand runs after parsing and after the global options took effect.
using Action = std::function<int()>;

// The device pin in effect: an explicit override, else --device, else NANSCOPE_DEVICE.
std::string device_pin(const GlobalOptions& g, const std::string& override_pin = {});
BackendOptions backend_options(const GlobalOptions& g);

// Enumerates devices and resolves the pin (throws DeviceError listing devices when it matches nothing).
struct SelectedDevice {
  DeviceList list;
  DeviceInfo info;
};
SelectedDevice select(const GlobalOptions& g, const std::string& override_pin = {});

std::string format_mib(std::uint64_t bytes);
std::string format_kib(std::uint64_t bytes);

void add_devices_command(CLI::App& app, const GlobalOptions& g, Action& action);
void add_precompile_command(CLI::App& app, const GlobalOptions& g, Action& action);
void add_tune_command(CLI::App& app, const GlobalOptions& g, Action& action);  // cmd_tune.cpp
void add_demo_command(CLI::App& app, const GlobalOptions& g, Action& action);
void add_generate_command(CLI::App& app, const GlobalOptions& g, Action& action);  // generate + info (cmd_generate.cpp)
void add_inspect_command(CLI::App& app, const GlobalOptions& g, Action& action);   // cmd_inspect.cpp
void add_scenario_command(CLI::App& app, const GlobalOptions& g,
                          Action& action);                                      // scenario list/run (cmd_inspect.cpp)
void add_ab_command(CLI::App& app, const GlobalOptions& g, Action& action);     // ab (cmd_inspect.cpp)
void add_sweep_command(CLI::App& app, const GlobalOptions& g, Action& action);  // sweep (cmd_inspect.cpp)
// Runs a config under the inspector as `inspect` does (device pin from the
// global options, VAE path resolved, inspect.trace=always with `trace`) and
// prints its step table, verdict and origin. cmd_inspect.cpp.
studies::InspectedRun inspect_config(const GlobalOptions& g, RunConfig config, bool trace);
void add_reproduce_command(CLI::App& app, const GlobalOptions& g, Action& action);  // cmd_reproduce.cpp
void add_config_command(CLI::App& app, const GlobalOptions& g, Action& action);     // config keys (cmd_config.cpp)
void add_cache_command(CLI::App& app, const GlobalOptions& g, Action& action);      // cmd_cache.cpp
void add_probe_command(CLI::App& app, const GlobalOptions& g, Action& action);      // probe (cmd_probe.cpp)

}  // namespace nanscope::cli
