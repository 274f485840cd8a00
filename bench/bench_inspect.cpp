// The live inspector's cost: per-step statistics, masks, band scores and the
// latent preview (StepReport::inspect_seconds) against the whole step, for the
// embedded model at several image sizes, and what a full-decode preview every
// N steps adds (inspect.decode_every). Prints a table. Budget: the inspector
// at most 3% of step time.
//
//   build/bench/bench_inspect [--device D] [--model DIR] [--sizes 64,128,256] [--steps N] [--decode-every N]
//
// The statistics run on the host, where the sampler keeps the latent between
// steps and where the UNet output is read back for guidance anyway; the work is
// linear in the latent (a few passes over C x H x W floats) while a UNet step is
// far more than linear in it, so the share shrinks as images grow.

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "core/error.hpp"
#include "pipeline/sd_model.hpp"
#include "pipeline/session.hpp"

using namespace nanscope;

namespace {

struct StepTimes final : pipeline::RunObserver {
  std::vector<double> step, inspect, decode;
  Shape latent;
  void on_step(const pipeline::StepReport& s) override {
    latent = s.latent_shape;
    step.push_back(s.seconds);
    inspect.push_back(s.inspect_seconds);
    decode.push_back(s.decode_seconds);
  }
};

double sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string pin, model, sizes = "64,128,256";
  int steps = 10, decode_every = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) pin = argv[++i];
    else if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--sizes" && i + 1 < argc) sizes = argv[++i];
    else if (a == "--steps" && i + 1 < argc) steps = std::max(2, std::atoi(argv[++i]));
    else if (a == "--decode-every" && i + 1 < argc) decode_every = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--device D] [--model DIR] [--sizes 64,128,256] [--steps N] [--decode-every N]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    if (model.empty()) model = pipeline::embedded_model_dir().string();
    pipeline::Session session;
    const std::string device = session.backend(pin).device().name;
    std::printf("\nbench_inspect: %s on \"%s\", %d steps with CFG (steps 2..N timed; the first builds kernels)\n\n",
                model.c_str(), device.c_str(), steps);
    std::printf("| image | latent | step ms | inspector ms | inspector share | full decode every %d: ms | share |\n",
                decode_every);
    std::printf("|---|---|---:|---:|---:|---:|---:|\n");
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
      session.generate(config);  // warm-up: kernels for this size
      StepTimes plain;
      session.generate(config, &plain);
      config.set("inspect.decode_every", std::to_string(decode_every));
      StepTimes with_decode;
      session.generate(config, &with_decode);
      // Drop the first step of each run (allocation at a new size).
      auto tail = [](std::vector<double> v) { return std::vector<double>(v.begin() + 1, v.end()); };
      const double step = bench::median(tail(plain.step));
      const double insp = bench::median(tail(plain.inspect));
      const double dec_total = sum(with_decode.decode) / static_cast<double>(with_decode.step.size());
      const double step_dec = sum(tail(with_decode.step)) / static_cast<double>(with_decode.step.size() - 1);
      std::printf("| %dx%d | %lldx%lld | %.2f | %.3f | %.2f%% | %.2f per step | %.1f%% |\n", size, size,
                  static_cast<long long>(plain.latent.at(3)), static_cast<long long>(plain.latent.at(2)), step * 1e3, insp * 1e3,
                  100.0 * insp / step, dec_total * 1e3, 100.0 * dec_total / step_dec);
    }
    std::printf("\nBudget: inspector share <= 3%% of step time. The full-decode preview is opt-in and costs one\n"
                "VAE decode per N steps.\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_inspect: %s\n", e.what());
    return 1;
  }
}
