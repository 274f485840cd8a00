// `nanscope-cli cache list|verify|clear [--device D]`: the kernel cache's
// inventory (report R4): every cached program with its device, driver, build
// options, size, build time and last use; checksums re-checked; entries
// removed per device or all.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>

#include "backend/opencl/cache_inventory.hpp"
#include "backend/opencl/program_cache.hpp"
#include "common.hpp"

namespace nanscope::cli {

namespace {

using opencl::CacheEntryInfo;

std::string cache_dir(const GlobalOptions& g) {
  return g.kernel_cache.empty() ? opencl::ProgramCache::default_dir() : g.kernel_cache;
}

std::string local_time(std::int64_t seconds) {
  if (seconds <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

nlohmann::json entry_json(const CacheEntryInfo& e) {
  nlohmann::json j = {{"key", e.key},
                      {"path", e.path},
                      {"bytes", e.bytes},
                      {"has_metadata", e.has_metadata},
                      {"program", e.program},
                      {"options", e.options},
                      {"device", e.device},
                      {"driver", e.driver},
                      {"platform", e.platform},
                      {"platform_version", e.platform_version},
                      {"build_ms", e.build_ms ? nlohmann::json(*e.build_ms) : nlohmann::json(nullptr)},
                      {"built_at", e.built_at ? nlohmann::json(*e.built_at) : nlohmann::json(nullptr)},
                      {"last_used", e.last_used}};
  if (!e.problem.empty()) j["problem"] = e.problem;
  return j;
}

// The device a --device option names ("" : all devices, nullptr returned).
std::optional<DeviceInfo> device_filter(const GlobalOptions& g, const std::string& pin) {
  if (pin.empty()) return std::nullopt;
  return select(g, pin).info;
}

// Entries grouped by device and driver, one table each.
void print_table(const std::vector<CacheEntryInfo>& entries, bool with_problem) {
  std::map<std::string, std::vector<const CacheEntryInfo*>> groups;
  for (const auto& e : entries) {
    const std::string head = e.has_metadata ? "\"" + e.device + "\", driver " + e.driver + " (" + e.platform + ")"
                                            : "(no metadata: written before NaNscope recorded it, or unreadable)";
    groups[head].push_back(&e);
  }
  for (const auto& [head, rows] : groups) {
    std::uint64_t bytes = 0;
    for (const auto* e : rows) bytes += e->bytes;
    std::printf("%s: %zu programs, %s\n", head.c_str(), rows.size(), format_kib(bytes).c_str());
    std::size_t width = 7;
    for (const auto* e : rows) width = std::max(width, (e->has_metadata ? e->program : e->key.substr(0, 16)).size());
    std::printf("  %-*s  %10s  %9s  %-16s  %-16s  %s\n", static_cast<int>(width), "program", "size", "build ms",
                "built", "last use", with_problem ? "check" : "options");
    for (const auto* e : rows) {
      const std::string name = e->has_metadata ? e->program : e->key.substr(0, 16);
      const std::string ms = e->build_ms ? std::to_string(static_cast<long long>(*e->build_ms + 0.5)) : "-";
      const std::string last = with_problem ? (e->problem.empty() ? "ok" : e->problem) : e->options;
      std::printf("  %-*s  %10s  %9s  %-16s  %-16s  %s\n", static_cast<int>(width), name.c_str(),
                  format_kib(e->bytes).c_str(), ms.c_str(), local_time(e->built_at.value_or(0)).c_str(),
                  local_time(e->last_used).c_str(), last.c_str());
    }
  }
}

int run_list(const GlobalOptions& g, const std::string& pin, bool json) {
  const std::string dir = cache_dir(g);
  const auto device = device_filter(g, pin);
  std::vector<CacheEntryInfo> entries;
  for (auto& e : opencl::list_kernel_cache(dir)) {
    if (!device || opencl::entry_is_for(e, *device)) entries.push_back(std::move(e));
  }
  if (json) {
    nlohmann::json out = {{"dir", dir}, {"entries", nlohmann::json::array()}};
    for (const auto& e : entries) out["entries"].push_back(entry_json(e));
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::uint64_t bytes = 0;
  for (const auto& e : entries) bytes += e.bytes;
  std::printf("kernel cache: %s (%zu programs%s, %s)\n", dir.empty() ? "(disabled)" : dir.c_str(), entries.size(),
              device ? (" for \"" + device->name + "\"").c_str() : "", format_kib(bytes).c_str());
  print_table(entries, false);
  if (entries.empty()) std::printf("(empty: runs and `nanscope-cli precompile` fill it)\n");
  return 0;
}

int run_verify(const GlobalOptions& g, const std::string& pin, bool remove, bool json) {
  const std::string dir = cache_dir(g);
  const auto device = device_filter(g, pin);
  const auto checked = opencl::verify_kernel_cache(dir, device ? &*device : nullptr, remove);
  std::size_t bad = 0;
  for (const auto& e : checked) bad += e.problem.empty() ? 0 : 1;
  if (json) {
    nlohmann::json out = {{"dir", dir}, {"checked", checked.size()}, {"corrupt", bad}, {"removed", remove ? bad : 0}};
    out["entries"] = nlohmann::json::array();
    for (const auto& e : checked) out["entries"].push_back(entry_json(e));
    std::cout << out.dump(2) << "\n";
  } else {
    print_table(checked, true);
    std::printf("checked %zu entries in %s: %zu corrupt%s\n", checked.size(), dir.c_str(), bad,
                bad == 0 ? ""
                : remove ? ", removed (the next run rebuilds them)"
                         : "; `nanscope-cli cache verify --remove` deletes them (runs rebuild them anyway)");
  }
  return bad && !remove ? 2 : 0;
}

int run_clear(const GlobalOptions& g, const std::string& pin) {
  const std::string dir = cache_dir(g);
  const auto device = device_filter(g, pin);
  const std::size_t n = opencl::clear_kernel_cache(dir, device ? &*device : nullptr);
  std::printf("removed %zu kernel cache entries from %s%s\n", n, dir.c_str(),
              device ? (" for \"" + device->name + "\" (driver " + device->driver_version + ")").c_str() : "");
  return 0;
}

}  // namespace

void add_cache_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* cmd = app.add_subcommand("cache", "The kernel cache: list, verify or clear cached programs (report R4)");
  cmd->require_subcommand(1);
  struct Opts {
    std::string device;
    bool json = false, remove = false;
  };
  auto o = std::make_shared<Opts>();
  auto* list = cmd->add_subcommand("list", "Every cached program: device, driver, options, size, build time, last use");
  auto* verify = cmd->add_subcommand("verify", "Re-check every entry's checksum; exit 2 when one is corrupt");
  auto* clear = cmd->add_subcommand("clear", "Remove cached programs (all, or one device's with --device)");
  for (auto* sub : {list, verify, clear}) {
    sub->add_option("--device", o->device, "Only this device's entries (index, id, name or part of a name)");
  }
  list->add_flag("--json", o->json, "Print JSON");
  verify->add_flag("--json", o->json, "Print JSON");
  verify->add_flag("--remove", o->remove, "Delete the corrupt entries");
  list->callback([&g, &action, o] { action = [&g, o] { return run_list(g, o->device, o->json); }; });
  verify->callback([&g, &action, o] { action = [&g, o] { return run_verify(g, o->device, o->remove, o->json); }; });
  clear->callback([&g, &action, o] { action = [&g, o] { return run_clear(g, o->device); }; });
}

}  // namespace nanscope::cli
