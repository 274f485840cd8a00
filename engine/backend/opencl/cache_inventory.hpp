#pragma once
// The kernel cache's inventory (report R4): what is cached for which device,
// driver and build options, how long each program took to build and when it
// was last used; checking every entry's checksum; clearing per device.
//
// Each entry <key>.bin (program_cache.hpp) has a metadata file <key>.json
// beside it, written when the program is built:
//   {"format":1, "program":"group_norm", "options":"-cl-std=CL1.2 -DSTORE_F16",
//    "device":"pthread-...", "driver":"6.0+debian", "device_version":"OpenCL 3.0 PoCL ...",
//    "platform":"Portable Computing Language", "platform_version":"OpenCL 3.0 PoCL ...",
//    "build_ms":1234.5, "built_at":1764130000}
// The entry file's modification time is its last use (set again on every load).
// Entries written before the metadata existed still load; they are listed with
// what the entry itself tells (size, key, file time), and get a metadata file
// without a build time the next time a run loads them.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.hpp"

namespace nanscope::opencl {

struct CacheEntryInfo {
  std::string key;   // 64 hex digits
  std::string path;  // the .bin file
  std::uint64_t bytes = 0;
  bool has_metadata = false;  // false: written before NaNscope recorded metadata (or its .json is unreadable)
  std::string program, options, device, driver, device_version, platform, platform_version;
  std::optional<double> build_ms;        // compile time when it was built (none: unknown)
  std::optional<std::int64_t> built_at;  // unix seconds (none: unknown)
  std::int64_t last_used = 0;            // unix seconds (the entry file's modification time)
  std::string problem;                   // verify_kernel_cache(): why the entry cannot be trusted ("" = fine)
};

// The metadata an entry's .json holds, written by ProgramCache after a build
// (build_ms set) or on loading an entry that had none (build_ms unset).
void write_entry_metadata(const std::string& bin_path, const std::string& program, const std::string& options,
                          const DeviceInfo& device, std::optional<double> build_ms);
// Marks an entry as used now (its modification time); errors (a read-only cache) are ignored.
void touch_entry(const std::string& bin_path);

// Every entry in `dir`, sorted by device, then program, then options. Reads
// metadata, not payloads (cheap). A missing folder is an empty list.
std::vector<CacheEntryInfo> list_kernel_cache(const std::string& dir);
// Whether an entry belongs to a device: same device name, driver and platform
// version (what its cache key covers). Entries without metadata belong to none.
bool entry_is_for(const CacheEntryInfo& e, const DeviceInfo& device);
// Re-reads every entry (or those for `device`) and checks its header, key and
// payload checksum; a bad entry gets `problem` set and, when `remove`, is
// deleted with its metadata. Returns the entries checked.
std::vector<CacheEntryInfo> verify_kernel_cache(const std::string& dir, const DeviceInfo* device, bool remove);
// Deletes every entry (or those for `device`) with its metadata, and leftover
// temporary files when clearing all. Returns how many entries were removed.
// Throws FileError when an entry cannot be removed.
std::size_t clear_kernel_cache(const std::string& dir, const DeviceInfo* device);

// Past build times on a device from the metadata: per "program|options" the
// newest recorded build time, and per program the mean over its variants
// (the runs' programs only: not the half-unit probe).
struct BuildHistory {
  std::map<std::string, double> by_variant;  // "program|options" -> ms
  std::map<std::string, double> by_program;  // program -> mean ms
  double mean_ms = 0.0;                      // over every recorded build (0: none recorded)
  std::size_t samples = 0;
  // The estimate for one program variant: its own time, else its program's, else the device's mean, else `fallback_ms`.
  double estimate_ms(const std::string& program, const std::string& options, double fallback_ms) const;
};
BuildHistory build_history(const std::string& dir, const DeviceInfo& device);

}  // namespace nanscope::opencl
