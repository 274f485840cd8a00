// Device enumeration, the default rule and pinning (report R3): every device
// found or skipped is logged with its reason, and a pin that matches nothing
// is an error listing what exists, never a silent switch.
#include "backend/device.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>

#include "backend/opencl/cl_check.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "backend/reference/reference_backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope {

std::string_view device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::gpu: return "gpu";
    case DeviceKind::accelerator: return "accelerator";
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::other: return "other";
    case DeviceKind::reference: return "reference";
    case DeviceKind::simulator: return "simulator";
  }
  return "?";
}

namespace {

constexpr cl_int kPlatformNotFoundKhr = -1001;  // CL_PLATFORM_NOT_FOUND_KHR (cl_ext.h)

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back())))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t size = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string s(size, '\0');
  if (clGetPlatformInfo(p, what, size, s.data(), nullptr) != CL_SUCCESS) return {};
  return trim(s);
}

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t size = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string s(size, '\0');
  if (clGetDeviceInfo(d, what, size, s.data(), nullptr) != CL_SUCCESS) return {};
  return trim(s);
}

template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
  T v{};
  if (clGetDeviceInfo(d, what, sizeof(T), &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Hardware is one of GPU, CPU or accelerator. A device that claims several at
// once is a simulator (Oclgrind reports GPU | CPU | ACCELERATOR), and so is
// anything on the Oclgrind platform, whatever a later version reports.
bool is_simulator(cl_device_type t, const std::string& platform_name) {
  const int types = static_cast<int>((t & CL_DEVICE_TYPE_GPU) != 0) + static_cast<int>((t & CL_DEVICE_TYPE_CPU) != 0) +
                    static_cast<int>((t & CL_DEVICE_TYPE_ACCELERATOR) != 0);
  return types > 1 || platform_name.rfind("Oclgrind", 0) == 0;
}

// A software renderer reports itself as a GPU but runs every kernel on the
// host's CPU cores (Mesa's llvmpipe and softpipe behind rusticl or clover,
// SwiftShader). No device query tells one apart from an integrated GPU (both
// have host-unified memory and a few compute units), so this goes by the
// device name, and the reason says so. Returns the renderer's name, or "".
std::string software_renderer(const std::string& device_name) {
  const std::string n = lower(device_name);
  for (const char* known : {"llvmpipe", "softpipe", "swiftshader", "lavapipe"}) {
    if (n.find(known) != std::string::npos) return known;
  }
  return {};
}

DeviceKind kind_of(cl_device_type t, const std::string& platform_name) {
  if (is_simulator(t, platform_name)) return DeviceKind::simulator;
  if (t & CL_DEVICE_TYPE_GPU) return DeviceKind::gpu;
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return DeviceKind::accelerator;
  if (t & CL_DEVICE_TYPE_CPU) return DeviceKind::cpu;
  return DeviceKind::other;
}

std::string device_type_list(cl_device_type t) {
  std::string s;
  auto add = [&](cl_device_type bit, const char* name) {
    if (t & bit) s += (s.empty() ? "" : ", ") + std::string(name);
  };
  add(CL_DEVICE_TYPE_GPU, "GPU");
  add(CL_DEVICE_TYPE_CPU, "CPU");
  add(CL_DEVICE_TYPE_ACCELERATOR, "accelerator");
  return s.empty() ? "no type" : s;
}

std::string no_platform_note() {
  const char* vendors = std::getenv("OCL_ICD_VENDORS");
  std::string where = vendors && *vendors ? std::string("$OCL_ICD_VENDORS=") + vendors : "/etc/OpenCL/vendors";
  return "No OpenCL platform found through the ICD loader (looked in " + where +
         "); install pocl-opencl-icd or your GPU's OpenCL driver. Using the built-in reference device.";
}

// Oclgrind's ICD library, loaded by NaNscope when the ICD loader does not list
// it (Debian ships no .icd file for it). Loaded once per process and never
// unloaded: its platform handles live as long as the process.
struct DirectPlatforms {
  std::string library;  // the library loaded; empty when none
  std::vector<cl_platform_id> platforms;
  std::string note;  // why a library that exists (or was named) could not be used
};

constexpr const char* kOclgrindLibraries[] = {"/usr/lib/oclgrind/liboclgrind-rt-icd.so",  // Debian, Ubuntu
                                              "/usr/local/lib/liboclgrind-rt-icd.so"};    // Oclgrind's own install

const DirectPlatforms& oclgrind_platforms() {
  static const DirectPlatforms loaded = [] {
    DirectPlatforms out;
    const char* env = std::getenv("NANSCOPE_OCLGRIND");
    const std::string setting = env ? trim(env) : std::string();
    if (setting == "0" || lower(setting) == "off") {
      log::debug("Oclgrind: not loaded (NANSCOPE_OCLGRIND={})", setting);
      return out;
    }
    std::vector<std::string> candidates(std::begin(kOclgrindLibraries), std::end(kOclgrindLibraries));
    if (!setting.empty()) candidates = {setting};
    for (const std::string& path : candidates) {
      if (::access(path.c_str(), R_OK) != 0) {
        if (!setting.empty())
          out.note = "NANSCOPE_OCLGRIND=" + setting + " names no readable file; Oclgrind not loaded.";
        continue;
      }
      void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!lib) {
        const char* why = ::dlerror();
        out.note = "Oclgrind's ICD library " + path + " could not be loaded (" + (why ? why : "dlopen failed") + ").";
        break;
      }
      using GetPlatformIds = cl_int (*)(cl_uint, cl_platform_id*, cl_uint*);
      const auto get = reinterpret_cast<GetPlatformIds>(::dlsym(lib, "clIcdGetPlatformIDsKHR"));
      cl_uint n = 0;
      if (!get || get(0, nullptr, &n) != CL_SUCCESS || n == 0) {
        out.note = path + " is not an OpenCL ICD with a platform (no clIcdGetPlatformIDsKHR); Oclgrind not loaded.";
        break;
      }
      out.platforms.resize(n);
      if (get(n, out.platforms.data(), nullptr) != CL_SUCCESS) {
        out.platforms.clear();
        out.note = path + ": clIcdGetPlatformIDsKHR failed; Oclgrind not loaded.";
        break;
      }
      out.library = path;
      log::debug("Oclgrind: loaded {} ({} platform(s)) beside the ICD loader's platforms", path, n);
      break;
    }
    if (!out.note.empty()) log::debug("{}", out.note);
    return out;
  }();
  return loaded;
}

// Appends every usable device of one platform; skipped devices become notes.
void add_platform_devices(cl_platform_id platform, cl_uint pi, bool via_loader, DeviceList& list) {
  const std::string pname = platform_string(platform, CL_PLATFORM_NAME);
  const std::string pversion = platform_string(platform, CL_PLATFORM_VERSION);
  cl_uint count = 0;
  cl_int err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &count);
  if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && count == 0)) {
    log::debug("OpenCL platform {} \"{}\" ({}): no devices", pi, pname, pversion);
    list.notes.push_back("OpenCL platform \"" + pname + "\" reports no devices.");
    return;
  }
  if (err != CL_SUCCESS) {
    log::debug("OpenCL platform {} \"{}\": clGetDeviceIDs failed with {}", pi, pname, opencl::cl_status_name(err));
    list.notes.push_back("OpenCL platform \"" + pname + "\" could not list its devices (" +
                         opencl::cl_status_name(err) + "); skipped.");
    return;
  }
  std::vector<cl_device_id> ids(count);
  if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, ids.data(), nullptr) != CL_SUCCESS) return;
  log::debug("OpenCL platform {} \"{}\" ({}): {} device(s)", pi, pname, pversion, count);

  for (cl_uint di = 0; di < count; ++di) {
    cl_device_id d = ids[di];
    DeviceInfo info;
    info.id = "opencl:" + std::to_string(pi) + ":" + std::to_string(di);
    info.name = device_string(d, CL_DEVICE_NAME);
    info.vendor = device_string(d, CL_DEVICE_VENDOR);
    info.driver_version = device_string(d, CL_DRIVER_VERSION);
    info.device_version = device_string(d, CL_DEVICE_VERSION);
    info.opencl_c_version = device_string(d, CL_DEVICE_OPENCL_C_VERSION);
    info.platform_name = pname;
    info.platform_version = pversion;
    const auto type = device_value<cl_device_type>(d, CL_DEVICE_TYPE);
    info.kind = kind_of(type, pname);
    if (info.kind == DeviceKind::simulator) {
      const bool several = ((type & CL_DEVICE_TYPE_GPU) != 0) + ((type & CL_DEVICE_TYPE_CPU) != 0) +
                               ((type & CL_DEVICE_TYPE_ACCELERATOR) != 0) >
                           1;
      info.suspect = several ? "it reports itself as " + device_type_list(type) + " at once, as simulators do"
                             : "it is on the " + pname + " platform, a simulator";
    } else if (const std::string sw = software_renderer(info.name); !sw.empty() && info.kind != DeviceKind::cpu) {
      info.suspect = "a software renderer (" + sw +
                     ", recognised by its device name: no device query tells it from a " + "real " +
                     std::string(device_kind_name(info.kind)) + ") that runs kernels on the CPU";
    }
    info.extensions = split_words(device_string(d, CL_DEVICE_EXTENSIONS));
    auto has_ext = [&](std::string_view e) {
      return std::find(info.extensions.begin(), info.extensions.end(), e) != info.extensions.end();
    };
    info.fp16 = has_ext("cl_khr_fp16");
    info.fp64 = has_ext("cl_khr_fp64");
    if (has_ext("cl_nv_device_attribute_query")) {
      // CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV / _MINOR_NV (cl_ext.h spells them
      // only behind the extension's own header on some systems).
      constexpr cl_device_info major_nv = 0x4000, minor_nv = 0x4001;
      info.nv_compute_capability =
          static_cast<int>(device_value<cl_uint>(d, major_nv) * 10 + device_value<cl_uint>(d, minor_nv));
    }
    info.global_mem_bytes = device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
    info.local_mem_bytes = device_value<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE);
    info.max_alloc_bytes = device_value<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    info.compute_units = device_value<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS);
    info.max_work_group_size = device_value<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
    info.cl_platform = platform;
    info.cl_device = d;
    info.via_icd_loader = via_loader;

    const std::string label = info.id + " \"" + info.name + "\" (" + std::string(device_kind_name(info.kind)) + ")";
    if (!device_value<cl_bool>(d, CL_DEVICE_AVAILABLE)) {
      log::debug("skipped {}: the driver reports it unavailable", label);
      list.notes.push_back("Skipped " + label + ": the driver reports it unavailable.");
      continue;
    }
    if (!device_value<cl_bool>(d, CL_DEVICE_COMPILER_AVAILABLE)) {
      log::debug("skipped {}: no OpenCL C compiler (kernels cannot be built)", label);
      list.notes.push_back("Skipped " + label + ": its driver has no OpenCL C compiler, so kernels cannot be built.");
      continue;
    }
    log::debug("found {}: vendor {}, driver {}, {}, fp16 {}, {} compute units, {} MiB", label, info.vendor,
               info.driver_version, info.opencl_c_version, info.fp16 ? "yes" : "no", info.compute_units,
               info.global_mem_bytes >> 20);
    list.devices.push_back(std::move(info));
  }
}

