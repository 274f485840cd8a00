// One UNet2DConditionModel call with Stable Diffusion 1.5's configuration
// (random weights, latent 64x64 = a 512x512 image, batch 2 as with CFG,
// context 2 x 77 x 768) or SDXL's (--config sdxl: context 2 x 77 x 2048 and
// the added conditions, a pooled text embedding 2 x 1280 and the time ids
// 2 x 6, original and target size 8x the latent, crop 0,0) in f32 and f16
// storage on the selected device,
// beside diffusers on PyTorch (CPU, f32) on the same folder in the same
// bench, with each one's peak resident memory and how many cores the call
// kept busy (CPU time / wall time). Prints a table.
// --component vae times one decode of Stable Diffusion's VAE instead
// (AutoencoderKL, the configuration SD 1.x, 2.x and SDXL share; latent
// [1, 4, LATENT, LATENT], an image 8x that size).
//
//   build/bench/bench_unet [--component unet|vae] [--config sd15|sdxl] [--device D] [--model DIR] [--size LATENT]
//                          [--runs N] [--rounds N] [--dtypes f32,f16] [--no-torch | --torch-device cuda]
//                          [--no-peers] [--set KEY=VALUE ...] [--json FILE]
//
// --set KEY=VALUE (repeatable) runs NaNscope's rows under run settings as `nanscope-cli generate --set` takes
// them: per-module precision overrides (unet.up_blocks.*.attentions.*.dtype=f32 on an f16 UNet) time what a
// mixed-precision run costs against the plain rows of another bench run. The component's own dtype is the row's.
//
// --rounds N runs each NaNscope dtype's process N times, the dtypes taking turns (f32, f16, f32, f16, ...);
// its row then has the median of the rounds' calls, and the table says each round's f16 / f32 ratio. On a
// machine whose speed drifts between minutes (a VM beside busy neighbours: 10-20% here), one process per dtype
// makes their ratio a matter of which ran in the slower minute.
//
// --torch-device cuda times diffusers on the GPU instead, in f32 (TF32 off)
// and f16, each NaNscope dtype against PyTorch's of the same dtype.
//
// The folder is made once by bench/make_sd15_unet.py (seeded, 3.4 GB, under
// $XDG_CACHE_HOME/nanscope/bench/sd15-unet; --config sdxl: 10.3 GB, .../sdxl-unet)
// or bench/make_sd_vae.py (335 MB, .../sd-vae) unless --model names one; a
// --model folder's own config.json says whether it is an SDXL UNet. Every
// configuration runs in its own process (this program re-run with --child)
// so that each peak RSS is that configuration's alone.
//
// On the CPU the same model also runs in the engines people use to run SD
// fast on CPUs, ONNX Runtime and OpenVINO (f32, as many threads as PyTorch),
// from an ONNX export made once by bench/export_onnx.py and cached in the
// model folder (onnx/COMPONENT-SIZE); each engine's output is checked against
// PyTorch's before it is timed (bench/peer_onnx.py, in the bench-only venv
// .venv-bench that tools/bench_venv.sh makes). --no-peers skips them.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "backend/dry_run_backend.hpp"
#include "bench_util.hpp"
#include "core/error.hpp"
#include "models/unet.hpp"
#include "models/vae.hpp"
#include "ops/op_context.hpp"
#include "peak_flops.hpp"
#include "pipeline/component_context.hpp"

using namespace nanscope;
namespace fs = std::filesystem;

namespace {

using bench::Clock;
using bench::seconds_since;

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// Resident memory now (VmRSS), MB.
double rss_mb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %lf kB", &kb) == 1) break;
  std::fclose(f);
  return kb / 1024.0;
}

// Counts the multiply-adds of one model call (2 FLOP each) by running it on a
// stand-in backend that computes nothing: GEMMs, convolutions (as their GEMM)
// and attention's two products. Norms, activations and the softmax are left
// out: a few percent, and not what the peak measures.
class FlopCounter final : public DryRunBackend {
 public:
  using DryRunBackend::DryRunBackend;
  double flops = 0;
  void matmul(const MatmulArgs& a) override { flops += 2.0 * double(a.batch) * double(a.m * a.n) * double(a.k); }
  void conv2d(const Conv2dArgs& a) override {
    flops += 2.0 * double(a.n * a.o) * double(a.oh * a.ow) * double(a.c * a.kh * a.kw);
  }
  void attention(const AttentionArgs& a) override {
    flops += 2.0 * double(a.batch * a.heads) * double(a.sq * a.sk) * double(a.d + a.dv);
  }
};

