// The CPU speed report in one command: runs the benches one after another
// (never two at once: each needs the whole machine), keeps each one's table
// and JSON in an output folder, and ends with one table of the speed targets
// (bench/targets.hpp): for each, what this run measured and whether it was
// met, missed (by how much) or not measured. Writes report.json beside them.
//
//   build/bench/bench_report [--out DIR] [--quick] [--stages LIST] [--device D] [--no-peers] [--no-torch]
//   build/bench/bench_report --from DIR      (judge the JSON files a run left in DIR again, run nothing)
//
// Stages (default: all, in this order; --quick: ops,unet,vae,txt2img,inspect):
//   ops       bench_ops                                  kernels against the peak and the bandwidth
//   unet      bench_unet --size 64 (f32, f16; 3 rounds)  SD 1.5 UNet call at 512x512, PyTorch, peers
//   vae       bench_unet --component vae --size 64       VAE decode at 512x512
//   unet_128  bench_unet --size 128 (f32, f16; 2 rounds) the same at 1024x1024
//   vae_128   bench_unet --component vae --size 128      VAE decode at 1024x1024
//   txt2img   bench_txt2img --cold-start 1               embedded model end to end; cold and warm start
//   growth    bench_txt2img --sizes 256,512,768,1024     step time and peak RSS per image size, 2 steps
//   inspect   bench_inspect                              the inspector's share of a step
// A stage that fails is reported as such and its targets as not measured; the
// others still run. On a 2-core AVX2 VM (2026-11-28): --quick 19 minutes,
// growth 8, unet_128 41 with f32 only (23 of them the once-only ONNX export of
// the sliced UNet; f16 adds two more calls, about 4 minutes); the whole report
// about 95 minutes the first time, an hour after.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.hpp"
#include "targets.hpp"

namespace fs = std::filesystem;

namespace {

struct Stage {
  const char* name;
  const char* program;
  const char* args;
  const char* what;
};

// Every stage: the bench it runs and the arguments that make it measure what its targets need.
constexpr Stage kStages[] = {
    {"ops", "bench_ops", "", "kernels at the models' shapes"},
    {"linears", "bench_ops", "--shapes sd15 --only linear",
     "GEMM at the models' shapes: an SD 1.5 UNet call's linears"},
    {"unet", "bench_unet", "--size 64 --dtypes f32,f16 --runs 2 --rounds 3", "SD 1.5 UNet call, 512x512"},
    {"vae", "bench_unet", "--component vae --size 64 --dtypes f32,f16 --runs 2 --rounds 2", "VAE decode, 512x512"},
    {"unet_128", "bench_unet", "--size 128 --dtypes f32,f16 --runs 1 --rounds 2", "SD 1.5 UNet call, 1024x1024"},
    {"vae_128", "bench_unet", "--component vae --size 128 --dtypes f32 --runs 2", "VAE decode, 1024x1024"},
    {"txt2img", "bench_txt2img", "--runs 3 --cold-start 1", "embedded model end to end, cold start"},
    {"growth", "bench_txt2img", "--sizes 256,512,768,1024 --steps 2 --runs 1 --cold-start 0",
     "embedded model at 256 to 1024"},
    {"inspect", "bench_inspect", "", "the inspector's cost"},
};
constexpr const char* kQuick = "ops,linears,unet,vae,txt2img,inspect";

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string s; std::getline(ss, s, ',');)
    if (!s.empty()) out.push_back(s);
  return out;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs one stage: its table goes to DIR/NAME.md, its log to DIR/NAME.log, its results to DIR/NAME.json.