// Marks the default (GPU > accelerator > CPU OpenCL > software renderer >
// reference; never a simulator) and writes every reason.
void choose_default(DeviceList& list) {
  auto first_of = [&](DeviceKind k) -> DeviceInfo* {
    for (auto& d : list.devices) {
      if (d.kind == k && d.suspect.empty()) return &d;
    }
    return nullptr;
  };
  DeviceInfo* software = nullptr;  // the first software renderer (not a simulator): better than nothing
  for (auto& d : list.devices) {
    if (!software && !d.suspect.empty() && d.kind != DeviceKind::simulator) software = &d;
  }
  DeviceInfo* gpu = first_of(DeviceKind::gpu);
  DeviceInfo* acc = first_of(DeviceKind::accelerator);
  DeviceInfo* cpu = first_of(DeviceKind::cpu);
  DeviceInfo* ref = first_of(DeviceKind::reference);
  DeviceInfo* chosen = gpu ? gpu : acc ? acc : cpu ? cpu : software ? software : ref;

  for (auto& d : list.devices) {
    d.is_default = &d == chosen;
    const std::string by = chosen ? " (" + chosen->name + ")" : "";
    if (d.kind == DeviceKind::simulator) {
      d.reason = "not default: a simulator (" + d.platform_name + "; " + d.suspect +
                 ") that interprets every kernel with checks, thousands of times slower than a device; ranked last; "
                 "pin it with --device to debug kernels on small shapes (docs/oclgrind.md)";
    } else if (!d.suspect.empty()) {
      d.reason = d.is_default ? "default: no real OpenCL device found; " + d.suspect + " (slow)"
                              : "not default: " + d.suspect + "; ranked after the real devices" + by;
    } else {
      switch (d.kind) {
        case DeviceKind::gpu:
          d.reason = d.is_default ? "default: first GPU" : "not default: another GPU comes first" + by;
          break;
        case DeviceKind::accelerator:
          d.reason = d.is_default ? "default: no GPU found; first accelerator"
                     : gpu        ? "not default: a GPU was found" + by
                                  : "not default: another accelerator comes first" + by;
          break;
        case DeviceKind::cpu:
          d.reason = d.is_default ? "default: no GPU or accelerator found; first CPU OpenCL device"
                     : gpu        ? "not default: a GPU was found" + by
                     : acc        ? "not default: an accelerator was found" + by
                                  : "not default: another CPU OpenCL device comes first" + by;
          break;
        case DeviceKind::other:
          d.reason = "not default: device type is not GPU, accelerator or CPU; pin it with --device to use it";
          break;
        case DeviceKind::reference:
          d.reason = d.is_default
                         ? "default: no usable OpenCL device; the reference device is the fallback (slow, exact)"
                         : "not default: an OpenCL device was found" + by + "; reference is only the fallback";
          break;
        case DeviceKind::simulator: break;  // above
      }
    }
    log::debug("device {} {} \"{}\": {}", d.index, d.id, d.name, d.reason);
  }
}

