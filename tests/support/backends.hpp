#pragma once
// The backends every op case runs on: the reference backend (plain C++, f64
// accumulation: the ground truth) and one OpenCL backend per device that
// enumerate_devices() finds. Backends are created once per test process (an
// OpenCL context and its compiled programs are expensive) and live until exit.

#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace nanscope::test {

Backend& reference_backend();
// Every OpenCL device found, in enumeration order. Empty when there is none.
const std::vector<Backend*>& opencl_backends();
// Why there is no OpenCL backend (the enumeration's notes), for skip messages.
std::string no_opencl_message();

}  // namespace nanscope::test