// User + system CPU seconds of this process so far (all its threads).
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

std::vector<float> normal(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The measured side, in this process: load, one warm-up call (kernel builds), then median of `runs`.
int child(const std::string& component, const std::string& pin, const fs::path& folder, DType dtype, int size,
          const std::vector<std::string>& sets, int runs) {
  auto be = make_backend(select_device(enumerate_devices(), pin), backend_options_from_environment());
  const bool vae = component == "vae";
  auto t0 = Clock::now();
  std::optional<models::UNet> unet;
  std::optional<models::Vae> decoder;
  if (vae) {
    decoder.emplace(models::Vae::load(folder, *be, dtype));
  } else {
    unet.emplace(models::UNet::load(folder, *be, dtype));
  }
  be->synchronize();
  const double load = seconds_since(t0);
  const double loaded_rss = rss_mb();
  const double load_peak = peak_rss_mb();
  std::mt19937 rng(0);
  const auto upload = [&](const Shape& shape) {
    return be->upload(HostTensor::from_f32(shape, normal(rng, static_cast<std::size_t>(shape_numel(shape))), dtype));
  };
  const Tensor sample = upload(vae ? Shape{1, 4, size, size} : Shape{2, 4, size, size});
  const Tensor context = vae ? Tensor{} : upload(Shape{2, 77, unet->config().cross_attention_dim.front()});
  const std::vector<float> t{500.0f, 500.0f};
  // SDXL's added conditions, as its pipeline passes them for an image 8x the
  // latent: original size, crop top-left 0,0, target size, per batch row.
  models::AddedConditions added;
  const models::AddedConditions* added_ptr = nullptr;
  if (!vae && unet->config().text_time) {
    const models::UNetConfig& uc = unet->config();
    added.text_embeds = upload(Shape{2, uc.projection_class_embeddings_input_dim - 6 * uc.addition_time_embed_dim});
    const auto px = static_cast<float>(8 * size);
    for (int row = 0; row < 2; ++row) added.time_ids.insert(added.time_ids.end(), {px, px, 0.0f, 0.0f, px, px});
    added_ptr = &added;
  }
  // The run settings (--set) as a run applies them to the component's root: its precision, attention and
  // per-module overrides; without any, the ops' default precision in the row's dtype.
  RunConfig config;
  for (const std::string& s : sets) config.set(s);
  config.validate();
  const Component c = vae ? Component::vae : Component::unet;
  const pipeline::ComponentPolicy policy(config, c, dtype);
  // Without --set this is a plain context: RunConfig's defaults are Precision{} and AttentionConfig{}, and no
  // overrides means no policy.
  const OpContext ctx = pipeline::component_context(*be, config, c, &policy, dtype);
  double cpu = 0;
  auto call = [&] {
    const auto s = Clock::now();
    const double c0 = cpu_seconds();
    const Tensor out = vae ? decoder->decode(ctx, sample) : unet->forward(ctx, sample, t, context, added_ptr);
    be->download(out);
    cpu = cpu_seconds() - c0;
    return seconds_since(s);
  };
  FlopCounter counter(*be);
  OpContext dry = ctx;
  dry.backend = &counter;
  if (vae) {
    (void)decoder->decode(dry, sample);
  } else {
    (void)unet->forward(dry, sample, t, context, added_ptr);
  }
  // Programs the first call built rather than loaded from the kernel cache: a cold cache (a fresh machine, a new
  // dtype) makes the first call a cold start, which the parent measures again (the first-call target assumes a
  // warm cache; report R4's cold start is bench_txt2img's).
  const std::size_t builds_before = be->kernel_builds().size();
  const double first = call();
  int first_builds = 0;
  double first_build_ms = 0;
  const std::vector<KernelBuildRecord> records = be->kernel_builds();
  for (std::size_t i = builds_before; i < records.size(); ++i)
    if (!records[i].cache_hit) ++first_builds, first_build_ms += records[i].ms;
  std::vector<double> times;
  double cpu_sum = 0, wall_sum = 0;
  for (int r = 0; r < runs; ++r) {
    times.push_back(call());
    cpu_sum += cpu;
    wall_sum += times.back();
  }
  nlohmann::json j{{"device", be->device().name},
                   {"load", load},
                   {"first", first},
                   {"first_builds", first_builds},
                   {"first_build_ms", first_build_ms},
                   {"call", bench::median(times)},
                   {"cores", wall_sum > 0 ? cpu_sum / wall_sum : 0.0},
                   {"gflop", counter.flops / 1e9},
                   {"peak_rss_mb", peak_rss_mb()},
                   {"loaded_rss_mb", loaded_rss},
                   {"load_peak_rss_mb", load_peak}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// The table title's words for a UNet folder: which configuration its
// config.json has, its block widths, and the call's conditioning shapes.
std::string describe_unet(const fs::path& folder, int size) {
  const models::UNetConfig c = models::UNetConfig::from_json(models::ConfigJson::load(folder / "config.json"));
  const std::int64_t cross = c.cross_attention_dim.front();
  const std::string name = c.text_time                                        ? "SDXL"
                           : cross == 768 && c.block_out_channels.size() == 4 ? "SD 1.5"
                           : cross == 1024                                    ? "SD 2.x"
                                                                              : "custom";
  std::string widths;
  for (const std::int64_t w : c.block_out_channels) widths += (widths.empty() ? "" : "/") + std::to_string(w);
  const std::string s = std::to_string(size);
  std::string what = name + " UNet (random weights, block widths " + widths + "), latent " + s + "x" + s + " (" +
                     std::to_string(8 * size) + "x" + std::to_string(8 * size) + " image), batch 2, context 2x77x" +
                     std::to_string(cross);
  if (c.text_time) {
    what += ", text_embeds 2x" +
            std::to_string(c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim) + ", time_ids 2x6";
  }
  return what;
}

std::optional<nlohmann::json> run_child(const std::string& component, const std::string& pin, const fs::path& folder,
                                        const std::string& dtype, int size, int runs,
                                        const std::vector<std::string>& sets) {
  std::ostringstream cmd;
  cmd << "'" << fs::read_symlink("/proc/self/exe").string() << "' --component " << component << " --child " << dtype
      << " --model '" << folder.string() << "' --size " << size << " --runs " << runs;
  if (!pin.empty()) cmd << " --device '" << pin << "'";
  for (const std::string& s : sets) cmd << " --set '" << s << "'";
  return bench::run_json_command(cmd.str(), "bench_unet: the " + dtype + " run");
}

}  // namespace

int main(int argc, char** argv) {
  std::string pin, model, child_dtype, dtypes = "f32,f16";
  std::string torch_device = "cpu", component = "unet", unet_config;
  std::string json_path;          // --json: every row and the peak (bench_report reads it)
  std::vector<std::string> sets;  // --set: run settings for NaNscope's rows
  int size = 64, runs = 2, rounds = 1;
  bool torch = true, peers = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      pin = argv[++i];
    else if (a == "--component" && i + 1 < argc)
      component = argv[++i];
    else if (a == "--config" && i + 1 < argc)
      unet_config = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      model = argv[++i];
    else if (a == "--size" && i + 1 < argc)
      size = std::atoi(argv[++i]);
    else if (a == "--runs" && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--dtypes" && i + 1 < argc)
      dtypes = argv[++i];
    else if (a == "--child" && i + 1 < argc)
      child_dtype = argv[++i];
    else if (a == "--no-torch")
      torch = false;
    else if (a == "--torch-device" && i + 1 < argc)
      torch_device = argv[++i];
    else if (a == "--no-peers")
      peers = false;
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--set" && i + 1 < argc)
      sets.emplace_back(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--component unet|vae] [--config sd15|sdxl] [--device D] [--model DIR] [--size LATENT] "
                   "[--runs N] [--rounds N] [--dtypes f32,f16] [--no-torch | --torch-device cuda] [--no-peers] "
                   "[--set KEY=VALUE ...] [--json FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    if (component != "unet" && component != "vae") throw ConfigError("--component takes unet or vae");
    const bool vae = component == "vae";
    if (vae && torch_device != "cpu") throw ConfigError("--component vae has a CPU baseline only");
    if (!unet_config.empty()) {
      if (unet_config != "sd15" && unet_config != "sdxl") throw ConfigError("--config takes sd15 or sdxl");
      if (vae) throw ConfigError("--config picks a UNet; --component vae has one VAE configuration");
      if (!model.empty()) {
        throw ConfigError(
            "--config picks the folder bench_unet makes; a --model folder's config.json says which UNet "
            "it is (make one with bench/make_sd15_unet.py --config sdxl DIR)");
      }
    }
    const bool sdxl = unet_config == "sdxl";
    if (!child_dtype.empty()) {
      const auto dt = parse_dtype(child_dtype);
      if (!dt) throw ConfigError("unknown dtype \"" + child_dtype + "\" (f32, f16, bf16)");
      return child(component, pin, model, *dt, size, sets, runs);
    }
    if (model.empty()) {
      const char* xdg = std::getenv("XDG_CACHE_HOME");
      const char* home = std::getenv("HOME");
      const fs::path cache = xdg && *xdg ? fs::path(xdg) : fs::path(home ? home : "/tmp") / ".cache";
      model = (cache / "nanscope" / "bench" / (vae ? "sd-vae" : sdxl ? "sdxl-unet" : "sd15-unet")).string();
      fs::create_directories(fs::path(model).parent_path());
      if (!fs::exists(fs::path(model) / "diffusion_pytorch_model.safetensors"))
        std::fprintf(stderr, "bench_unet: making the %s with random weights in %s (once; %s)\n",
                     vae    ? "SD VAE"
                     : sdxl ? "SDXL UNet"
                            : "SD 1.5 UNet",
                     model.c_str(),
                     vae    ? "335 MB"
                     : sdxl ? "10.3 GB"
                            : "3.4 GB");
      if (!bench::run_python_baseline(vae ? "make_sd_vae.py" : "make_sd15_unet.py",
                                      std::string(sdxl ? "--config sdxl " : "") + "'" + model + "' 0"))
        return 1;
    }
    struct Row {
      std::string name;
      nlohmann::json r;
      std::string dtype;
    };
    // The CPU's peak, measured before the runs and again after them (the larger counts).
    const double peak_before = torch_device == "cpu" ? bench::measure_peak_flops() : 0.0;
    std::vector<Row> rows;
    // Each result as soon as it is measured, on stderr: a run cut short (a time
    // limit on a lent GPU machine) keeps the rows it finished.
    const auto progress = [](const std::string& name, const nlohmann::json& r) {
      std::fprintf(stderr, "bench_unet: %s: %s\n", name.c_str(), r.dump().c_str());
      std::fflush(stderr);
    };
    std::vector<std::string> dtype_list;
    std::stringstream ss(dtypes);
    for (std::string dt; std::getline(ss, dt, ',');) dtype_list.push_back(dt);
    std::vector<std::string> cold_notes;  // configurations measured again because their first process built kernels
    // dtype -> each round's result (empty where that round's process failed).
    std::map<std::string, std::vector<std::optional<nlohmann::json>>> by_round;
    for (int round = 0; round < rounds; ++round) {
      for (const std::string& dt : dtype_list) {
        auto r = run_child(component, pin, model, dt, size, runs, sets);
        if (round == 0 && r && r->value("first_builds", 0) > 0) {
          char note[200];
          std::snprintf(note, sizeof note,
                        "NaNscope %s: its first process built %d programs (%.1f s) in its first call", dt.c_str(),
                        r->value("first_builds", 0), r->value("first_build_ms", 0.0) / 1000.0);
          std::fprintf(stderr, "bench_unet: %s; measuring again with the kernel cache warm\n", note);
          cold_notes.emplace_back(note);
          r = run_child(component, pin, model, dt, size, runs, sets);
        }
        if (r) progress("NaNscope " + dt + (rounds > 1 ? " round " + std::to_string(round + 1) : ""), *r);
        by_round[dt].push_back(std::move(r));
      }
    }
    // A dtype's row: its first measured round, with the medians over its rounds of the call, of the first call and
    // of first / call (each round's own ratio, the first-call target's), the largest peak RSS, and each round's
    // call (null where the round failed).
    for (const std::string& dt : dtype_list) {
      const auto& results = by_round[dt];
      const auto first_ok = std::find_if(results.begin(), results.end(), [](const auto& x) { return x.has_value(); });
      if (first_ok == results.end()) continue;
      nlohmann::json r = **first_ok;
      std::vector<double> calls, firsts, first_ratios;
      nlohmann::json call_rounds = nlohmann::json::array();
      double peak_rss = 0.0;
      for (const auto& x : results) {
        if (!x) {
          call_rounds.push_back(nullptr);
          continue;
        }
        const double call = x->at("call").get<double>(), first = x->at("first").get<double>();
        calls.push_back(call);
        firsts.push_back(first);
        first_ratios.push_back(first / call);
        call_rounds.push_back(call);
        peak_rss = std::max(peak_rss, x->at("peak_rss_mb").get<double>());
      }
      r["call"] = bench::median(calls);
      r["first"] = bench::median(firsts);
      r["first_ratio"] = bench::median(first_ratios);
      r["peak_rss_mb"] = peak_rss;
      r["call_rounds"] = call_rounds;
      rows.push_back({"NaNscope " + dt, r, dt});
    }
    // Baselines by dtype: on the CPU one f32 run; on CUDA f32 (TF32 off) and f16.
    std::map<std::string, nlohmann::json> base;
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    if (torch) {
      const bool cuda = torch_device != "cpu";
      for (const std::string& dt : cuda ? std::vector<std::string>{"f32", "f16"} : std::vector<std::string>{"f32"}) {
        auto r = bench::run_python_baseline(vae ? "torch_vae.py" : "torch_unet.py",
                                            "'" + model + "' " + std::to_string(size) + " " + std::to_string(runs) +
                                                " " + std::to_string(threads) + " '" + torch_device + "' " + dt);
        if (!r) continue;
        base[dt] = *r;
        rows.push_back({"diffusers " + dt +
                            (cuda ? " (PyTorch CUDA" + std::string(dt == "f32" ? ", no TF32)" : ")")
                                  : std::string(" (PyTorch CPU)")),
                        *r, dt});
        progress(rows.back().name, *r);
      }
    }
    // The CPU engines on the same model exported to ONNX (once, cached in the
    // folder), each checked against PyTorch's output before it is timed.
    std::vector<std::pair<std::string, std::size_t>> peer_rows;  // engine, row
    if (peers && torch_device == "cpu") {
      if (!fs::exists(bench::bench_venv_python())) {
        std::fprintf(stderr,
                     "bench_unet: no ONNX Runtime / OpenVINO rows: their venv .venv-bench is missing "
                     "(make it with tools/bench_venv.sh; --no-peers skips them)\n");
      } else if (const auto exported = bench::run_json_command(
                     bench::python_command("", "export_onnx.py",
                                           component + " '" + model + "' " + std::to_string(size)),
                     "bench_unet: the ONNX export (bench/export_onnx.py)")) {
        for (const auto& [engine, label] :
             {std::pair{"onnxruntime", "ONNX Runtime"}, std::pair{"openvino", "OpenVINO"}})
          if (auto r = bench::run_peer(engine, exported->at("dir").get<std::string>(), runs, threads)) {
            rows.push_back({std::string(label) + " f32 (CPU)", *r, "f32"});
            peer_rows.emplace_back(label, rows.size() - 1);
            progress(rows.back().name, *r);
          }
      }
    }
    // A row's baseline: PyTorch in the same dtype, else its f32.
    const auto base_for = [&](const std::string& dt) -> const nlohmann::json* {
      if (auto it = base.find(dt); it != base.end()) return &it->second;
      if (auto it = base.find("f32"); it != base.end()) return &it->second;
      return nullptr;
    };
    const std::string what = vae ? "SD VAE decode (random weights), latent 1x4x" + std::to_string(size) + "x" +
                                       std::to_string(size) + " (" + std::to_string(8 * size) + "x" +
                                       std::to_string(8 * size) + " image)"
                                 : describe_unet(model, size);
    // The call's FLOPs from the first NaNscope row (the same count for every engine); peak measured now.
    const double gflop = rows.empty() ? 0.0 : rows.front().r.value("gflop", 0.0);
    const double peak = torch_device == "cpu" ? std::max(peak_before, bench::measure_peak_flops()) : 0.0;
    // The CPU's measured peak (a GPU run's share of its peak is not measured here: the column is left out).
    const std::string peak_text =
        peak > 0 ? "; FP32 peak of this CPU " + std::to_string(std::lround(peak / 1e9)) + " GFLOP/s" : "";
    std::printf(
        "\nbench_unet: %s; %.0f GFLOP per call (multiply-adds x 2 of its GEMMs, convolutions and attention);\n"
        "%s%s; median of %d calls%s\n\n",
        what.c_str(), gflop,
        rows.empty() || !rows.front().r.contains("device") ? "" : rows.front().r["device"].get<std::string>().c_str(),
        peak_text.c_str(), runs,
        rounds > 1 ? (" (NaNscope: the median of " + std::to_string(rounds) + " rounds of them)").c_str() : "");
    if (!sets.empty()) {
      std::string list;
      for (const std::string& s : sets) list += (list.empty() ? "" : ", ") + s;
      std::printf("NaNscope's rows run with the settings %s.\n\n", list.c_str());
    }
    std::printf(
        "| | load s | first call s | call s | GFLOP/s |%s cores busy | RSS after load MB | peak RSS MB | "
        "PyTorch call / this |\n"
        "|---|---:|---:|---:|---:|%s---:|---:|---:|---:|\n",
        peak > 0 ? " % of peak |" : "", peak > 0 ? "---:|" : "");
    for (const auto& [name, r, dt] : rows) {
      const double call = r.at("call").get<double>();
      const nlohmann::json* b = base_for(dt);
      const double gfs = gflop / call;
      char share[32] = "";
      if (peak > 0) std::snprintf(share, sizeof share, " %.0f%% |", 100.0 * gfs * 1e9 / peak);
      std::printf("| %s | %.2f | %.2f | %.4f | %.1f |%s %.2f | %.0f | %.0f | %s |\n", name.c_str(),
                  r.at("load").get<double>(), r.at("first").get<double>(), call, gfs, share, r.value("cores", 0.0),
                  r.value("loaded_rss_mb", 0.0), r.at("peak_rss_mb").get<double>(),
                  b ? (std::to_string(b->at("call").get<double>() / call).substr(0, 5) + "x").c_str() : "");
    }
    // Each round's f16 / f32 ratio: the two ran minutes apart, where the medians of separate rounds may not.
    const auto row_of = [&](const char* name) {
      const auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.name == name; });
      return it == rows.end() ? nullptr : &it->r;
    };
    if (const nlohmann::json* a = row_of("NaNscope f16"), *b = row_of("NaNscope f32"); a && b) {
      std::string each;
      std::vector<double> ratios;
      const std::vector<std::optional<double>> by_round_ratio = bench::round_ratios(*a, *b);
      for (std::size_t i = 0; i < by_round_ratio.size(); ++i) {
        char t[40];
        if (by_round_ratio[i]) {
          ratios.push_back(*by_round_ratio[i]);
          std::snprintf(t, sizeof t, "%s%.2fx", i ? ", " : "", ratios.back());
        } else {
          std::snprintf(t, sizeof t, "%sround %zu failed", i ? ", " : "", i + 1);
        }
        each += t;
      }
      if (!ratios.empty())
        std::printf("\nf16 / f32 call time, round by round (%d rounds, the dtypes taking turns): %s; median %.2fx.\n",
                    rounds, each.c_str(), bench::median(ratios));
    }
    // NaNscope f32 against the fastest peer and the peer with the lowest peak RSS.
    const nlohmann::json* ours = row_of("NaNscope f32");
    const auto best_peer = [&](const char* key) -> const std::pair<std::string, std::size_t>* {
      const std::pair<std::string, std::size_t>* best = nullptr;
      for (const auto& p : peer_rows)
        if (!best || rows[p.second].r.at(key).get<double>() < rows[best->second].r.at(key).get<double>()) best = &p;
      return best;
    };
    if (ours && !peer_rows.empty()) {
      const auto* fastest = best_peer("call");
      const auto* leanest = best_peer("peak_rss_mb");
      const double peer_call = rows[fastest->second].r.at("call").get<double>();
      const double our_call = ours->at("call").get<double>();
      const double peer_rss = rows[leanest->second].r.at("peak_rss_mb").get<double>();
      const double our_rss = ours->at("peak_rss_mb").get<double>();
      std::printf(
          "\nNaNscope f32 is %.2fx the speed of the fastest peer (%s: %.4f s a call against %.4f s; > 1: faster).\n",
          peer_call / our_call, fastest->first.c_str(), peer_call, our_call);
      std::printf(
          "NaNscope f32's peak RSS is %.2fx the lowest peer's (%s: %.0f MB against %.0f MB; <= 1: at or below).\n",
          our_rss / peer_rss, leanest->first.c_str(), peer_rss, our_rss);
    }
    std::printf(
        "\n(cores busy: CPU time / wall time over the timed calls; PyTorch / this > 1 means NaNscope is "
        "faster.)\n"
        "GFLOP/s and %% of peak count the direct convolution's multiply-adds for every engine; NaNscope on a CPU "
        "runs the 3x3 stride-1 convolutions as Winograd F(4x4, 3x3),\nwhich does 4x fewer of them "
        "(NANSCOPE_WINOGRAD=0: direct), so its rate is an effective one and may pass the peak.\n");
    for (const std::string& note : cold_notes)
      std::printf("%s; the row is a second process's, with the kernel cache warm (first call: warm cache).\n",
                  note.c_str());
    if (!peer_rows.empty()) {
      std::string errors;
      for (const auto& [engine, row] : peer_rows) {
        char e[160];
        std::snprintf(e, sizeof e, "%s%s %.1e", errors.empty() ? "" : ", ", rows[row].r.value("engine", engine).c_str(),
                      rows[row].r.value("rel_l2", 0.0));
        errors += e;
      }
      std::printf(
          "Peers: the same model exported to ONNX (opset 17, static shapes; bench/export_onnx.py), %u threads each,\n"
          "OpenVINO with inference precision f32; relative L2 error of their output against PyTorch's: %s.\n",
          threads, errors.c_str());
    }
    if (torch_device == "cpu") {
      std::printf(
          "\nf16 on a device without cl_khr_fp16 stores f16 and computes in f32 (conversions on every load/store);\n"
          "PyTorch 1.13 has no f16 convolution on the CPU, so its baseline is f32.\n");
    } else {
      std::printf(
          "\nf16: f16 storage; NVIDIA GPUs from compute capability 8.0 run its GEMMs, convolutions and attention on\n"
          "the tensor cores (f32 accumulation, docs/gpu.md), the rest computes in f32. PyTorch f16: cuBLAS/cuDNN and\n"
          "SDPA.\n");
    }
    if (torch && torch_device == "cpu") std::printf("%s.\n", bench::best_openblas_coretype().report.c_str());

    // Rows by engine: "nanscope" (name "NaNscope DTYPE"), "torch" and "peer", each with the child's measurements.
    nlohmann::json out = {{"bench", "unet"},
                          {"component", component},
                          {"config", vae                            ? "sd-vae"
                                     : what.rfind("SDXL", 0) == 0   ? "sdxl"
                                     : what.rfind("SD 1.5", 0) == 0 ? "sd15"
                                                                    : "other"},
                          {"size", size},
                          {"runs", runs},
                          {"rounds", rounds},
                          {"what", what},
                          {"gflop", gflop},
                          {"peak_gflops", peak / 1e9},
                          {"cpus", threads},
                          {"torch_device", torch_device},
                          {"settings", sets},
                          {"rows", nlohmann::json::array()}};
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const bool peer = std::any_of(peer_rows.begin(), peer_rows.end(), [&](const auto& p) { return p.second == i; });
      nlohmann::json row = rows[i].r;
      row["name"] = rows[i].name;
      row["dtype"] = rows[i].dtype;
      row["engine"] = peer ? "peer" : rows[i].name.rfind("NaNscope", 0) == 0 ? "nanscope" : "torch";
      out["rows"].push_back(row);
    }
    if (!bench::write_json_file(json_path, out)) return 1;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_unet: %s\n", e.what());
    return 1;
  }
}