std::string device_table(const DeviceList& list) {
  std::string s;
  for (const auto& d : list.devices) {
    s += "  " + std::to_string(d.index) + "  " + d.id + "  \"" + d.name + "\" (" +
         std::string(device_kind_name(d.kind)) + (d.is_default ? ", default" : "") + ")\n";
  }
  for (const auto& n : list.notes) s += "  note: " + n + "\n";
  return s;
}

[[noreturn]] void pin_error(const DeviceList& list, std::string_view pin, const std::string& problem) {
  throw DeviceError("device \"" + std::string(pin) + "\" " + problem + ". Devices:\n" + device_table(list) +
                    "Pin one with --device INDEX|ID|NAME (or NANSCOPE_DEVICE), e.g. --device 0 or --device " +
                    (list.devices.empty() ? std::string("reference") : list.devices.front().id) +
                    "; nanscope-cli devices lists them.");
}

// Before the first OpenCL call (PoCL reads its options from the environment);
// the kernel builder helpers inherit it. A value the user set stays.
void pocl_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::setenv("POCL_WORK_GROUP_SPECIALIZATION", "0", 0) != 0) {
      log::debug("could not set POCL_WORK_GROUP_SPECIALIZATION; PoCL compiles kernels at their first launches");
    }
  });
}

}  // namespace

