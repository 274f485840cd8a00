#include "support/backends.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::test {

namespace {

struct Registry {
  DeviceList list;
  std::unique_ptr<Backend> reference;
  std::vector<std::unique_ptr<Backend>> opencl;
  std::vector<Backend*> opencl_ptrs;
};

// Set by use_simulators(): the OpenCL backends are then the simulators, made by it.
BackendFactory& simulator_factory() {
  static BackendFactory f;
  return f;
}

bool& registry_made() {
  static bool made = false;
  return made;
}

Registry& registry() {
  static Registry r = [] {
    registry_made() = true;
    Registry reg;
    reg.list = enumerate_devices();
    const BackendFactory& simulators = simulator_factory();
    for (const DeviceInfo& d : reg.list.devices) {
      if (d.kind == DeviceKind::reference) {
        reg.reference = make_backend(d);
        continue;
      }
      if (simulators ? d.kind != DeviceKind::simulator : !is_test_device(d)) continue;
      reg.opencl.push_back(simulators ? simulators(d) : make_backend(d, test_backend_options()));
      reg.opencl_ptrs.push_back(reg.opencl.back().get());
    }
    return reg;
  }();
  return r;
}

// Buffers released outside run_case (the failure-mode and bad-input tests)
// are checked once more when the tests end.
class GuardCheck final : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!registry_made()) return;
    for (Backend* b : registry().opencl_ptrs) {
      for (const auto& v : b->take_guard_violations()) ADD_FAILURE() << "on \"" << b->device().name << "\": " << v;
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kGuardCheck = ::testing::AddGlobalTestEnvironment(new GuardCheck);

}  // namespace

BackendOptions test_backend_options() {
  // NANSCOPE_KERNEL_STYLE=gpu (the *_gpu_style CTest entries) forces the GPU kernels, as in the front ends.
  BackendOptions o = backend_options_from_environment();
  o.guard_bytes = kTestGuardBytes;
  return o;
}

Backend& reference_backend() {
  Registry& r = registry();
  if (!r.reference) throw std::runtime_error("enumerate_devices() listed no reference device");
  return *r.reference;
}

const std::vector<Backend*>& opencl_backends() { return registry().opencl_ptrs; }

std::vector<opencl::OpenClBackend*> cpu_family_backends() {
  std::vector<opencl::OpenClBackend*> out;
  for (Backend* be : opencl_backends()) {
    auto* ocl = dynamic_cast<opencl::OpenClBackend*>(be);
    if (!ocl) {
      ADD_FAILURE() << "opencl_backends() holds a backend that is not an OpenCL one: \"" << be->device().name << "\"";
    } else if (ocl->kernel_style() == opencl::KernelStyle::cpu) {
      out.push_back(ocl);
    }
  }
  return out;
}

std::string no_cpu_family_message() {
  return opencl_backends().empty() ? no_opencl_message() : "no OpenCL backend runs the CPU kernel family";
}

std::string no_opencl_message() {
  std::string s = simulator_factory() ? "no simulator device found" : "no OpenCL device found";
  for (const auto& n : registry().list.notes) s += "; " + n;
  return s + (simulator_factory() ? " (install oclgrind, e.g. via tools/setup.sh; docs/oclgrind.md)"
                                  : " (install an OpenCL driver, e.g. pocl-opencl-icd via tools/setup.sh)");
}

bool is_test_device(const DeviceInfo& d) { return d.kind != DeviceKind::reference && d.kind != DeviceKind::simulator; }

void release_backends() {
  if (!registry_made()) return;
  Registry& r = registry();
  r.opencl_ptrs.clear();
  r.opencl.clear();
  r.reference.reset();
}

void use_simulators(BackendFactory make) {
  if (registry_made()) throw std::logic_error("use_simulators() after the test backends were made");
  simulator_factory() = std::move(make);
}

}  // namespace nanscope::test
