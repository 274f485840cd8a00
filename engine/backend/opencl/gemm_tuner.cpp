// The GEMM tile tuner (gemm.hpp, `nanscope-cli tune`): the GPU-style tile shapes a device can run, each timed
// on one f32 GEMM, and the winner stored per device in <kernel cache>/gemm-tuning.json.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/opencl/gemm.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

#include <nlohmann/json.hpp>

namespace nanscope::opencl::gemm {

namespace fs = std::filesystem;

namespace {

fs::path tuning_file(const OpenClBackend& be) {
  const std::string dir = be.kernel_cache_dir();
  return dir.empty() ? fs::path{} : fs::path(dir) / "gemm-tuning.json";
}

nlohmann::json tiles_json(const Tuning& t) {
  return {{"ts_m", t.ts_m}, {"ts_n", t.ts_n}, {"ts_k", t.ts_k}, {"wpt_m", t.wpt_m}, {"wpt_n", t.wpt_n}};
}

// The tile shapes gemm_tiled can be built with: work-groups of (ts_n/wpt_n) x
// (ts_m/wpt_m) within the device's limit, whole loads per work-item, local tiles
// within local memory.
bool tiles_valid(const DeviceInfo& d, const Tuning& t) {
  if (t.ts_m % t.wpt_m || t.ts_n % t.wpt_n) return false;
  const std::int64_t group = static_cast<std::int64_t>(t.ts_m / t.wpt_m) * (t.ts_n / t.wpt_n);
  if (d.max_work_group_size && static_cast<std::size_t>(group) > d.max_work_group_size) return false;
  // Whole loads per work-item; each work-item's B loads in one column (kernels/matmul/gemm_tiled.cl gemm_tiled_body).
  if ((t.ts_m * t.ts_k) % group || (t.ts_n * t.ts_k) % group || group % t.ts_n) return false;
  // kernels/matmul/gemm_tiled.cl TS_PM, TS_PN: rows padded by 4 floats with register blocks in multiples of 4, else
  // by 1.
  const int pad = t.wpt_m % 4 == 0 && t.wpt_n % 4 == 0 ? 4 : 1;
  const std::uint64_t local = sizeof(float) * static_cast<std::uint64_t>(t.ts_k * (t.ts_m + t.ts_n + 2 * pad));
  return !d.local_mem_bytes || local <= d.local_mem_bytes;
}

}  // namespace

std::vector<Tuning> tile_candidates(const DeviceInfo& device) {
  std::vector<Tuning> out;
  const int shapes[][5] = {{128, 128, 16, 8, 8}, {128, 64, 16, 8, 4}, {64, 128, 16, 4, 8}, {64, 64, 16, 4, 4},
                           {64, 64, 8, 4, 4},    {32, 64, 16, 2, 4},  {32, 32, 16, 2, 2},  {128, 128, 8, 8, 8}};
  for (const auto& s : shapes) {
    Tuning t;
    t.ts_m = s[0], t.ts_n = s[1], t.ts_k = s[2], t.wpt_m = s[3], t.wpt_n = s[4];
    t.source = "tuner candidate";
    if (tiles_valid(device, t)) out.push_back(t);
  }
  return out;
}

TileTiming time_tiles(OpenClBackend& be, const Tuning& tiles, std::int64_t m, std::int64_t n, std::int64_t k,
                      int reps) {
  TileTiming r;
  r.tiles = tiles;
  try {
    std::vector<float> av(static_cast<std::size_t>(m * k)), bv(static_cast<std::size_t>(k * n));
    for (std::size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i % 13) * 0.125f - 0.75f;
    for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    const Tensor a = be.upload(HostTensor::from_f32({m, k}, av));
    const Tensor b = be.upload(HostTensor::from_f32({k, n}, bv));
    const Tensor c = be.upload(HostTensor::from_f32({m, n}, std::vector<float>(static_cast<std::size_t>(m * n))));
    Problem pr;
    pr.a = {be.buffer(a), 0, 0, k, 1};
    pr.b = {be.buffer(b), 0, 0, n, 1};
    pr.c = be.buffer(c);
    pr.ldc = n;
    pr.m = m, pr.n = n, pr.k = k;
    const Precision p{DType::f32};
    run_tiled(be, p, pr, tiles, "TUNE");  // build and warm up
    be.synchronize();
    std::vector<double> ms;
    for (int i = 0; i < std::max(1, reps); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      run_tiled(be, p, pr, tiles, "TUNE");
      be.synchronize();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    r.ms = ms[ms.size() / 2];
    r.gflops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / (r.ms * 1e6);
  } catch (const std::exception& e) {
    r.error = e.what();
    log::info("GEMM tiles {}x{}x{} / {}x{} cannot run on \"{}\": {}", tiles.ts_m, tiles.ts_n, tiles.ts_k, tiles.wpt_m,
              tiles.wpt_n, be.device().name, r.error);
  }
  return r;
}

namespace {
std::mutex tuned_mutex;
std::vector<std::pair<std::string, std::optional<Tuning>>> tuned_cache;  // (file|device key, tiles)
}  // namespace

std::string store_tuned_tiles(const OpenClBackend& be, const TileTiming& winner) {
  const fs::path file = tuning_file(be);
  if (file.empty()) throw ConfigError("the kernel cache is disabled: there is no folder to keep the tuned tiles in");
  nlohmann::json doc = nlohmann::json::object();
  if (std::ifstream in(file); in) {
    try {
      doc = nlohmann::json::parse(in);
    } catch (const std::exception&) {
      doc = nlohmann::json::object();  // an unreadable file is replaced
    }
  }
  nlohmann::json entry = tiles_json(winner.tiles);
  entry["device"] = be.device().name;
  entry["gflops"] = winner.gflops;
  doc["devices"][device_key(be.device())] = entry;
  fs::create_directories(file.parent_path());
  const fs::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump(2) << "\n";
    if (!out) throw FileError(tmp.string() + ": cannot write the tuned tiles (is the kernel cache folder writable?)");
  }
  fs::rename(tmp, file);
  std::lock_guard lock(tuned_mutex);
  tuned_cache.clear();  // the next lookup reads the new file
  return file.string();
}

std::optional<Tuning> tuned_tiles(const OpenClBackend& be) {
  const fs::path file = tuning_file(be);
  if (file.empty()) return std::nullopt;
  const std::string key = file.string() + "|" + device_key(be.device());
  std::lock_guard lock(tuned_mutex);
  for (const auto& [k, t] : tuned_cache) {
    if (k == key) return t;
  }
  std::optional<Tuning> found;
  if (std::ifstream in(file); in) {
    try {
      const nlohmann::json doc = nlohmann::json::parse(in);
      const auto& e = doc.at("devices").at(device_key(be.device()));
      Tuning t;
      t.ts_m = e.at("ts_m"), t.ts_n = e.at("ts_n"), t.ts_k = e.at("ts_k"), t.wpt_m = e.at("wpt_m"),
      t.wpt_n = e.at("wpt_n");
      t.source = "tuned (" + file.string() + ")";
      if (tiles_valid(be.device(), t)) {
        found = t;
        log::info("GEMM tiles for \"{}\": {}x{}x{} / {}x{} from {}", be.device().name, t.ts_m, t.ts_n, t.ts_k, t.wpt_m,
                  t.wpt_n, file.string());
      } else {
        log::warn("{}: the tuned GEMM tiles for \"{}\" do not fit this device; using the built-in table", file.string(),
                  be.device().name);
      }
    } catch (const std::exception&) {
      // No entry for this device (or an unreadable file): the table's tiles.
    }
  }
  tuned_cache.emplace_back(key, found);
  return found;
}

}  // namespace nanscope::opencl::gemm
