#pragma once
// The backends every op case runs on: the reference backend (plain C++, f64
// accumulation: the ground truth) and one OpenCL backend per device that
// enumerate_devices() finds, simulators excepted. Backends are created once per
// test process (an OpenCL context and its compiled programs are expensive) and
// live until exit.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device.hpp"

namespace nanscope::opencl {
class OpenClBackend;
}

namespace nanscope::test {

// Every OpenCL test backend's buffers carry this many guard bytes after their
// end (BackendOptions::guard_bytes): run_case() fails a case whose op wrote
// past the end of a buffer, even within the buffer pool's size-class slack.
inline constexpr std::size_t kTestGuardBytes = 4096;
// The options the OpenCL test backends are made with: the environment's (as
// the front ends read it: NANSCOPE_KERNEL_STYLE=gpu forces the GPU kernels)
// plus the guard buffers.
BackendOptions test_backend_options();

Backend& reference_backend();
// Every OpenCL device found, in enumeration order, except simulators (Oclgrind
// interprets every kernel and is thousands of times slower): those only when
// use_simulators() asked for them. Empty when there is none.
const std::vector<Backend*>& opencl_backends();
// Why there is no OpenCL backend (the enumeration's notes), for skip messages.
std::string no_opencl_message();
// Those of opencl_backends() that run the CPU kernel family (kernel style cpu: conv_cpu, the GEMM that reads A in
// place, kept weight panels); none under NANSCOPE_KERNEL_STYLE=gpu. A backend there that is not an OpenCL one is a
// test failure.
std::vector<opencl::OpenClBackend*> cpu_family_backends();
// Why cpu_family_backends() is empty, for skip messages.
std::string no_cpu_family_message();

// An OpenCL device the normal tests run on: neither the reference device nor a simulator.
bool is_test_device(const DeviceInfo& d);

// Makes opencl_backends() hold the simulator devices instead, each made by
// `make` (test_oclgrind: the GPU kernels under Oclgrind's checks). Call it
// before anything uses the backends; afterwards it throws std::logic_error.
using BackendFactory = std::function<std::unique_ptr<Backend>(const DeviceInfo&)>;
void use_simulators(BackendFactory make);

// Destroys the backends now rather than at exit. test_oclgrind calls it before
// returning from main: Oclgrind 21.10 corrupts the heap when its context is
// released during exit-time destruction in a process that also loaded PoCL.
void release_backends();

}  // namespace nanscope::test
