// nanscope-kernel-builder: builds kernel programs into the kernel cache for a
// run that asks over its stdin and stdout (engine/backend/opencl/kernel_builder.hpp
// has the protocol and why runs use helper processes). Not meant to be started by hand.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "backend/opencl/kernel_builder.hpp"
#include "core/log.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Builds NaNscope kernel programs into the kernel cache for a run (started by the run)"};
  std::string device, cache;
  bool no_simulator = false;
  app.add_option("--device", device, "Device id (opencl:<platform>:<device>)")->required();
  app.add_option("--cache", cache, "Kernel cache directory")->required();
  app.add_flag("--no-simulator", no_simulator, "Do not load the Oclgrind simulator while listing devices");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // The run logs each build; the helper says only what goes wrong (NANSCOPE_LOG overrides).
  if (!std::getenv("NANSCOPE_LOG")) nanscope::log::set_level("warn");
  if (no_simulator) ::setenv("NANSCOPE_OCLGRIND", "0", 1);
  try {
    return nanscope::opencl::serve_kernel_builds(device, cache, stdin, stdout);
  } catch (const std::exception& e) {
    std::fprintf(stdout, "ERR\tunexpected failure: %s\n", e.what());
    return 1;
  }
}
