#pragma once
// Program builds and the on-disk program-binary cache (report R4).
//
// Key: sha256(cache format version, program source incl. common.cl, build
// options, device name, driver version, platform name+version). Entries live
// under <dir>/<key>.bin with a header (magic, format version, key, payload
// size, payload sha256) so a corrupt, truncated or foreign entry is detected
// and rebuilt, never trusted. Writes go to a temp file that is renamed.
// Every build and hit is timed, logged and recorded.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "backend/opencl/cl_check.hpp"

namespace nanscope::opencl {

using BuildRecord = KernelBuildRecord;

class ProgramCache {
 public:
  // dir empty: caching disabled (always builds).
  ProgramCache(cl_context context, cl_device_id device, const DeviceInfo& info, std::string dir);
  ~ProgramCache();
  ProgramCache(const ProgramCache&) = delete;
  ProgramCache& operator=(const ProgramCache&) = delete;

  // Builds a program variant somewhere else (a helper process, kernel_builder.hpp)
  // into the cache entry named by `key`: "" once that entry is written, else why
  // not (the caller then builds in this process).
  using RemoteBuild =
      std::function<std::string(const std::string& program, const std::string& options, const std::string& key)>;

  // The built program for a kernel file and options (memoised in memory).
  // Throws ClError with the build log when the build fails. With `remote`, a
  // program that is neither in memory nor in the cache is built through it
  // and loaded from the entry it wrote (in this process when it cannot).
  cl_program get(const std::string& program, const std::string& options, const RemoteBuild& remote = {});
  // The same for a source given directly (tests, tools); `program` names it in logs and records.
  cl_program get_source(const std::string& program, const std::string& source, const std::string& options,
                        const RemoteBuild& remote = {});

  // The text a kernel file is built from: common.cl + "\n" + <program>.cl (throws Error when
  // the program is not embedded).
  static std::string full_source(const std::string& program);
  // The cache key (64 hex digits) of a full source and options on this device, and its entry file.
  std::string cache_key(const std::string& source, const std::string& options) const;
  std::string entry_path(const std::string& key) const;

  static constexpr std::uint32_t kFormatVersion = 1;
  // Re-reads an entry file and checks its magic, format, key (64 hex digits),
  // length and payload checksum: "" when it can be trusted, else why not.
  static std::string check_entry(const std::string& path, const std::string& key);

  const std::string& dir() const { return dir_; }
  // Called on the building thread for every program that is not yet in memory
  // (empty: none). Set it while no build runs.
  void set_listener(KernelBuildListener listener);
  std::vector<BuildRecord> records() const;
  // The cold-start plan: the program variants ("program|options" -> estimated
  // ms) a run is about to build. Until each is built (or loaded), build events
  // carry the plan's progress, the time left shared by `streams` builds side by
  // side. Replaces any earlier plan; empty clears it.
  void set_plan(std::map<std::string, double> pending, unsigned streams = 1);
  // Whether a built program for these options is in memory already (no load or build needed).
  bool in_memory(const std::string& program, const std::string& options) const;
  // Whether getting it compiles nothing: in memory, or an entry in the cache directory that checks out.
  // The key is remembered (a model's load asks once per layer; once the program is loaded, memory answers).
  bool ready(const std::string& program, const std::string& options) const;

  // The default directory: $NANSCOPE_KERNEL_CACHE, else $XDG_CACHE_HOME/nanscope/kernels,
  // else $HOME/.cache/nanscope/kernels.
  static std::string default_dir();

 private:
  struct Entry;
  cl_context context_;
  cl_device_id device_;
  DeviceInfo info_;
  std::string dir_;
  mutable std::mutex mutex_;
  std::vector<Entry*> entries_;
  std::vector<BuildRecord> records_;
  KernelBuildListener listener_;
  std::map<std::string, double> plan_pending_;             // set_plan(): variants still to build -> estimate
  mutable std::map<std::string, std::string> ready_keys_;  // ready(): "program|options" -> cache key
  int plan_count_ = 0, plan_done_ = 0;
  unsigned plan_streams_ = 1;
  // Whether a program with this cache key is in memory.
  bool has_key(const std::string& key) const;
  // The program in the entry at `path` (its key `key`), loaded and built from its binary;
  // null when there is no entry, and then `reason` says why when the entry cannot be trusted.
  cl_program load_entry(const std::string& path, const std::string& key, const std::string& program,
                        const std::string& options, std::string& reason);
  // Fills e's plan fields for `variant` (finished: marks it done). Needs mutex_.
  void plan_progress(const std::string& variant, bool finished, KernelBuildEvent& e);
};

}  // namespace nanscope::opencl
