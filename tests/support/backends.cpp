#include "support/backends.hpp"

#include <memory>
#include <stdexcept>

#include "backend/device.hpp"

namespace nanscope::test {

namespace {

struct Registry {
  DeviceList list;
  std::unique_ptr<Backend> reference;
  std::vector<std::unique_ptr<Backend>> opencl;
  std::vector<Backend*> opencl_ptrs;
};

Registry& registry() {
  static Registry r = [] {
    Registry reg;
    reg.list = enumerate_devices();
    for (const DeviceInfo& d : reg.list.devices) {
      if (d.kind == DeviceKind::reference) {
        reg.reference = make_backend(d);
      } else {
        reg.opencl.push_back(make_backend(d));
        reg.opencl_ptrs.push_back(reg.opencl.back().get());
      }
    }
    return reg;
  }();
  return r;
}

}  // namespace

Backend& reference_backend() {
  Registry& r = registry();
  if (!r.reference) throw std::runtime_error("enumerate_devices() listed no reference device");
  return *r.reference;
}

const std::vector<Backend*>& opencl_backends() { return registry().opencl_ptrs; }

std::string no_opencl_message() {
  std::string s = "no OpenCL device found";
  for (const auto& n : registry().list.notes) s += "; " + n;
  return s + " (install an OpenCL driver, e.g. pocl-opencl-icd via tools/setup.sh)";
}

}  // namespace nanscope::test