bool pocl_specializes_launches() {
  const char* v = std::getenv("POCL_WORK_GROUP_SPECIALIZATION");
  return v == nullptr || std::string_view(v) != "0";
}

DeviceList enumerate_devices() {
  pocl_environment();
  DeviceList list;
  cl_uint nplat = 0;
  const cl_int err = clGetPlatformIDs(0, nullptr, &nplat);
  if (err == kPlatformNotFoundKhr || (err == CL_SUCCESS && nplat == 0)) {
    list.notes.push_back(no_platform_note());
    log::debug("{}", list.notes.back());
  } else if (err != CL_SUCCESS) {
    list.notes.push_back(std::string("The OpenCL ICD loader failed to list platforms (") + opencl::cl_status_name(err) +
                         "). Using the built-in reference device.");
    log::debug("{}", list.notes.back());
  } else {
    std::vector<cl_platform_id> platforms(nplat);
    if (clGetPlatformIDs(nplat, platforms.data(), nullptr) == CL_SUCCESS) {
      for (cl_uint pi = 0; pi < nplat; ++pi) add_platform_devices(platforms[pi], pi, true, list);
    }
    if (list.devices.empty()) {
      list.notes.push_back("OpenCL platforms exist but none has a usable device. Using the built-in reference device.");
    }
  }
  // Oclgrind without an .icd file: its platform goes after the loader's (see device.hpp).
  const bool loader_has_oclgrind = std::any_of(list.devices.begin(), list.devices.end(), [](const DeviceInfo& d) {
    return d.platform_name.rfind("Oclgrind", 0) == 0;
  });
  if (!loader_has_oclgrind) {
    const DirectPlatforms& direct = oclgrind_platforms();
    const cl_uint first = err == CL_SUCCESS ? nplat : 0;
    for (std::size_t i = 0; i < direct.platforms.size(); ++i) {
      add_platform_devices(direct.platforms[i], first + static_cast<cl_uint>(i), false, list);
    }
    if (!direct.note.empty()) list.notes.push_back(direct.note);
  }

  // The reference device describes itself; copying its info keeps both views identical.
  DeviceInfo ref = reference::ReferenceBackend().device();
  list.devices.push_back(std::move(ref));
  for (std::size_t i = 0; i < list.devices.size(); ++i) list.devices[i].index = static_cast<int>(i);
  choose_default(list);
  return list;
}

