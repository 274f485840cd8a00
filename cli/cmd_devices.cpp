// `nanscope-cli devices [--json]`: every device, what it can do, and why it
// is or is not the default (report R3).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "backend/opencl/program_cache.hpp"
#include "common.hpp"

namespace nanscope::cli {

namespace {

nlohmann::json device_json(const DeviceInfo& d) {
  return {
      {"index", d.index},
      {"id", d.id},
      {"name", d.name},
      {"kind", std::string(device_kind_name(d.kind))},
      {"vendor", d.vendor},
      {"driver_version", d.driver_version},
      {"device_version", d.device_version},
      {"opencl_c_version", d.opencl_c_version},
      {"platform_name", d.platform_name},
      {"platform_version", d.platform_version},
      {"fp16", d.fp16},
      {"fp64", d.fp64},
      {"nv_compute_capability", d.nv_compute_capability},  // 0: not an NVIDIA device
      {"global_mem_bytes", d.global_mem_bytes},
      {"local_mem_bytes", d.local_mem_bytes},
      {"max_alloc_bytes", d.max_alloc_bytes},
      {"compute_units", d.compute_units},
      {"max_work_group_size", d.max_work_group_size},
      {"extensions", d.extensions},
      {"default", d.is_default},
      {"reason", d.reason},
      {"suspect", d.suspect},  // why it is not what it says ("" when it is): ranked last
  };
}

// Entries and bytes in the kernel cache directory (0, 0 when it does not exist).
std::pair<std::size_t, std::uintmax_t> cache_usage(const std::string& dir) {
  std::size_t n = 0;
  std::uintmax_t bytes = 0;
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return {0, 0};
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == ".bin") {
      ++n;
      bytes += e.file_size(ec);
    }
  }
  return {n, bytes};
}

int run_devices(const GlobalOptions& g, bool json) {
  const DeviceList list = enumerate_devices();
  const std::string pin = device_pin(g);
  // A pin that matches nothing fails here with the list, exactly as a run would.
  const DeviceInfo* selected = pin.empty() ? nullptr : &select_device(list, pin);
  const std::string cache_dir = g.kernel_cache.empty() ? opencl::ProgramCache::default_dir() : g.kernel_cache;
  const auto [entries, cache_bytes] = cache_usage(cache_dir);

  if (json) {
    nlohmann::json out;
    out["devices"] = nlohmann::json::array();
    for (const auto& d : list.devices) out["devices"].push_back(device_json(d));
    out["notes"] = list.notes;
    out["pinned"] = selected ? nlohmann::json(selected->index) : nlohmann::json(nullptr);
    out["kernel_cache"] = {{"dir", cache_dir}, {"entries", entries}, {"bytes", cache_bytes}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }

  std::cout << "Devices (" << list.devices.size() << "):\n";
  for (const auto& d : list.devices) {
    const char* mark = selected ? (selected == &d ? ">" : " ") : (d.is_default ? "*" : " ");
    std::cout << mark << " " << d.index << "  " << d.id << "  " << d.name << "  [" << device_kind_name(d.kind) << "]"
              << (d.suspect.empty() ? "" : "  (not what it says: ranked last)") << "\n";
    if (d.kind == DeviceKind::reference) {
      std::cout << "     built-in plain C++ device, f64 accumulation; f16/bf16 arithmetic emulated exactly\n";
      std::cout << "     " << d.compute_units << " threads, host memory " << format_mib(d.global_mem_bytes) << "\n";
    } else {
      std::cout << "     vendor " << d.vendor << ", driver " << d.driver_version << ", " << d.opencl_c_version << "\n";
      std::cout << "     platform " << d.platform_name << " (" << d.platform_version << ")\n";
      const std::string half_units = d.nv_compute_capability >= 53
                                         ? "no, but half units reachable through PTX (compute capability " +
                                               std::to_string(d.nv_compute_capability / 10) + "." +
                                               std::to_string(d.nv_compute_capability % 10) +
                                               "): native half runs on them once probed"
                                         : "no (half storage only; native half emulated)";
      std::cout << "     fp16 " << (d.fp16 ? "yes" : half_units) << ", fp64 " << (d.fp64 ? "yes" : "no") << ", "
                << d.compute_units << " compute units, max work-group " << d.max_work_group_size << "\n";
      std::cout << "     global " << format_mib(d.global_mem_bytes) << ", local " << format_kib(d.local_mem_bytes)
                << ", largest buffer " << format_mib(d.max_alloc_bytes) << "\n";
    }
    std::cout << "     " << d.reason << (selected == &d ? "; pinned (--device / NANSCOPE_DEVICE)" : "") << "\n";
  }
  for (const auto& n : list.notes) std::cout << "note: " << n << "\n";
  std::cout << "kernel cache: " << (cache_dir.empty() ? "(disabled)" : cache_dir) << " (" << entries << " programs, "
            << format_kib(cache_bytes) << ")\n";
  std::cout << (selected ? "> = pinned" : "* = default") << "; pin with --device INDEX|ID|NAME or NANSCOPE_DEVICE\n";
  return 0;
}

}  // namespace

void add_devices_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* cmd = app.add_subcommand("devices", "List OpenCL devices and the reference device, and which is the default");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print the list as JSON");
  cmd->callback([&g, &action, json] { action = [&g, json] { return run_devices(g, *json); }; });
}

}  // namespace nanscope::cli
