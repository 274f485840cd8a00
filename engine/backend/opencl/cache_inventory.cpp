#include "backend/opencl/cache_inventory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <tuple>

#include "backend/opencl/program_cache.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::opencl {

namespace fs = std::filesystem;

namespace {

constexpr int kMetadataFormat = 1;

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::int64_t mtime_seconds(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec);
}

fs::path metadata_path(const fs::path& bin) { return fs::path(bin).replace_extension(".json"); }

// Reads an entry's metadata into e (has_metadata stays false when absent or unreadable).
void read_metadata(CacheEntryInfo& e) {
  std::ifstream in(metadata_path(e.path));
  if (!in) return;
  try {
    const auto j = nlohmann::json::parse(in);
    if (!j.is_object() || j.value("format", 0) != kMetadataFormat) return;
    e.program = j.value("program", "");
    e.options = j.value("options", "");
    e.device = j.value("device", "");
    e.driver = j.value("driver", "");
    e.device_version = j.value("device_version", "");
    e.platform = j.value("platform", "");
    e.platform_version = j.value("platform_version", "");
    if (j.contains("build_ms") && j["build_ms"].is_number()) e.build_ms = j["build_ms"].get<double>();
    if (j.contains("built_at") && j["built_at"].is_number()) e.built_at = j["built_at"].get<std::int64_t>();
    e.has_metadata = !e.program.empty();
  } catch (const nlohmann::json::exception&) {
    // Unreadable metadata: listed as an entry without it (verify says so).
  }
}

bool is_entry_file(const fs::directory_entry& f) {
  std::error_code ec;
  return f.is_regular_file(ec) && f.path().extension() == ".bin";
}

void remove_entry(const CacheEntryInfo& e) {
  std::error_code ec;
  fs::remove(e.path, ec);
  if (ec) throw FileError("cannot remove kernel cache entry " + e.path + ": " + ec.message());
  fs::remove(metadata_path(e.path), ec);
}

}  // namespace

void write_entry_metadata(const std::string& bin_path, const std::string& program, const std::string& options,
                          const DeviceInfo& device, std::optional<double> build_ms) {
  nlohmann::json j = {{"format", kMetadataFormat},
                      {"program", program},
                      {"options", options},
                      {"device", device.name},
                      {"driver", device.driver_version},
                      {"device_version", device.device_version},
                      {"platform", device.platform_name},
                      {"platform_version", device.platform_version}};
  if (build_ms) {
    j["build_ms"] = *build_ms;
    j["built_at"] = now_seconds();
  }
  const std::string text = j.dump(1) + "\n";
  static std::atomic<unsigned> counter{0};
  const fs::path target = metadata_path(bin_path);
  const std::string tmp = target.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::error_code ec;
      fs::remove(tmp, ec);
      log::debug("kernel cache: cannot write metadata {} ({}); the entry is listed without it", target.string(),
                 std::strerror(errno));
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    log::debug("kernel cache: cannot write metadata {} ({})", target.string(), ec.message());
    fs::remove(tmp, ec);
  }
}

void touch_entry(const std::string& bin_path) {
  // UTIME_NOW for the modification time: cheap, atomic, and harmless when it fails.
  const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  if (::utimensat(AT_FDCWD, bin_path.c_str(), times, 0) != 0) {
    log::debug("kernel cache: cannot mark {} as used ({})", bin_path, std::strerror(errno));
  }
}

std::vector<CacheEntryInfo> list_kernel_cache(const std::string& dir) {
  std::vector<CacheEntryInfo> out;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return out;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    if (!is_entry_file(f)) continue;
    CacheEntryInfo e;
    e.path = f.path().string();
    e.key = f.path().stem().string();
    e.bytes = f.file_size(ec);
    e.last_used = mtime_seconds(f.path());
    read_metadata(e);
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return std::tie(a.device, a.driver, a.program, a.options, a.key) <
           std::tie(b.device, b.driver, b.program, b.options, b.key);
  });
  return out;
}

bool entry_is_for(const CacheEntryInfo& e, const DeviceInfo& device) {
  return e.has_metadata && e.device == device.name && e.driver == device.driver_version &&
         e.platform_version == device.platform_version;
}

std::vector<CacheEntryInfo> verify_kernel_cache(const std::string& dir, const DeviceInfo* device, bool remove) {
  std::vector<CacheEntryInfo> checked;
  for (CacheEntryInfo& e : list_kernel_cache(dir)) {
    if (device && !entry_is_for(e, *device)) continue;
    e.problem = ProgramCache::check_entry(e.path, e.key);
    if (!e.problem.empty()) {
      log::warn("kernel cache entry {} ({}) is {}{}", e.path, e.has_metadata ? e.program : "no metadata", e.problem,
                remove ? "; removed" : "");
      if (remove) remove_entry(e);
    }
    checked.push_back(std::move(e));
  }
  return checked;
}

std::size_t clear_kernel_cache(const std::string& dir, const DeviceInfo* device) {
  std::size_t removed = 0;
  for (const CacheEntryInfo& e : list_kernel_cache(dir)) {
    if (device && !entry_is_for(e, *device)) continue;
    remove_entry(e);
    ++removed;
  }
  if (!device) {
    // Leftovers of writes that were cut short, and metadata whose entry is gone.
    std::error_code ec;
    std::vector<fs::path> stale;
    for (const auto& f : fs::directory_iterator(dir, ec)) {
      const std::string name = f.path().filename().string();
      if (name.find(".tmp.") != std::string::npos || f.path().extension() == ".json") stale.push_back(f.path());
    }
    for (const auto& p : stale) fs::remove(p, ec);
  }
  log::info("kernel cache {}: removed {} entries{}", dir, removed,
            device ? " for \"" + device->name + "\" (driver " + device->driver_version + ")" : std::string());
  return removed;
}

double BuildHistory::estimate_ms(const std::string& program, const std::string& options, double fallback_ms) const {
  if (auto it = by_variant.find(program + "|" + options); it != by_variant.end()) return it->second;
  if (auto it = by_program.find(program); it != by_program.end()) return it->second;
  return samples ? mean_ms : fallback_ms;
}

BuildHistory build_history(const std::string& dir, const DeviceInfo& device) {
  BuildHistory h;
  std::map<std::string, std::int64_t> newest;  // variant -> built_at of the time kept
  std::map<std::string, std::pair<double, int>> sums;
  double total = 0.0;
  for (const CacheEntryInfo& e : list_kernel_cache(dir)) {
    if (!entry_is_for(e, device) || !e.build_ms) continue;
    // The half-unit probe (half_units.cpp) is no run's program, and its tiny build would set the
    // device's mean for all of them (0.6 s estimated for 12 programs that took 9 s on the H200).
    if (e.program == "half_probe") continue;
    const std::string variant = e.program + "|" + e.options;
    const std::int64_t at = e.built_at.value_or(0);
    if (auto it = newest.find(variant); it == newest.end() || at >= it->second) {
      newest[variant] = at;
      h.by_variant[variant] = *e.build_ms;
    }
    auto& s = sums[e.program];
    s.first += *e.build_ms;
    ++s.second;
    total += *e.build_ms;
    ++h.samples;
  }
  for (const auto& [program, s] : sums) h.by_program[program] = s.first / s.second;
  h.mean_ms = h.samples ? total / static_cast<double>(h.samples) : 0.0;
  return h;
}

}  // namespace nanscope::opencl