const DeviceInfo& select_device(const DeviceList& list, std::string_view pin_in) {
  const std::string pin = trim(std::string(pin_in));
  auto chosen = [&](const DeviceInfo& d, const std::string& why) -> const DeviceInfo& {
    // Said once per thread and choice: a front end resolves the device on every run.
    thread_local std::string last;
    std::string key = pin + "|" + d.id;
    if (key != last) {
      log::info("device: {} \"{}\" ({}): {}", d.index, d.name, d.id, why);
      last = std::move(key);
    } else {
      log::debug("device: {} \"{}\" ({}): {}", d.index, d.name, d.id, why);
    }
    return d;
  };
  if (pin.empty()) {
    for (const auto& d : list.devices) {
      if (d.is_default) return chosen(d, d.reason + " (not pinned; pin with --device or NANSCOPE_DEVICE)");
    }
    pin_error(list, "(default)", "cannot be chosen: the list has no default");
  }
  if (std::all_of(pin.begin(), pin.end(), [](unsigned char c) { return std::isdigit(c); })) {
    const long idx = pin.size() > 6 ? -1 : std::stol(pin);
    if (idx >= 0 && idx < static_cast<long>(list.devices.size())) {
      return chosen(list.devices[static_cast<std::size_t>(idx)], "pinned by index " + pin);
    }
    pin_error(list, pin, "is not a device index (valid: 0.." + std::to_string(list.devices.size() - 1) + ")");
  }
  for (const auto& d : list.devices) {
    if (d.id == pin) return chosen(d, "pinned by id");
  }
  std::vector<const DeviceInfo*> exact;
  for (const auto& d : list.devices) {
    if (d.name == pin) exact.push_back(&d);
  }
  if (exact.size() == 1) return chosen(*exact.front(), "pinned by name");
  if (exact.size() > 1) pin_error(list, pin, "names " + std::to_string(exact.size()) + " devices; pin by index or id");
  std::vector<const DeviceInfo*> partial;
  const std::string needle = lower(pin);
  for (const auto& d : list.devices) {
    if (lower(d.name).find(needle) != std::string::npos) partial.push_back(&d);
  }
  if (partial.size() == 1) return chosen(*partial.front(), "pinned by name match \"" + pin + "\"");
  if (partial.size() > 1) {
    pin_error(list, pin, "matches " + std::to_string(partial.size()) + " devices; pin by index, id or a longer name");
  }
  pin_error(list, pin, "matches no device (not an index, id, name or part of a name)");
}

std::string device_pin_from_env() {
  const char* v = std::getenv("NANSCOPE_DEVICE");
  return v ? trim(v) : std::string();
}

namespace {
// An on/off environment switch spelled `on` or `off`; anything else is logged and ignored.
void env_switch(const char* name, std::string_view on, std::string_view off, bool& value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  const std::string_view s(v);
  if (s == on || s == off) {
    value = s == on;
  } else {
    log::warn("{}={} is neither {} nor {}; ignored", name, s, on, off);
  }
}
}  // namespace

namespace {

// A size in MiB from the environment variable `name`, as bytes (nullopt when unset or unusable, with a warning).
std::optional<std::uint64_t> env_mib(const char* name, bool zero_allowed) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(v, &end, 10);
  if (end && *end == '\0' && (zero_allowed || mb > 0) && mb < (1ull << 40)) return static_cast<std::uint64_t>(mb) << 20;
  log::warn("{}={} is not a {}number of MiB; ignored", name, v, zero_allowed ? "" : "positive ");
  return std::nullopt;
}

// One of `choices`, written in decimal, from the environment variable `name` into `value` (unchanged when unset;
// anything else is logged and ignored: the device chooses).
void env_choice(const char* name, std::initializer_list<int> choices, int& value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  std::string list;
  for (const int c : choices) {
    if (std::to_string(c) == v) {
      value = c;
      return;
    }
    list += (list.empty() ? "" : c == *(choices.end() - 1) ? " or " : ", ") + std::to_string(c);
  }
  log::warn("{}={} is not {}; choosing by the device", name, v, list);
}

}  // namespace

