// Whole txt2img on the embedded default model (or --model), 20 steps with
// CFG at the model's size (or each of --sizes): load, time per step and end
// to end on the selected device, beside diffusers' StableDiffusionPipeline on
// PyTorch (CPU) running the same folder in the same bench. Prints a table with
// a row per engine and size, and how the time per step grows with the size.
//
//   build/bench/bench_txt2img [--device D] [--model DIR] [--steps N] [--runs N] [--sizes 64,256,1024]
//                             [--no-torch] [--cold-start N] [--json FILE]
//
// Cold start (report R4; --cold-start N pairs, default 1, 0 skips it):
// `nanscope-cli generate` at the model's size with both kernel caches empty
// (ours and the driver's: fresh folders for NANSCOPE_KERNEL_CACHE,
// POCL_CACHE_DIR and CUDA_CACHE_PATH), once with the helper processes that
// build kernels side by side and once with every build in the process
// (NANSCOPE_KERNEL_BUILDER=0), alternating; then the same command warm, whose
// kernel part (loading the cached programs) is summed from its log.
//
// Peak RSS per size: this process's peak after each size (the sizes run in
// the order given, so in ascending order it is that size's peak), and each
// diffusers run's own (one process per size).
//
// At 1024x1024 and above diffusers runs with attention slicing (one slice per
// head): its classic attention would otherwise hold every head's 16384^2
// score matrix at once. The embedded model downsamples by 4, not 8: at
// 1024x1024 its attention sees 65536 tokens, one head's scores alone are
// 17 GB, and diffusers runs out of memory on a 24 GB machine (the table says
// so; NaNscope's flash attention keeps its memory bounded by the block).
// The PyTorch baseline runs as a well-set-up user would run it: OpenBLAS with
// the fastest OPENBLAS_CORETYPE for this CPU (measured, bench_util.hpp),
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1, one thread per core, diffusers'
// classic AttnProcessor (torch 1.13 has no SDPA).

#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.hpp"
#include "core/error.hpp"
#include "pipeline/sd_model.hpp"
#include "pipeline/session.hpp"

using namespace nanscope;

namespace {

using bench::Clock;
using bench::median;
using bench::seconds_since;

// Wall-clock time of every step, as the observer sees it.
class StepClock : public pipeline::RunObserver {
 public:
  void on_step(const pipeline::StepReport&) override { stamps.push_back(Clock::now()); }
  double per_step() const {
    if (stamps.size() < 2) return 0.0;
    return std::chrono::duration<double>(stamps.back() - stamps.front()).count() /
           static_cast<double>(stamps.size() - 1);
  }
  std::vector<Clock::time_point> stamps;
};

struct TorchResult {
  double end_to_end = 0, per_step = 0, load = 0, peak_rss_mb = 0;
  bool ok = false;
};

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// Resident now (/proc/self/statm): what the process keeps after a size's runs, which the next sizes start with.
double rss_mb() {
  std::ifstream statm("/proc/self/statm");
  double total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

TorchResult run_torch(const std::string& model, int steps, double cfg, int runs, int size) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  TorchResult r;
  const auto j = bench::run_python_baseline(
      "torch_txt2img.py", "'" + model + "' " + std::to_string(steps) + " " + std::to_string(cfg) + " " +
                              std::to_string(runs) + " " + std::to_string(threads) + " " + std::to_string(size));
  if (!j) return r;
  r.end_to_end = j->at("end_to_end").get<double>();
  r.per_step = j->at("per_step").get<double>();
  r.load = j->at("load").get<double>();
  r.peak_rss_mb = j->value("peak_rss_mb", 0.0);
  r.ok = true;
  return r;
}

// Seconds `command` took; throws when it fails.
double timed_command(const std::string& command) {
  const auto t0 = Clock::now();
  const int rc = std::system(command.c_str());
  if (rc != 0) throw Error("cold-start run failed (exit status " + std::to_string(rc) + "): " + command);
  return seconds_since(t0);
}

struct ColdStart {
  std::vector<double> cold, warm, warm_kernel_ms;
};

// The milliseconds a run's log says it spent loading cached kernel programs
// ("loaded PROGRAM [OPTIONS] from cache in N ms", one line per program).
double kernel_load_ms(const std::filesystem::path& log) {
  static const std::regex line(R"(loaded .* from cache in ([0-9.]+) ms)");
  std::ifstream in(log);
  double ms = 0;
  std::smatch m;
  for (std::string l; std::getline(in, l);)
    if (std::regex_search(l, m, line)) ms += std::stod(m[1].str());
  return ms;
}

// One cold run of `nanscope-cli generate` in fresh cache folders, then a warm one in the same folders.
void cold_start_pair(const std::string& model, const std::string& pin, int steps, bool helpers, ColdStart& out) {
  char tmpl[] = "/tmp/nanscope-cold-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  if (!dir) throw Error("cold start: cannot create a temporary folder in /tmp");
  const std::filesystem::path root(dir);
  for (const char* sub : {"kernels", "driver"}) std::filesystem::create_directory(root / sub);
  const std::string env = "NANSCOPE_KERNEL_CACHE='" + (root / "kernels").string() + "' POCL_CACHE_DIR='" +
                          (root / "driver").string() + "' CUDA_CACHE_PATH='" + (root / "driver").string() + "'" +
                          (helpers ? "" : " NANSCOPE_KERNEL_BUILDER=0");
  const std::string command = env + " '" NANSCOPE_CLI_PATH "' --log info generate --model '" + model + "'" +
                              (pin.empty() ? std::string() : " --device '" + pin + "'") + " --steps " +
                              std::to_string(steps) + " -p 'a red fox' -o '" + (root / "out.png").string() + "'";
  try {
    out.cold.push_back(timed_command(command + " >/dev/null 2>&1"));
    out.warm.push_back(timed_command(command + " >'" + (root / "warm.log").string() + "' 2>&1"));
    out.warm_kernel_ms.push_back(kernel_load_ms(root / "warm.log"));
  } catch (...) {
    std::filesystem::remove_all(root);
    throw;
  }
  std::filesystem::remove_all(root);
}

}  // namespace

