// The OpenCL backend's programs: which build options each op's program takes
// at a precision (the option registry), the variants a run's calls take and
// the kernel plan of a run (report R4's cold-start estimate), `nanscope-cli
// precompile`'s set, and building many programs at once (helper processes
// where the driver allows). The rest of the backend is opencl_backend.cpp.
#include "backend/opencl/opencl_backend.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/opencl/cache_inventory.hpp"
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/kernel_builder.hpp"
#include "backend/opencl/kernel_sources.hpp"
#include "backend/opencl/launch_util.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::opencl {

namespace {

struct OptionsRegistry {
  std::mutex mutex;
  std::map<std::string, ProgramOptionsFn> fns;
  std::map<std::string, ProgramMoreVariantsFn> more;
};

OptionsRegistry& options_registry() {
  static OptionsRegistry r{
      {},
      [] {
        std::map<std::string, ProgramOptionsFn> init;
        // The GEMM programs add their tuning -D set (gemm.hpp); conv2d builds with the same options.
        init["matmul"] = [](OpenClBackend& be, const Precision& p) { return gemm::options(be, p); };
        init["conv2d"] = [](OpenClBackend& be, const Precision& p) { return gemm::options(be, p); };
        // Data movement and elementwise: one program per storage dtype (launch_util.hpp; activations: activation.cpp).
        for (const char* name : {"elementwise", "shape_ops", "timestep_embedding"}) {
          init[name] = [](OpenClBackend& be, const Precision& p) {
            return be.precision_options(detail::storage_only(p.dtype));
          };
        }
        return init;
      }(),
      {}};
  return r;
}

}  // namespace

void register_program_options(const std::string& program, ProgramOptionsFn fn) {
  auto& r = options_registry();
  std::lock_guard lock(r.mutex);
  r.fns[program] = fn;
}

void register_program_more_variants(const std::string& program, ProgramMoreVariantsFn fn) {
  auto& r = options_registry();
  std::lock_guard lock(r.mutex);
  r.more[program] = fn;
}