BackendOptions backend_options_from_environment(BackendOptions o) {
  if (const auto b = env_mib("NANSCOPE_POOL_MB", true)) o.pool_keep_bytes = *b;
  if (const auto b = env_mib("NANSCOPE_WEIGHT_PANELS_MB", true)) o.weight_panel_bytes = *b;
  if (const auto b = env_mib("NANSCOPE_MAX_ALLOC_MB", false)) o.max_alloc_limit_bytes = *b;
  if (const char* v = std::getenv("NANSCOPE_PROFILE"); v && *v) {
    const std::string_view s(v);
    o.profile = s == "1" || s == "grid";
    o.profile_grids = s == "grid";
    if (!o.profile && s != "0") log::warn("NANSCOPE_PROFILE={} is not 0, 1 or grid; ignored", s);
  }
  if (const char* v = std::getenv("NANSCOPE_TENSOR_CORES"); v && std::string_view(v) == "emulate") {
    o.tensor_cores = o.emulate_tensor_cores = true;
  } else {
    env_switch("NANSCOPE_TENSOR_CORES", "1", "0", o.tensor_cores);
  }
  if (const char* v = std::getenv("NANSCOPE_KERNEL_STYLE"); v && *v) {
    const std::string_view s(v);
    if (s == "cpu") {
      o.kernel_style = KernelStyleChoice::cpu;
    } else if (s == "gpu") {
      o.kernel_style = KernelStyleChoice::gpu;
    } else {
      log::warn("NANSCOPE_KERNEL_STYLE={} is neither cpu nor gpu; choosing by device kind", s);
    }
  }
  env_switch("NANSCOPE_WINOGRAD", "1", "0", o.winograd);
  env_switch("NANSCOPE_WINOGRAD_FUSED", "1", "0", o.winograd_fused_weights);
  env_switch("NANSCOPE_CALL_ARENA", "on", "off", o.call_arena);
  env_switch("NANSCOPE_FIRST_CALL_ARENA", "on", "off", o.first_call_arena);
  env_switch("NANSCOPE_NATIVE_HALF", "hardware", "emulated", o.half_units);
  env_choice("NANSCOPE_ATTENTION_CPU_LANES", {8, 16}, o.attention_cpu_lanes);
  env_choice("NANSCOPE_ATTENTION_CPU_ROWS", {8, 16, 32}, o.attention_cpu_rows);
  return o;
}

std::string KernelBuildEvent::progress() const {
  if (plan_count <= 0) return {};
  const double s = plan_left_ms / 1000.0;
  char left[48];
  std::snprintf(left, sizeof(left), s < 10 ? "%.1f s" : "%.0f s", s);
  return "building " + std::to_string(plan_index) + " of " + std::to_string(plan_count) + " programs, about " + left +
         " left";
}

std::string KernelPlan::describe(const std::string& device) const {
  if (items.empty()) return "no kernel programs to build on \"" + device + "\"";
  if (to_build == 0) {
    return "all " + std::to_string(items.size()) + " kernel programs this run may use are cached for \"" + device +
           "\"";
  }
  char secs[48];
  std::snprintf(secs, sizeof(secs), "%.1f s", estimate_ms / 1000.0);
  return std::to_string(to_build) + " of " + std::to_string(items.size()) +
         " kernel programs this run may use are not cached for \"" + device + "\"; building them takes about " + secs +
         (streams > 1 ? " on " + std::to_string(streams) + " cores" : std::string()) +
         (history_samples ? " (from " + std::to_string(history_samples) + " past builds on this device)"
                          : " (no past builds on this device: typical build times assumed)");
}

DeviceInfo limited_device(DeviceInfo device, std::uint64_t memory_limit_bytes, std::uint64_t max_alloc_limit_bytes) {
  auto cap = [](std::uint64_t v, std::uint64_t limit) { return v == 0 ? limit : std::min(v, limit); };
  if (memory_limit_bytes) {
    device.global_mem_bytes = cap(device.global_mem_bytes, memory_limit_bytes);
    device.max_alloc_bytes = cap(device.max_alloc_bytes, memory_limit_bytes);
  }
  if (max_alloc_limit_bytes) device.max_alloc_bytes = cap(device.max_alloc_bytes, max_alloc_limit_bytes);
  return device;
}

std::unique_ptr<Backend> make_backend(const DeviceInfo& device, const BackendOptions& options) {
  if (device.kind == DeviceKind::reference) {
    return std::make_unique<reference::ReferenceBackend>(options.memory_limit_bytes, options.max_alloc_limit_bytes);
  }
  return std::make_unique<opencl::OpenClBackend>(device, options);
}

}  // namespace nanscope
