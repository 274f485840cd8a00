#pragma once
// Kernel programs built in helper processes (report R4's cold start).
//
// PoCL 3.1 compiles one program at a time per process, whichever threads ask
// (two builds started together finish together), while two processes compile
// side by side: `nanscope-cli precompile` took 69.2 s alone and 71.6 s with a
// second one running beside it on a 2-core VM. So a cold run hands its
// planned builds to helper processes, one per core: each opens the same
// device, builds the programs it is sent into the shared kernel cache, and
// the run loads what they wrote (ProgramCache::RemoteBuild). A helper that is
// missing, fails to start, opens another device or writes another key than
// the run expects only costs the parallelism: the run builds that program
// itself, as it always did. A driver crash while compiling ends the helper,
// not the run.
//
// The helper is `nanscope-kernel-builder` (cli/kernel_builder/main.cpp), found
// at ../libexec/nanscope/ beside the running program (the installed layout
// and the build tree's), or named by NANSCOPE_KERNEL_BUILDER; that variable
// set to 0 or off builds in-process only.
//
// Protocol (lines over a socket pair on the helper's stdin and stdout; options
// never hold tabs or newlines):
//   helper -> run:  READY <tab> device name <tab> driver version   (or ERR <tab> why, then it exits)
//   run -> helper:  BUILD <tab> program <tab> options <tab> PoCL specializations (may be empty)
//   helper -> run:  OK <tab> cache key <tab> build ms               (or ERR <tab> why on one line)
// The helper exits when its input closes.
//
// Specializations: PoCL compiles each kernel again at its first launch for the
// launch's work-group size, global offset and grid size, into its own cache,
// while the run waits (a second for the GEMM, the convolution and attention on
// a cold start). A helper builds those versions into the program's binary
// (POCL_BINARY_SPECIALIZE_WG, in PoCL's cache-directory spelling, e.g.
// "1-1-1-goffs0-smallgrid"), beside the other builds; the run's first launch
// then finds them. Other drivers ignore the variable. Asked for only where PoCL's
// launch specialization is on (device.hpp, pocl_specializes_launches: off by default).

#include <sys/types.h>

#include <cstdio>
#include <memory>
#include <string>

#include "backend/device.hpp"

namespace nanscope::opencl {

// The helper executable to use ("" when there is none, or NANSCOPE_KERNEL_BUILDER turns helpers off).
std::string kernel_builder_path();

// The run's side of one helper process.
class KernelBuilderProcess {
 public:
  // Starts `exe` for `device` (by id) and the cache directory; null with `why` set when it cannot start.
  static std::unique_ptr<KernelBuilderProcess> start(const std::string& exe, const DeviceInfo& device,
                                                     const std::string& cache_dir, std::string& why);
  ~KernelBuilderProcess();
  KernelBuilderProcess(const KernelBuilderProcess&) = delete;
  KernelBuilderProcess& operator=(const KernelBuilderProcess&) = delete;

  // Builds one program variant in the helper: "" once it reports the cache entry
  // `key` written, else why not. After a failure of the helper itself (it ended,
  // opened another device, answered out of protocol) every later call fails at once.
  std::string build(const std::string& program, const std::string& options, const std::string& key,
                    const std::string& specializations = {});

 private:
  KernelBuilderProcess(pid_t pid, int fd, std::string device_name, std::string driver);
  bool send_line(const std::string& line);
  bool read_line(std::string& line, std::string& why);  // false: why not
  std::string fail(std::string why);                    // marks the helper unusable; returns why

  pid_t pid_;
  int fd_;
  std::string device_name_, driver_;  // what the helper must have opened
  std::string buffer_;                // bytes read past the last line
  bool ready_ = false;
  std::string broken_;  // why the helper is unusable ("" while it works)
};

// The helper's side: serves BUILD requests from `in` on `out` until `in` ends.
// Returns the process exit status (0 after a clean end of input).
int serve_kernel_builds(const std::string& device_id, const std::string& cache_dir, std::FILE* in, std::FILE* out);

}  // namespace nanscope::opencl