bool run_stage(const Stage& st, const fs::path& bench_dir, const fs::path& dir, const std::string& extra) {
  const fs::path json = dir / (std::string(st.name) + ".json");
  fs::remove(json);
  std::string cmd = quote((bench_dir / st.program).string()) + (*st.args ? " " : "") + st.args + extra + " --json " +
                    quote(json.string()) + " > " + quote((dir / (std::string(st.name) + ".md")).string()) + " 2> " +
                    quote((dir / (std::string(st.name) + ".log")).string());
  std::fprintf(stderr, "bench_report: %s (%s): %s\n", st.name, st.what, cmd.c_str());
  const auto t0 = nanscope::bench::Clock::now();
  const int rc = std::system(cmd.c_str());
  const double s = nanscope::bench::seconds_since(t0);
  if (rc != 0 || !fs::exists(json)) {
    std::fprintf(stderr, "bench_report: %s failed after %.0f s (exit status %d); its log: %s\n", st.name, s, rc,
                 (dir / (std::string(st.name) + ".log")).c_str());
    return false;
  }
  std::fprintf(stderr, "bench_report: %s done in %.0f s\n", st.name, s);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = "bench-report", from, stages_arg, pin;
  bool quick = false, peers = true, torch = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc)
      out_dir = argv[++i];
    else if (a == "--from" && i + 1 < argc)
      from = argv[++i];
    else if (a == "--stages" && i + 1 < argc)
      stages_arg = argv[++i];
    else if (a == "--quick")
      quick = true;
    else if (a == "--device" && i + 1 < argc)
      pin = argv[++i];
    else if (a == "--no-peers")
      peers = false;
    else if (a == "--no-torch")
      torch = false;
    else {
      std::fprintf(
          stderr,
          "usage: %s [--out DIR] [--quick] [--stages ops,linears,unet,vae,unet_128,vae_128,txt2img,growth,inspect] "
          "[--device D] [--no-peers] [--no-torch] | --from DIR\n",
          argv[0]);
      return 2;
    }
  }
  const fs::path dir = from.empty() ? fs::path(out_dir) : fs::path(from);
  std::vector<std::string> wanted = split(stages_arg.empty() ? (quick ? kQuick : "") : stages_arg);
  if (wanted.empty())
    for (const Stage& st : kStages) wanted.push_back(st.name);
  for (const std::string& w : wanted) {
    if (std::none_of(std::begin(kStages), std::end(kStages), [&](const Stage& st) { return w == st.name; })) {
      std::fprintf(stderr,
                   "bench_report: unknown stage \"%s\" (ops, linears, unet, vae, unet_128, vae_128, txt2img, growth, "
                   "inspect)\n",
                   w.c_str());
      return 2;
    }
  }

  nlohmann::json results = nlohmann::json::object();
  std::vector<std::string> failed;
  if (from.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      std::fprintf(stderr, "bench_report: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
      return 1;
    }
    const fs::path bench_dir = fs::read_symlink("/proc/self/exe").parent_path();
    for (const Stage& st : kStages) {
      if (std::find(wanted.begin(), wanted.end(), st.name) == wanted.end()) continue;
      std::string extra;
      if (!pin.empty()) extra += " --device " + quote(pin);
      const std::string program = st.program;
      if (!torch) extra += " --no-torch";
      if (!peers && program == "bench_unet") extra += " --no-peers";
      if (!run_stage(st, bench_dir, dir, extra)) failed.push_back(st.name);
    }
  }
  // The tables of every stage that left one, then the targets.
  for (const Stage& st : kStages) {
    if (std::find(wanted.begin(), wanted.end(), st.name) == wanted.end()) continue;
    const fs::path json = dir / (std::string(st.name) + ".json");
    if (!fs::exists(json)) continue;
    try {
      results[st.name] = nlohmann::json::parse(read_file(json));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_report: %s is not valid JSON (%s)\n", json.c_str(), e.what());
      continue;
    }
    std::printf("\n## %s: %s\n%s", st.name, st.what, read_file(dir / (std::string(st.name) + ".md")).c_str());
  }

  const std::vector<nanscope::bench::Target> targets = nanscope::bench::evaluate_targets(results);
  int met = 0, missed = 0, unmeasured = 0;
  std::printf("\n## Targets (bench/targets.hpp; ratios from this run)\n\n| target | measured | |\n|---|---|---|\n");
  nlohmann::json report = {{"stages", results}, {"targets", nlohmann::json::array()}, {"failed", failed}};
  for (const auto& t : targets) {
    std::printf("| %s | %s | %s |\n", t.goal.c_str(), t.measured.empty() ? "-" : t.measured.c_str(),
                nanscope::bench::verdict_name(t.verdict));
    report["targets"].push_back(
        {{"target", t.goal}, {"measured", t.measured}, {"verdict", nanscope::bench::verdict_name(t.verdict)}});
    met += t.verdict == nanscope::bench::Verdict::met;
    missed += t.verdict == nanscope::bench::Verdict::missed;
    unmeasured += t.verdict == nanscope::bench::Verdict::not_measured;
  }
  std::printf("\n%d met, %d missed, %d not measured.", met, missed, unmeasured);
  if (!failed.empty()) {
    std::string f;
    for (const auto& s : failed) f += (f.empty() ? "" : ", ") + s;
    std::printf(" Stages that failed: %s (their logs in %s).", f.c_str(), dir.c_str());
  }
  std::printf(" Tables, logs and JSON: %s\n", dir.c_str());
  if (!nanscope::bench::write_json_file((dir / "report.json").string(), report)) return 1;
  return failed.empty() ? 0 : 1;
}
