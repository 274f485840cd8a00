// The live inspector's cost: per-step statistics, masks, band scores and the
// latent preview, as step time with them against step time without
// (inspect.stats_every=0, the same run's baseline), for the embedded model at
// several image sizes, and what a full-decode preview every N steps adds
// (inspect.decode_every). Prints tables. Budget: at most 3% of step time.
//
//   build/bench/bench_inspect [--device D] [--model DIR] [--sizes 64,128,256] [--steps N] [--decode-every N]
//                             [--rounds N] [--json FILE]
//
// The statistics are reduced on the device, where the latent and the UNet
// output stay between steps, and read back as a few KB (StepReport::
// inspect_bytes). The second table is the same-run baseline: the step's three
// maps reduced on the device against reading them back whole and reducing them
// on the host (what an inspector outside the device would do).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "bench_util.hpp"
#include "core/error.hpp"
#include "inspect/inspect.hpp"
#include "pipeline/sd_model.hpp"
#include "pipeline/session.hpp"

using namespace nanscope;

namespace {

struct StepTimes final : pipeline::RunObserver {
  std::vector<double> step, inspect, decode;
  Shape latent;
  std::size_t bytes = 0;
  void on_step(const pipeline::StepReport& s) override {
    latent = s.latent_shape;
    bytes = s.inspect_bytes;
    step.push_back(s.seconds);
    inspect.push_back(s.inspect_seconds);
    decode.push_back(s.decode_seconds);
  }
};

// Median seconds of f() over `reps` calls after one warm-up.
template <typename F>
double time_median(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return bench::median(t);
}

constexpr double kPairBudget = 6.0;  // seconds of alternating runs per size, at least --rounds pairs
constexpr int kMaxRoundsFactor = 5;  // and at most 5x --rounds

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pin, model, sizes = "64,128,256";
  int steps = 10, decode_every = 5, rounds = 5;
  std::string json_path;  // --json: the overhead per size (bench_report reads it)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      pin = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--sizes" && i + 1 < argc)
      sizes = argv[++i];
    else if (a == "--steps" && i + 1 < argc)
      steps = std::max(2, std::atoi(argv[++i]));
    else if (a == "--decode-every" && i + 1 < argc)
      decode_every = std::max(1, std::atoi(argv[++i]));
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(
          stderr,
          "usage: %s [--device D] [--model DIR] [--sizes 64,128,256] [--steps N] [--decode-every N] [--rounds N] "
          "[--json FILE]\n",
          argv[0]);
      return 2;
    }
  }
  try {
    if (model.empty()) model = pipeline::embedded_model_dir().string();
    pipeline::Session session(backend_options_from_environment());
    const std::string device = session.backend(pin).device().name;
    std::printf("\nbench_inspect: %s on \"%s\", %d steps with CFG (steps 2..N timed; the first builds kernels)\n\n",
                model.c_str(), device.c_str(), steps);
    std::printf(
        "| image | latent | step ms, no statistics | step ms | overhead (pairs of runs) | inspector host ms | read "
        "back per step | "
        "full decode every %d: ms | share |\n",
        decode_every);
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    std::vector<Shape> shapes;
    nlohmann::json out = {{"bench", "inspect"},
                          {"device", device},
                          {"steps", steps},
                          {"rounds", rounds},
                          {"sizes", nlohmann::json::array()}};
    std::stringstream ss(sizes);
    for (std::string tok; std::getline(ss, tok, ',');) {
      const int size = std::atoi(tok.c_str());
      RunConfig config;
      config.model = model;
      config.device = pin;
      config.prompt = "a red circle on a blue background";
      config.steps = steps;
      config.width = config.height = size;
      config.seed = 1;
      const auto t_warm = std::chrono::steady_clock::now();
      session.generate(config);  // warm-up: kernels for this size
      const double run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_warm).count();
      // Baseline in the same run: no step statistics (inspect.stats_every=0). Runs alternate
      // (--rounds pairs at least), so drifts of the machine hit both sides alike. Where a run is
      // short, more pairs, up to about kPairBudget seconds: at 64x64 the inspector costs about
      // 0.1 ms of a 8 ms step, less than one run's median moves on a busy VM.
      const int pairs = std::clamp(static_cast<int>(kPairBudget / (2.0 * std::max(run_seconds, 1e-3))), rounds,
                                   kMaxRoundsFactor * rounds);
      StepTimes bare, plain;
      std::vector<double> ratios;
      for (int round = 0; round < pairs; ++round) {
        // Which of the two runs first alternates too: the second run of a pair finds the
        // allocator and the caches as the first left them.
        StepTimes b, p;
        for (const bool with_stats : {round % 2 == 1, round % 2 == 0}) {
          config.set("inspect.stats_every", with_stats ? "1" : "0");
          session.generate(config, with_stats ? &p : &b);
        }
        // Drop the first step of each run (allocation at a new size).
        // The machine's speed drifts by more than the inspector costs between runs; the ratio of
        // two neighbouring runs does not, so the overhead is the median of the rounds' ratios.
        ratios.push_back(bench::median({p.step.begin() + 1, p.step.end()}) /
                         bench::median({b.step.begin() + 1, b.step.end()}));
        bare.step.insert(bare.step.end(), b.step.begin() + 1, b.step.end());
        plain.step.insert(plain.step.end(), p.step.begin() + 1, p.step.end());
        plain.inspect.insert(plain.inspect.end(), p.inspect.begin() + 1, p.inspect.end());
        plain.latent = p.latent;
        plain.bytes = p.bytes;
      }
      config.set("inspect.decode_every", std::to_string(decode_every));
      StepTimes with_decode;
      session.generate(config, &with_decode);
      // Drop the first step of each run (allocation at a new size).
      auto tail = [](std::vector<double> v) { return std::vector<double>(v.begin() + 1, v.end()); };
      const double step = bench::median(plain.step);
      const double step_bare = bench::median(bare.step);
      const double insp = bench::median(plain.inspect);
      const double dec_total = sum(with_decode.decode) / static_cast<double>(with_decode.step.size());
      const double step_dec = sum(tail(with_decode.step)) / static_cast<double>(with_decode.step.size() - 1);
      std::printf("| %dx%d | %lldx%lld | %.2f | %.2f | %+.1f%% (%d) | %.3f | %.1f KB | %.2f per step | %.1f%% |\n",
                  size, size, static_cast<long long>(plain.latent.at(3)), static_cast<long long>(plain.latent.at(2)),
                  step_bare * 1e3, step * 1e3, 100.0 * (bench::median(ratios) - 1.0), pairs, insp * 1e3,
                  static_cast<double>(plain.bytes) / 1024.0, dec_total * 1e3, 100.0 * dec_total / step_dec);
      shapes.push_back(plain.latent);
      out["sizes"].push_back({{"size", size},
                              {"step_ms_bare", step_bare * 1e3},
                              {"step_ms", step * 1e3},
                              {"overhead_pct", 100.0 * (bench::median(ratios) - 1.0)},
                              {"pairs", pairs},
                              {"inspector_host_ms", insp * 1e3},
                              {"decode_share_pct", 100.0 * dec_total / step_dec}});
    }
    // Baseline in the same run: one step's maps (latent f32, both CFG branches f16, SD 1.x preview
    // factors) reduced where they are, against read back whole and reduced on the host.
    for (const Shape& s : {Shape{1, 4, 64, 64}, Shape{1, 4, 128, 128}})  // SD 1.x at 512x512, SDXL at 1024x1024
      if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
    Backend& be = session.backend(pin);
    const auto factors = inspect::latent_rgb_factors("sd1");
    std::printf(
        "\n| latent | on the device: ms | read back | read back whole + host: ms | read back | device / host time |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (const Shape& s : shapes) {
      const std::int64_t n = shape_numel(s);
      std::vector<float> lat(static_cast<std::size_t>(n)), pred(static_cast<std::size_t>(2 * n));
      for (std::size_t i = 0; i < lat.size(); ++i) lat[i] = static_cast<float>((i * 7919 % 1000) / 500.0 - 1.0);
      for (std::size_t i = 0; i < pred.size(); ++i) pred[i] = static_cast<float>((i * 104729 % 1000) / 500.0 - 1.0);
      Shape ps = s;
      ps[0] = 2;
      const Tensor tl = be.upload(HostTensor::from_f32(s, lat));
      const Tensor tp = be.upload(HostTensor::from_f32(ps, pred, DType::f16));
      std::size_t dev_bytes = 0;
      const double dev =
          time_median(20, [&] { inspect::analyze_step(be, tl, tp, 1, 0, 65504.0, &*factors, 1.0, &dev_bytes); });
      const double host = time_median(20, [&] {
        const std::vector<float> l = be.download(tl).to_f32(), p = be.download(tp).to_f32();
        const std::span<const float> sp(p);
        inspect::analyze_step(l, sp.subspan(static_cast<std::size_t>(n)), sp.first(static_cast<std::size_t>(n)), s[1],
                              s[2], s[3], 65504.0, &*factors, 1.0);
      });
      const double whole = static_cast<double>(tl.bytes() + tp.bytes());
      std::printf("| %lldx%lldx%lld | %.3f | %.1f KB | %.3f | %.1f KB | %.2fx |\n", static_cast<long long>(s[1]),
                  static_cast<long long>(s[2]), static_cast<long long>(s[3]), dev * 1e3,
                  static_cast<double>(dev_bytes) / 1024.0, host * 1e3, whole / 1024.0, dev / host);
    }
    std::printf(
        "\nBudget: overhead <= 3%% (step time with statistics against without: the median of the ratios of\n"
        "alternating pairs of runs, more pairs where runs are short). Inspector host ms: its own host\n"
        "time per step, waits excluded (its kernels run in the step's queue). The full-decode preview\n"
        "is opt-in and costs one VAE decode per N steps.\n");
    return bench::write_json_file(json_path, out) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_inspect: %s\n", e.what());
    return 1;
  }
}