int main(int argc, char** argv) {
  std::string pin, model;
  int steps = 20, runs = 5, cold_pairs = 1;
  bool torch = true;
  std::string json_path;   // --json: the rows and the cold start (bench_report reads it)
  std::vector<int> sizes;  // image sizes; empty: the model's own
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      pin = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--steps" && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (a == "--runs" && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--sizes" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      for (std::string v; std::getline(ss, v, ',');) sizes.push_back(std::atoi(v.c_str()));
    } else if (a == "--no-torch")
      torch = false;
    else if (a == "--cold-start" && i + 1 < argc)
      cold_pairs = std::max(0, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--device D] [--model DIR] [--steps N] [--runs N] [--sizes 64,256,1024] [--no-torch] "
                   "[--cold-start N] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    if (model.empty()) model = pipeline::embedded_model_dir().string();
    RunConfig config;
    config.model = model;
    config.device = pin;
    config.prompt = "a red circle on a blue background";
    config.steps = steps;
    config.cfg_scale = 7.0;

    pipeline::Session session(backend_options_from_environment());
    const std::string device = session.backend(pin).device().name;
    if (sizes.empty()) sizes.push_back(0);  // the model's own size
    struct Row {
      int size;
      double first, per_step, total, peak_rss_mb, rss_after_mb;
      TorchResult torch;
    };
    std::vector<Row> rows;
    for (const int size : sizes) {
      if (size != 0 && (size < 64 || size % 8 != 0)) throw ConfigError("--sizes: a size is a multiple of 8, >= 64");
      config.width = config.height = size;
      // First run: model load and kernel builds/cache loads, timed apart.
      auto t0 = Clock::now();
      config.seed = 0;
      session.generate(config);
      const double first = seconds_since(t0);
      std::vector<double> totals, per_step;
      for (int r = 0; r < runs; ++r) {
        StepClock clock;
        config.seed = static_cast<std::uint64_t>(r + 1);
        t0 = Clock::now();
        session.generate(config, &clock);
        totals.push_back(seconds_since(t0));
        per_step.push_back(clock.per_step());
      }
      Row row{size, first, median(per_step), median(totals), peak_rss_mb(), rss_mb(), {}};
      if (torch) row.torch = run_torch(model, steps, config.cfg_scale, runs, size);
      std::fprintf(stderr, "bench_txt2img: size %d: ours %.3f s, diffusers %.3f s\n", size, row.total,
                   row.torch.end_to_end);
      rows.push_back(row);
    }

    std::printf("\nbench_txt2img: %s, %d steps, CFG 7, one 1-image run (median of %d) on \"%s\"\n\n", model.c_str(),
                steps, runs, device.c_str());
    std::printf(
        "| | size | first run s (load + kernels) | per step ms | end to end s | peak RSS MB | RSS after MB | diffusers "
        "/ "
        "ours |\n");
    std::printf("|---|---:|---|---|---|---:|---:|---|\n");
    for (const Row& r : rows) {
      const std::string size = r.size ? std::to_string(r.size) + "x" + std::to_string(r.size) : "model's";
      std::printf("| NaNscope | %s | %.2f | %.1f | %.3f | %.0f | %.0f | |\n", size.c_str(), r.first, r.per_step * 1e3,
                  r.total, r.peak_rss_mb, r.rss_after_mb);
      if (r.torch.ok) {
        std::printf(
            "| diffusers (PyTorch CPU) | %s | %.2f (load) | %.1f | %.3f | %.0f | | %.2fx end to end, %.2fx per step "
            "|\n",
            size.c_str(), r.torch.load, r.torch.per_step * 1e3, r.torch.end_to_end, r.torch.peak_rss_mb,
            r.torch.end_to_end / r.total, r.torch.per_step / r.per_step);
      } else if (torch) {
        std::printf(
            "| diffusers (PyTorch CPU) | %s | did not finish: its process failed (out of memory, or the "
            "error in the log) | | | | | |\n",
            size.c_str());
      }
    }
    if (rows.size() > 1) {
      // Growth against the first size: the pixel count grows by (s/s0)^2; attention by up to its square.
      std::printf("\nTime per step against the first size (pixels x, NaNscope x, diffusers x):");
      for (const Row& r : rows) {
        const double px = double(r.size) * r.size / (double(rows[0].size) * rows[0].size);
        std::printf(" %d: %.0fx, %.1fx", r.size, px, r.per_step / rows[0].per_step);
        if (r.torch.ok && rows[0].torch.ok) std::printf(", %.1fx", r.torch.per_step / rows[0].torch.per_step);
        std::printf(";");
      }
      std::printf("\n");
    }
    std::printf("\nTarget: end to end under 2 s at the embedded model's 64x64.\n");

    nlohmann::json out = {{"bench", "txt2img"}, {"model", model}, {"device", device},
                          {"steps", steps},     {"runs", runs},   {"sizes", nlohmann::json::array()}};
    for (const Row& r : rows) {
      nlohmann::json row = {{"size", r.size},
                            {"first", r.first},
                            {"per_step", r.per_step},
                            {"total", r.total},
                            {"peak_rss_mb", r.peak_rss_mb},
                            {"rss_after_mb", r.rss_after_mb}};
      if (torch && !r.torch.ok) row["torch_failed"] = true;
      if (r.torch.ok) {
        row["torch"] = {{"end_to_end", r.torch.end_to_end},
                        {"per_step", r.torch.per_step},
                        {"load", r.torch.load},
                        {"peak_rss_mb", r.torch.peak_rss_mb}};
      }
      out["sizes"].push_back(row);
    }

    if (cold_pairs > 0) {
      // Alternating, so that a busy moment of the host does not land on one side only.
      ColdStart helpers, in_process;
      for (int i = 0; i < cold_pairs; ++i) {
        cold_start_pair(model, pin, steps, true, helpers);
        cold_start_pair(model, pin, steps, false, in_process);
      }
      std::printf(
          "\nCold start (report R4): nanscope-cli generate, %d steps at the model's size, both kernel caches "
          "empty (median of %d):\n\n",
          steps, cold_pairs);
      std::printf("| | cold s | warm s | warm: loading the cached kernels, s |\n|---|---:|---:|---:|\n");
      std::printf("| kernel builds in helper processes | %.2f | %.2f | %.3f |\n", median(helpers.cold),
                  median(helpers.warm), median(helpers.warm_kernel_ms) / 1e3);
      std::printf("| every build in the process (NANSCOPE_KERNEL_BUILDER=0) | %.2f | %.2f | %.3f |\n",
                  median(in_process.cold), median(in_process.warm), median(in_process.warm_kernel_ms) / 1e3);
      std::printf(
          "\nTarget: cold under 10 s; a warm run's kernel part (loading the cached programs, summed from its "
          "log) under 0.3 s. The warm column is the whole run: process start, model load, kernel loads, every "
          "step, decode and PNG.\n");
      out["cold_start"] = {{"helpers",
                            {{"cold", median(helpers.cold)},
                             {"warm", median(helpers.warm)},
                             {"warm_kernel_s", median(helpers.warm_kernel_ms) / 1e3}}},
                           {"in_process",
                            {{"cold", median(in_process.cold)},
                             {"warm", median(in_process.warm)},
                             {"warm_kernel_s", median(in_process.warm_kernel_ms) / 1e3}}},
                           {"pairs", cold_pairs}};
    }
    if (!bench::write_json_file(json_path, out)) return 1;
    if (torch) std::printf("%s.\n", bench::best_openblas_coretype().report.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_txt2img: %s\n", e.what());
    return 1;
  }
}