namespace {
// The programs runs use: not common.cl (prepended to all) nor the half-unit
// probe (half_units.cpp builds it once per device, outside any run's plan).
bool runs_ops(const std::string& program) { return program != "common" && program != "half_probe"; }
// Every storage dtype x accumulation x softmax precision: what precompile builds each program in.
std::vector<Precision> precision_grid() {
  std::vector<Precision> out;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (Accumulate acc : {Accumulate::f32, Accumulate::native}) {
      for (SoftmaxPrecision sm : {SoftmaxPrecision::f32, SoftmaxPrecision::native}) out.push_back({dt, acc, sm});
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> OpenClBackend::precompile_variants(const std::string& program) {
  return precompile_variants(program, call_variants(precompile_calls()));
}

std::vector<std::string> OpenClBackend::precompile_variants(const std::string& program, const ProgramVariants& shaped) {
  // Every storage dtype x accumulation x softmax precision, through the same
  // option function the op uses at run time; identical option strings collapse
  // (f32 storage, and programs whose options ignore accumulation or softmax).
  ProgramOptionsFn fn = nullptr;
  ProgramMoreVariantsFn more = nullptr;
  {
    auto& r = options_registry();
    std::lock_guard lock(r.mutex);
    if (auto it = r.fns.find(program); it != r.fns.end()) fn = it->second;
    if (auto it = r.more.find(program); it != r.more.end()) more = it->second;
  }
  std::set<std::string> seen;
  std::vector<std::string> out;
  // The variants the shapes of precompile_calls() take (on GPUs: tiles, tensor-core blocks, flash tiles).
  if (const auto it = shaped.find(program); it != shaped.end()) {
    for (const std::string& o : it->second) {
      if (seen.insert(o).second) out.push_back(o);
    }
  }
  for (const Precision& p : precision_grid()) {
    std::string o = fn ? fn(*this, p) : precision_options(p);
    if (seen.insert(o).second) out.push_back(std::move(o));
    if (more) {
      for (std::string& m : more(*this, p)) {
        if (seen.insert(m).second) out.push_back(std::move(m));
      }
    }
  }
  return out;
}

std::string OpenClBackend::program_options(const std::string& program, const Precision& p) {
  ProgramOptionsFn fn = nullptr;
  {
    auto& r = options_registry();
    std::lock_guard lock(r.mutex);
    if (auto it = r.fns.find(program); it != r.fns.end()) fn = it->second;
  }
  return fn ? fn(*this, p) : precision_options(p);
}

void add_variant(ProgramVariants& variants, const std::string& program, std::string options) {
  auto& v = variants[program];
  if (std::find(v.begin(), v.end(), options) == v.end()) v.push_back(std::move(options));
}

ProgramVariants OpenClBackend::call_variants(const KernelCalls& calls) {
  ProgramVariants out;
  for (const char* program : {"matmul", "conv2d", "attention", "softmax"}) out[program];
  const auto add = [&out](const char* program, std::string options) { add_variant(out, program, std::move(options)); };
  for (const KernelCalls::Gemm& g : calls.gemm)
    add("matmul", gemm::run_options(*this, g.precision, g.batch, g.m, g.n, g.k));
  for (const KernelCalls::Conv& c : calls.conv) {
    // The input's size as far as the kernel choice needs it (padding keeps oh * stride for the 3x3 convolutions).
    const gemm::ConvShape s{
        c.images, c.in_channels, c.oh * c.stride, c.ow * c.stride, c.out_channels, c.kh, c.kw, c.stride, 0, c.oh, c.ow};
    add("matmul", gemm::conv_run_options(*this, c.precision, s));
    // The panel path's im2col (on CPUs only where conv_cpu does not run: planned either way).
    if (gemm::uses_panels(*this, c.precision)) add("conv2d", gemm::options(*this, c.precision));
    // Winograd: its transforms are in that program, its 36 products an f32 GEMM.
    if (gemm::runs_winograd(*this, c.precision, s)) add("matmul", gemm::options(*this, gemm::kWinogradProduct));
  }
  attention_call_variants(*this, calls, out);
  return out;
}

KernelCalls precompile_calls() {
  KernelCalls calls;
  calls.recorded = true;
  for (const Precision& p : precision_grid()) {
    // A GEMM too small to fill a GPU's compute units with the large tiles, one the tensor cores' small
    // blocks take, and a large one (an SD 1.5 feed-forward layer at 1024x1024).
    for (const auto& [m, n, k] : {std::array<std::int64_t, 3>{16, 16, 16}, {64, 64, 64}, {32768, 2560, 640}}) {
      KernelCalls::add(calls.gemm, {p, 1, m, n, k});
    }
    // 3x3 convolutions: a first layer's 4 input channels (never the tensor cores), and 320 channels at the
    // UNet's 64x64 (512x512) and a VAE's 256 channels at 1024x1024 (stride 1); a downsampler (stride 2).
    for (const auto& [c, o, size, stride] :
         {std::array<std::int64_t, 4>{4, 320, 64, 1}, {320, 320, 64, 1}, {256, 256, 1024, 1}, {320, 320, 64, 2}}) {
      const std::int64_t out_size = size / stride;
      KernelCalls::add(calls.conv, {p, 2, o, out_size * out_size, c * 9, c, 3, 3, stride, out_size, out_size});
    }
    // Attention in every implementation at the head sizes of the models NaNscope runs: SD 1.x 40, 80
    // and 160; SD 2.x, SDXL and the CLIP text encoders 64 (the encoders causal); the SD VAE's one
    // 512-wide head; the embedded model's 16 (UNet), 32 (text encoder) and 64 (VAE); with 77 and with
    // 4096 queries (the materialised path's GEMM tiles follow the query count).
    for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::bmm, AttentionImpl::sliced}) {
      for (std::int64_t d : {16, 32, 40, 64, 80, 160, 512}) {
        for (std::int64_t sq : {77, 4096}) {
          for (bool causal : {false, true}) {
            KernelCalls::add(calls.attention, {p, 2, 8, sq, causal ? sq : 4096, d, d, causal, impl});
          }
        }
      }
    }
  }
  return calls;
}

KernelPlan OpenClBackend::plan_kernels(std::span<const Precision> precisions, const KernelCalls& calls) {
  // Every program in each precision (the same option functions the ops use);
  // f32 storage always: the sampler's state, the latent and the inspector's maps are f32.
  std::vector<Precision> ps(precisions.begin(), precisions.end());
  ps.push_back(Precision{DType::f32, Accumulate::f32, SoftmaxPrecision::f32});
  // With a dry run's calls, the GEMM, convolution and attention programs are
  // the variants those calls take (the ops' own choice functions): on GPUs the
  // tiles, tensor cores and flash tiles follow the shapes, and a run without
  // materialised attention needs no softmax program.
  ProgramVariants from_calls;
  if (calls.recorded) from_calls = call_variants(calls);
  const BuildHistory history = build_history(programs_->dir(), info_);
  // With no past builds on the device: what a program took elsewhere. PoCL on a 2-core CPU (bench/README.md,
  // the cold-start sections) built matmul in 3.5-4.6 s, attention in 2.3-3.4 s and each small program in
  // 0.4-1.8 s (1 s each assumed before: "about 5.5 s" for a cold start that took 8-9 s); NVIDIA's compiler
  // took about 0.75 s per program on an H200.
  const auto assumed_ms = [this](const std::string& program) {
    if (info_.kind == DeviceKind::gpu || info_.kind == DeviceKind::accelerator) return 1000.0;
    return program == "matmul" ? 4000.0 : program == "attention" ? 3000.0 : 800.0;
  };
  KernelPlan plan;
  std::set<std::string> seen;
  std::map<std::string, double> pending;
  for (const auto& k : kernel_sources()) {
    if (!runs_ops(k.name)) continue;
    std::vector<std::string> variants;
    if (const auto it = from_calls.find(k.name); it != from_calls.end()) {
      variants = it->second;
    } else {
      for (const Precision& p : ps) variants.push_back(program_options(k.name, p));
    }
    for (std::string& o : variants) {
      if (!seen.insert(k.name + "|" + o).second) continue;
      KernelPlanItem item{k.name, std::move(o), false, 0.0};
      item.cached = programs_->ready(item.program, item.options);
      if (!item.cached) {
        item.estimate_ms = history.estimate_ms(item.program, item.options, assumed_ms(item.program));
        pending[item.program + "|" + item.options] = item.estimate_ms;
        plan.estimate_ms += item.estimate_ms;
        ++plan.to_build;
      }
      plan.items.push_back(std::move(item));
    }
  }
  plan.history_samples = history.samples;
  // Builds side by side take the sum over the streams, or the longest build when that is longer.
  plan.streams = build_streams(plan.to_build);
  double longest = 0.0;
  for (const auto& [variant, ms] : pending) longest = std::max(longest, ms);
  plan.estimate_ms = std::max(plan.estimate_ms / plan.streams, longest);
  programs_->set_plan(pending, plan.streams);
  if (plan.to_build > 0 && build_listener_) {
    KernelBuildEvent e;
    e.plan = true;
    e.plan_count = static_cast<int>(plan.to_build);
    e.plan_left_ms = plan.estimate_ms;
    build_listener_(e);
  }
  return plan;
}

namespace {
// Builds side by side: one per core, at most 4.
unsigned build_cores() { return std::clamp(std::thread::hardware_concurrency(), 1u, 4u); }
}  // namespace

unsigned OpenClBackend::build_streams(std::size_t jobs) const {
  // Helper processes (kernel_builder.hpp), one per core (at most 4), when there are
  // two or more builds. Not on a simulator: Oclgrind builds nothing worth a
  // process, and its tests check this process's builds. Without helpers the
  // builds run on threads here, but PoCL compiles one program at a time per process.
  const unsigned streams = static_cast<unsigned>(std::min<std::size_t>(build_cores(), jobs));
  if (streams < 2 || info_.kind == DeviceKind::simulator || programs_->dir().empty() || kernel_builder_path().empty()) {
    return 1;
  }
  return streams;
}

std::string OpenClBackend::binary_specializations(const std::string& program) const {
  // On PoCL's CPU device these programs' kernels run one work-item per group
  // (local size 1, no global offset, a grid PoCL calls small): the version
  // PoCL would compile at their first launch goes into the binary a helper
  // builds (kernel_builder.hpp). Their other kernels are compiled for it too,
  // unused; still, the embedded model's cold start went 11.9 -> 11.3 s and its
  // first step 3.1 -> 0.75 s (2-core VM). Not for the element-wise programs,
  // whose work-group sizes follow the tensor sizes (cpu_group_size).
  // With PoCL's launch specialization off (device.hpp, pocl_specializes_launches: the default) the
  // launches run the binary's generic functions, built for groups of one where the kernel says so
  // (common.cl CPU_ONE_ITEM): nothing more to build.
  if (style_ != KernelStyle::cpu || info_.platform_name != "Portable Computing Language" ||
      !pocl_specializes_launches()) {
    return {};
  }
  static constexpr std::string_view kSingleItem[] = {"matmul", "conv2d", "attention", "group_norm", "layer_norm"};
  return std::find(std::begin(kSingleItem), std::end(kSingleItem), program) != std::end(kSingleItem)
             ? "1-1-1-goffs0-smallgrid"
             : "";
}

std::vector<BuildRecord> OpenClBackend::build_in_parallel(std::vector<std::pair<std::string, std::string>> jobs) {
  // Longest first: the longest build alone can be most of a cold start (matmul
  // and attention on PoCL). By the build times recorded on this device, else by
  // source size (the two largest sources are the two longest builds there).
  const BuildHistory history = build_history(programs_->dir(), info_);
  std::map<std::pair<std::string, std::string>, double> cost;
  for (const auto& j : jobs) {
    double c = 0.0;
    if (history.samples) {
      c = history.estimate_ms(j.first, j.second, history.mean_ms);
    } else {
      try {
        c = static_cast<double>(ProgramCache::full_source(j.first).size());
      } catch (const Error&) {
        // Not embedded: its build fails at once and reports it.
      }
    }
    cost[j] = c;
  }
  std::stable_sort(jobs.begin(), jobs.end(), [&](const auto& a, const auto& b) { return cost[a] > cost[b]; });

  // Each stream hands its builds to a helper process when there are helpers
  // (build_streams), else builds here (on threads, at most 4); a stream whose
  // helper fails builds here from then on. A failed build does not stop the
  // others; it comes back as a failed record.
  const unsigned helper_streams = build_streams(jobs.size());
  const unsigned streams =
      helper_streams > 1 ? helper_streams : static_cast<unsigned>(std::min<std::size_t>(build_cores(), jobs.size()));
  std::vector<std::unique_ptr<KernelBuilderProcess>> helpers(streams);
  if (helper_streams > 1) {
    const std::string exe = kernel_builder_path();
    for (auto& h : helpers) {
      std::string why;
      h = KernelBuilderProcess::start(exe, info_, programs_->dir(), why);
      if (!h) {
        log::debug("kernel builds stay in this process: {}", why);
        break;
      }
    }
  }
  std::atomic<std::size_t> next{0};
  std::mutex failed_mutex;
  std::vector<BuildRecord> failed;
  auto work = [&](KernelBuilderProcess* helper) {
    ProgramCache::RemoteBuild remote;
    if (helper) {
      remote = [this, helper](const std::string& program, const std::string& options, const std::string& key) {
        return helper->build(program, options, key, binary_specializations(program));
      };
    }
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        programs_->get(jobs[i].first, jobs[i].second, remote);
      } catch (const Error& e) {
        BuildRecord r{jobs[i].first, jobs[i].second, false, 0.0, "build failed", true, e.what()};
        r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::lock_guard lock(failed_mutex);
        failed.push_back(std::move(r));
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < streams; ++t) threads.emplace_back(work, helpers[t].get());
  work(streams ? helpers[0].get() : nullptr);
  for (auto& t : threads) t.join();
  return failed;
}

void OpenClBackend::build_planned(const KernelPlan& plan) {
  std::vector<std::pair<std::string, std::string>> jobs;
  for (const KernelPlanItem& item : plan.items) {
    if (!item.cached) jobs.emplace_back(item.program, item.options);
  }
  for (const BuildRecord& r : build_in_parallel(jobs)) {
    log::debug("planned build of {} failed (the op that needs it reports it): {}", r.program, r.error);
  }
}

std::vector<BuildRecord> OpenClBackend::precompile() {
  std::vector<std::pair<std::string, std::string>> jobs;
  const ProgramVariants shaped = call_variants(precompile_calls());
  for (const auto& k : kernel_sources()) {
    if (!runs_ops(k.name)) continue;
    for (auto& o : precompile_variants(k.name, shaped)) jobs.emplace_back(k.name, std::move(o));
  }
  const std::size_t before = programs_->records().size();
  std::vector<BuildRecord> failed = build_in_parallel(jobs);
  auto all = programs_->records();
  std::vector<BuildRecord> out(all.begin() + static_cast<std::ptrdiff_t>(std::min(before, all.size())), all.end());
  for (auto& r : failed) out.push_back(std::move(r));
  std::sort(out.begin(), out.end(), [](const BuildRecord& a, const BuildRecord& b) {
    return a.program != b.program ? a.program < b.program : a.options < b.options;
  });
  return out;
}

}  // namespace nanscope::opencl
