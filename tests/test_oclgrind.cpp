// test_oclgrind: the GPU kernels of every op family under Oclgrind, the OpenCL
// simulator that checks every memory access and work-group (docs/oclgrind.md).
//
// The op suite's own cases (tests/ops/*.cpp, compiled into this executable too)
// run on the Oclgrind device with the GPU kernel family
// (KernelStyleChoice::gpu), limited to small shapes, and are compared with the
// reference backend exactly as the op suite does. Oclgrind's checks are on:
// reads and writes outside a buffer (every buffer has its tensor's exact size
// on a simulator), data races in local and global memory (OCLGRIND_DATA_RACES),
// barrier divergence, and API misuse (OCLGRIND_CHECK_API). What Oclgrind reports
// goes to a log file per backend (OCLGRIND_LOG); a test during which the log
// grew fails with the report. OclgrindCpuFamily runs the CPU family's panel
// kernels (what PoCL runs: conv_cpu's gather, the packed GEMM) the same way,
// OclgrindInspector the inspector's reductions and preview in both families,
// OclgrindTensorCores the tensor-core kernels with mma.sync emulated.
//
// OclgrindSelfTest runs deliberately broken kernels (a read past the end of a
// buffer, a race on local memory, a barrier only half the work-group reaches)
// and requires each to be reported and to fail a test, so this suite cannot
// pass by checking nothing. OclgrindCoverage requires at least one small case
// of every op the op suite has.
//
// Without Oclgrind installed the tests skip (under $CI they fail). Any
// --gtest_filter replaces the default selection (op cases, self-test, coverage).

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "backend/device.hpp"
#include "backend/opencl/cl_check.hpp"
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/op_case.hpp"
#include "support/oracle.hpp"

namespace nanscope::test {
namespace {

// Small shapes only: Oclgrind interprets every instruction of every work-item
// and checks every access (unoptimised code: about 10^6 instructions a second
// here). Inputs of at most this many elements, and at most this much arithmetic.
constexpr std::int64_t kMaxInputElements = 16384;
constexpr double kMaxFlops = 4e6;

// --- Oclgrind's reports ---

struct OclgrindLog {
  std::string device;
  std::filesystem::path path;
  std::uintmax_t read = 0;  // bytes already looked at
};

std::map<const Backend*, OclgrindLog>& logs() {
  static std::map<const Backend*, OclgrindLog> l;
  return l;
}

const TempDir& log_dir() {
  static const TempDir dir;
  return dir;
}

// What Oclgrind wrote to the backend's log since the last call.
std::string new_reports(OclgrindLog& log) {
  std::ifstream in(log.path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto end = static_cast<std::uintmax_t>(in.tellg());
  if (end <= log.read) return {};
  in.seekg(static_cast<std::streamoff>(log.read));
  std::string text(end - log.read, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  log.read = end;
  return text;
}

// Fails the current test for every backend whose Oclgrind log grew: the
// listener below calls it after each test, the self-test on purpose.
void expect_no_new_reports() {
  constexpr std::size_t kShown = 6000;
  for (auto& [be, log] : logs()) {
    const std::string text = new_reports(log);
    if (text.find_first_not_of(" \n\t") == std::string::npos) continue;
    ADD_FAILURE() << "Oclgrind reported errors on \"" << log.device << "\" while this test ran (" << text.size()
                  << " bytes of report" << (text.size() > kShown ? ", the first shown" : "") << "):\n"
                  << text.substr(0, kShown);
  }
}

class ReportChecker : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& /*test*/) override { expect_no_new_reports(); }
};

// Oclgrind reads these when a context is created; the checks are the point of
// this executable, so they are set whatever the environment says.
void configure_oclgrind() {
  ::setenv("OCLGRIND_CHECK_API", "1", 1);
  ::setenv("OCLGRIND_DATA_RACES", "1", 1);
  // Oclgrind stops reporting after this many errors in the process (default 1000).
  ::setenv("OCLGRIND_MAX_ERRORS", "1000000", 1);
  // The local memory of the GPUs the kernels are tiled for (48 KiB on NVIDIA; Oclgrind's
  // default is 32 KiB), so attention_flash's tiles (up to 46 KiB at head size 160) run here
  // instead of falling back to attention_fused.
  ::setenv("OCLGRIND_LOCAL_MEM_SIZE", "49152", 1);
}

// A simulator backend with its own Oclgrind log: the GPU kernels (the op
// suite's), or the CPU family's (OclgrindCpuFamily).
// attention_row_blocks, attention_key_chunk: BackendOptions' CPU flash attention blocking (0: by the call).
std::unique_ptr<Backend> make_checked_backend(const DeviceInfo& d, KernelStyleChoice style,
                                              bool emulate_tensor_cores = false, int attention_row_blocks = 0,
                                              int attention_key_chunk = 0) {
  const auto path = log_dir().path() / ("oclgrind-" + std::to_string(logs().size()) + ".log");
  ::setenv("OCLGRIND_LOG", path.c_str(), 1);  // read once, by the context the backend creates
  BackendOptions o;
  o.kernel_style = style;
  o.emulate_tensor_cores = emulate_tensor_cores;
  o.profile = emulate_tensor_cores;  // OclgrindTensorCores checks which kernels ran
  o.attention_cpu_row_blocks = attention_row_blocks;
  o.attention_cpu_key_chunk = attention_key_chunk;
  std::unique_ptr<Backend> be = make_backend(d, o);
  ::unsetenv("OCLGRIND_LOG");
  logs()[be.get()] = {d.name, path, 0};
  return be;
}

// --- which op cases run here ---

struct Selection {
  std::set<std::string> offered_ops, kept_ops;
  std::set<std::string> offered, kept;  // case names (gtest may register a list twice)
};

Selection& selection() {
  static Selection s;
  return s;
}

// Input elements of a case, built once per shape (every precision has the same shape).
std::int64_t input_elements(const OpCase& c) {
  static std::map<std::string, std::int64_t> cache;
  const std::string key = c.op + "|" + c.desc;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Rng rng(c.seed());
  std::int64_t n = 0;
  for (const HostTensor& t : c.build(rng, c.precision)) n += t.numel();
  return cache[key] = n;
}

// One kernel path per op: the op, and for attention its impl and slice size.
std::string variant(const OpCase& c) {
  std::string v = c.op;
  if (c.uses_attention) {
    v += " " + std::string(attention_impl_name(c.attention.impl)) + " " + std::to_string(c.attention.slice_size);
  }
  return v;
}

// The cases that run here: small shapes only. Per kernel path, the smallest
// shape runs in every precision of the op's matrix (each -D variant of the
// kernels); each other small shape (tails, strides, broadcasts, masks) runs
// once, alternately in f32 and in f16 storage with f32 accumulation (the
// GPU-tiled kernels reading half through vload_half), from small to large.
std::vector<OpCasePtr> small_cases(std::vector<OpCasePtr> cases) {
  Selection& sel = selection();
  std::map<std::string, std::vector<std::pair<std::int64_t, std::string>>> shapes;  // variant -> (elements, desc)
  std::vector<OpCasePtr> small;
  for (auto& c : cases) {
    sel.offered_ops.insert(c->op);
    sel.offered.insert(c->name());
    const std::int64_t n = input_elements(*c);
    if (!c->on_reference || n > kMaxInputElements || c->flops > kMaxFlops) continue;
    auto& s = shapes[variant(*c)];
    if (std::find(s.begin(), s.end(), std::make_pair(n, c->desc)) == s.end()) s.emplace_back(n, c->desc);
    small.push_back(std::move(c));
  }
  for (auto& [v, s] : shapes)
    std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const Precision f16{DType::f16, Accumulate::f32, SoftmaxPrecision::f32};
  std::vector<OpCasePtr> kept;
  for (auto& c : small) {
    const auto& s = shapes[variant(*c)];
    const auto rank = std::find_if(s.begin(), s.end(), [&](const auto& e) { return e.second == c->desc; }) - s.begin();
    const Precision& p = c->precision;
    const bool is_f16 = p.dtype == f16.dtype && p.accumulate == f16.accumulate && p.softmax == f16.softmax;
    bool wanted = rank == 0 || (rank % 2 == 1 ? p.dtype == DType::f32 : is_f16);
    // Sliced attention launches the bmm path's kernels (GEMM, softmax) once per slice of
    // heads: bmm runs their precision matrix and shapes here already. Sliced runs the
    // smallest shape in f32 and f16, and its causal shape where the last slice is partial
    // (the per-slice offsets of the mask and of every buffer are what it adds). Two thirds
    // of this executable's time went to sliced cases before (257 of 490 s in CI).
    if (c->uses_attention && c->attention.impl == AttentionImpl::sliced) {
      const bool causal = c->desc.find("causal") != std::string::npos;
      wanted = rank == 0 ? p.dtype == DType::f32 || is_f16 : causal && c->attention.slice_size > 1 && is_f16;
    }
    if (!wanted) continue;
    sel.kept_ops.insert(c->op);
    sel.kept.insert(c->name());
    kept.push_back(std::move(c));
  }
  return kept;
}

// --- the tests of this file ---

Backend* oclgrind_backend() {
  const auto& all = opencl_backends();
  return all.empty() ? nullptr : all.front();
}

#define REQUIRE_OCLGRIND()                   \
  do {                                       \
    if (!oclgrind_backend()) {               \
      if (in_ci()) {                         \
        FAIL() << no_opencl_message();       \
      } else {                               \
        GTEST_SKIP() << no_opencl_message(); \
      }                                      \
    }                                        \
  } while (0)

TEST(OclgrindCoverage, EveryOpOfTheOpSuiteHasSmallCases) {
  REQUIRE_OCLGRIND();
  const Selection& s = selection();
  ASSERT_FALSE(s.offered_ops.empty()) << "no op case was registered";
  for (const std::string& op : s.offered_ops) {
    EXPECT_TRUE(s.kept_ops.count(op)) << op << " has no case with at most " << kMaxInputElements
                                      << " input elements and " << kMaxFlops << " flops: add a small one to its test";
  }
  std::printf("[oclgrind] %zu of the op suite's %zu cases, %zu ops, on \"%s\"; reports in %s\n", s.kept.size(),
              s.offered.size(), s.kept_ops.size(), oclgrind_backend()->device().name.c_str(), log_dir().path().c_str());
}

TEST(OclgrindCoverage, TheSimulatorRunsTheGpuKernelsOnExactBuffers) {
  REQUIRE_OCLGRIND();
  auto& be = dynamic_cast<opencl::OpenClBackend&>(*oclgrind_backend());
  EXPECT_EQ(be.device().kind, DeviceKind::simulator);
  EXPECT_EQ(be.kernel_style(), opencl::KernelStyle::gpu);
  // A 3-float tensor is a 12-byte buffer: a read of element 3 is outside it.
  const Tensor t = be.empty({3}, DType::f32);
  size_t bytes = 0;
  NS_CL_CHECK(clGetMemObjectInfo(be.buffer(t), CL_MEM_SIZE, sizeof(bytes), &bytes, nullptr));
  EXPECT_EQ(bytes, 12u);
  std::printf("[oclgrind] \"%s\" (%s): cl_khr_fp16 %s\n", be.device().name.c_str(), be.device().driver_version.c_str(),
              be.device().fp16 ? "yes" : "no (half storage through vload_half/vstore_half, native half emulated)");
}

// linear(x, w, bias) at precision p on a backend, downloaded.
HostTensor linear_on(Backend& on, const Precision& p, const HostTensor& x, const HostTensor& w,
                     const HostTensor& bias) {
  const Tensor tb = on.upload(bias);
  return on.download(ops::linear(make_context(on, p), on.upload(x), on.upload(w), &tb));
}

// The CPU family's panel kernels (what PoCL runs) under the simulator's checks:
// conv_cpu's gather from the image into local memory, the column panels, the
// packed GEMM with k-block carries. Each work-item owns its local memory (one
// work-item per group, on any device: a driver-chosen group would share it).
TEST(OclgrindCpuFamily, PanelKernelsStayInBoundsAndMatchTheReference) {
  REQUIRE_OCLGRIND();
  const std::unique_ptr<Backend> owned = make_checked_backend(oclgrind_backend()->device(), KernelStyleChoice::cpu);
  auto& be = dynamic_cast<opencl::OpenClBackend&>(*owned);
  ASSERT_EQ(be.kernel_style(), opencl::KernelStyle::cpu);
  Backend& ref = reference_backend();
  constexpr Tolerance kF32Sums{1e-9, 1e-5};  // f32 sums against the reference's double ones
  struct Conv {
    std::int64_t c, h, w, o, stride;
    bool in_kernel;  // conv_cpu; else the column panels and gemm_cpu_direct_a
    DType dtype;     // f16: conv_cpu converts the weight rows in its inner loop (k 36: two 16s and a tail of 4)
  };
  for (const Conv& g : {Conv{4, 17, 16, 8, 1, true, DType::f32}, Conv{3, 6, 32, 7, 1, true, DType::f32},
                        Conv{6, 5, 7, 9, 2, false, DType::f32}, Conv{4, 17, 16, 8, 1, true, DType::f16}}) {
    const std::int64_t oh = (g.h + 2 - 3) / g.stride + 1, ow = (g.w + 2 - 3) / g.stride + 1;
    const Precision p{g.dtype};
    const std::string what = "conv " + std::to_string(g.c) + "x" + std::to_string(g.h) + "x" + std::to_string(g.w) +
                             " stride " + std::to_string(g.stride) + " " + p.describe();
    EXPECT_EQ(opencl::gemm::runs_cpu_conv(be, p, {2, g.c, g.h, g.w, g.o, 3, 3, g.stride, 1, oh, ow}), g.in_kernel)
        << what;
    Rng rng(seed_from("oclgrind cpu family " + what));
    const HostTensor x = random_normal(rng, {2, g.c, g.h, g.w}, g.dtype);
    const HostTensor w = random_normal(rng, {g.o, g.c, 3, 3}, g.dtype, 0.0, 0.3);
    const HostTensor b = random_normal(rng, {g.o}, g.dtype);
    const auto run = [&](Backend& on) {
      const Tensor tb = on.upload(b);
      return on.download(ops::conv2d(make_context(on, p), on.upload(x), on.upload(w), &tb, int(g.stride), 1));
    };
    EXPECT_TRUE(
        tensors_close(run(be), run(ref), g.dtype == DType::f32 ? kF32Sums : tolerance("conv2d", p, Check::backend)))
        << what;
  }
  // Winograd with the weights transformed inside the GEMM (winograd_fused_cpu): 80 input channels in steps of 32,
  // 32 and 16, 72 output channels in a partial row block, 16 tiles in part of one column panel (test_winograd
  // compares its bits with the two passes').
  {
    const Precision p{DType::f32};
    const opencl::gemm::ConvShape s{1, 80, 16, 16, 72, 3, 3, 1, 1, 16, 16};
    ASSERT_TRUE(opencl::gemm::fuses_winograd_weights(be, p, s)) << "local memory " << be.device().local_mem_bytes;
    Rng rng(seed_from("oclgrind cpu family winograd fused"));
    const HostTensor x = random_normal(rng, {1, 80, 16, 16}, p.dtype);
    const HostTensor w = random_normal(rng, {72, 80, 3, 3}, p.dtype, 0.0, 0.1);
    const HostTensor b = random_normal(rng, {72}, p.dtype);
    const auto run = [&](Backend& on) {
      const Tensor tb = on.upload(b);
      return on.download(ops::conv2d(make_context(on, p), on.upload(x), on.upload(w), &tb, 1, 1));
    };
    const HostTensor fused = run(be);
    EXPECT_TRUE(tensors_close(fused, run(ref), tolerance("conv2d_winograd", p, Check::backend))) << "winograd fused";
  }
  // The packed GEMM over two k-blocks (k 600 > kc 512 or 256) with a bias. With f16 storage gemm_cpu_direct_a
  // converts the rows of A in its inner loop, 16 k at a time (k-blocks that end in a partial 16), then one at a time.
  Rng rng(seed_from("oclgrind cpu family matmul"));
  const Precision f32{DType::f32};
  for (const auto& [dt, n] : {std::pair{DType::f32, std::int64_t{21}}, std::pair{DType::f16, std::int64_t{200}}}) {
    const Precision p{dt};
    const HostTensor a = random_normal(rng, {13, 600}, dt);
    const HostTensor wt = random_normal(rng, {n, 600}, dt, 0.0, 0.05);
    const HostTensor bias = random_normal(rng, {n}, dt);
    EXPECT_TRUE(tensors_close(linear_on(be, p, a, wt, bias), linear_on(ref, p, a, wt, bias),
                              dt == DType::f32 ? kF32Sums : tolerance("matmul", p, Check::backend)))
        << "linear 13x600 -> " << n << ", " << p.describe();
  }
  // The GEMM with GEGLU in its store (ops::linear_geglu, gemm_cpu_direct_a_geglu): B packed in split panels,
  // the gates' columns read from the block's second half; two k-blocks, a partial row block. Against the two
  // ops on the reference.
  {
    const Precision p{DType::f16};
    opencl::gemm::Problem pr;
    pr.a = {nullptr, 0, 0, 600, 1};
    pr.b = {nullptr, 0, 0, 1, 600};
    pr.m = 13, pr.n = 128, pr.k = 600;
    pr.epilogue = opencl::gemm::Epilogue::geglu;
    ASSERT_TRUE(opencl::gemm::fuses_epilogue(be, p, pr)) << opencl::gemm::tuning(be.device()).source;
    const HostTensor x = random_normal(rng, {13, 600}, p.dtype);
    const HostTensor wt = random_normal(rng, {128, 600}, p.dtype, 0.0, 0.05);
    const HostTensor bias = random_normal(rng, {128}, p.dtype);
    const auto run = [&](Backend& on) {
      const OpContext ctx = make_context(on, p);
      const Tensor tx = on.upload(x), tw = on.upload(wt), tb = on.upload(bias);
      return on.download(ops::linear_geglu(ctx, ctx, tx, tw, &tb));
    };
    EXPECT_TRUE(tensors_close(run(be), run(ref), tolerance("matmul", p, Check::backend))) << "LINEAR with GEGLU";
  }
  // attention_flash_cpu and its packers: partial row and key blocks, with and without the causal mask, and more
  // keys than queries (the mask's blocks end at the last row's key); then blocked over memory (two row blocks per
  // work-item taking K and V one key block at a time: the last work-item's second row block is partial or empty).
  const std::unique_ptr<Backend> blocked_owner =
      make_checked_backend(oclgrind_backend()->device(), KernelStyleChoice::cpu, false, 2, 1);
  Backend& blocked = *blocked_owner;
  struct Attn {
    std::int64_t sq, sk;
    bool causal;
  };
  for (const Attn& s : {Attn{19, 19, false}, Attn{19, 19, true}, Attn{5, 29, true}}) {
    const std::string what =
        "attention " + std::to_string(s.sq) + "x" + std::to_string(s.sk) + (s.causal ? " causal" : "");
    Rng arng(seed_from("oclgrind cpu family " + what));
    const HostTensor q = random_normal(arng, {1, s.sq, 2 * 8}, DType::f32);
    const HostTensor k = random_normal(arng, {1, s.sk, 2 * 8}, DType::f32);
    const HostTensor v = random_normal(arng, {1, s.sk, 2 * 8}, DType::f32);
    const auto run = [&](Backend& on) {
      return on.download(
          ops::attention(make_context(on, f32), on.upload(q), on.upload(k), on.upload(v), 2, 0.35f, s.causal));
    };
    const HostTensor got = run(be);
    EXPECT_TRUE(tensors_close(got, run(ref), tolerance("attention_fused", f32, Check::backend))) << what;
    EXPECT_TRUE(bitwise_equal(run(blocked), got)) << what << ", blocked over memory";
  }
  bool fused = false;
  for (const Backend* b : {static_cast<const Backend*>(&be), static_cast<const Backend*>(&blocked)}) {
    for (const std::string& n : b->kernel_notes())
      fused = fused || n.find("flash attention not used") != std::string::npos;
  }
  EXPECT_FALSE(fused) << "the CPU family's attention left attention_flash_cpu";
  expect_no_new_reports();  // their logs, while the backends are alive (the listener runs after the test)
  logs().erase(owned.get());
  logs().erase(blocked_owner.get());
}

// The inspector's kernels under the simulator's checks, in both families: the
// CPU family's map_stats_item (three maps of a launch, each with its own
// buffer, offset and thresholds, into one output buffer), the GPU family's
// map_lines and map_channels, the mask where a map holds NaN, and the preview
// from three channels (the kernel must not read a fourth).
TEST(OclgrindInspector, ReductionsAndPreviewStayInBoundsAndMatchTheReference) {
  REQUIRE_OCLGRIND();
  Backend& ref = reference_backend();
  for (const KernelStyleChoice style : {KernelStyleChoice::cpu, KernelStyleChoice::gpu}) {
    const std::unique_ptr<Backend> owned = make_checked_backend(oclgrind_backend()->device(), style);
    Backend& be = *owned;
    const std::string what = style == KernelStyleChoice::cpu ? "CPU kernels" : "GPU kernels";
    Rng rng(seed_from("oclgrind inspector " + what));
    HostTensor pair = random_normal(rng, {2, 3, 5, 6}, DType::f32, 0.0, 2.0);
    pair.set(3 * 5 * 6 + 7, std::numeric_limits<float>::quiet_NaN());  // image 1
    const HostTensor one = random_normal(rng, {1, 3, 5, 6}, DType::f32, 0.0, 2.0);
    const auto reduce = [&](Backend& on) {
      const Tensor tp = on.upload(pair), to = on.upload(one);
      const std::vector<MapReduceArgs> maps{
          {tp, 1, 60000.0, 3.0, 4}, {to, 0, 60000.0, 3.0, 4}, {tp, 0, 1.0, 0.5, 4}, {tp, 1, 2.0, 1.5, 4}};
      const LatentPreviewArgs preview{
          tp,  1,  std::vector<float>{0.3f, 0.2f, 0.1f, -0.2f, 0.4f, 0.1f, 0.1f, 0.1f, 0.5f}, {0.1f, 0.0f, -0.1f},
          0.7, 1.5};
      return on.reduce_step(maps, &preview);
    };
    const StepReductions want = reduce(ref), got = reduce(be);
    ASSERT_EQ(got.maps.size(), want.maps.size()) << what;
    for (std::size_t m = 0; m < want.maps.size(); ++m) {
      const std::string wm = what + " map " + std::to_string(m);
      ASSERT_EQ(got.maps[m].per_channel.size(), want.maps[m].per_channel.size()) << wm;
      for (std::size_t c = 0; c < want.maps[m].per_channel.size(); ++c) {
        const ChannelReduction &a = want.maps[m].per_channel[c], &b = got.maps[m].per_channel[c];
        EXPECT_EQ(b.finite, a.finite) << wm << " channel " << c;
        EXPECT_EQ(b.nan, a.nan) << wm << " channel " << c;
        EXPECT_EQ(b.near_limit, a.near_limit) << wm << " channel " << c;
        EXPECT_EQ(b.over, a.over) << wm << " channel " << c;
        EXPECT_EQ(b.max, a.max) << wm << " channel " << c;
        EXPECT_NEAR(b.mean, a.mean, 1e-5 * std::max(1.0, std::fabs(a.mean))) << wm << " channel " << c;
      }
      ASSERT_EQ(got.maps[m].col_std.size(), want.maps[m].col_std.size()) << wm;
      for (std::size_t i = 0; i < want.maps[m].col_std.size(); ++i)
        EXPECT_NEAR(got.maps[m].col_std[i], want.maps[m].col_std[i],
                    1e-5 * std::max(1.0, double{want.maps[m].col_std[i]}))
            << wm << " column " << i;
      EXPECT_EQ(got.maps[m].mask_bad, want.maps[m].mask_bad) << wm;
    }
    ASSERT_TRUE(got.preview && want.preview) << what;
    ASSERT_EQ(got.preview->rgb.size(), want.preview->rgb.size()) << what;
    for (std::size_t i = 0; i < want.preview->rgb.size(); ++i)
      EXPECT_LE(std::abs(int(got.preview->rgb[i]) - int(want.preview->rgb[i])), 1) << what << " preview byte " << i;
    EXPECT_EQ(got.preview->finite, want.preview->finite) << what;
    EXPECT_EQ(got.preview->over, want.preview->over) << what;
    EXPECT_EQ(got.preview->clipped, want.preview->clipped) << what;
    expect_no_new_reports();  // its log, while the backend is alive (the listener runs after the test)
    logs().erase(owned.get());
  }
}

// The tensor-core kernels (gemm_mma, conv_implicit_mma, attention_flash_mma)
// with mma.sync and the warp shuffles emulated through local memory: their
// local tiles, fragment layouts and bounds under the simulator's checks, on
// shapes that end in partial tiles (m, n, k, query rows, keys, head sizes).
TEST(OclgrindTensorCores, EmulatedMmaKernelsStayInBoundsAndMatchTheReference) {
  REQUIRE_OCLGRIND();
  const std::unique_ptr<Backend> owned =
      make_checked_backend(oclgrind_backend()->device(), KernelStyleChoice::gpu, /*emulate_tensor_cores=*/true);
  auto& be = dynamic_cast<opencl::OpenClBackend&>(*owned);
  Backend& ref = reference_backend();
  const Precision p{DType::f16, Accumulate::f32, SoftmaxPrecision::f32};
  Rng rng(seed_from("oclgrind tensor cores"));

  // Few k-tiles (every emulated mma.sync is two barriers and 64 local reads per work-item here):
  // the smallest shapes the tensor cores take (m, n >= 64, k >= 32), partial tiles.
  const HostTensor a = random_normal(rng, {66, 32}, DType::f16);
  const HostTensor wt = random_normal(rng, {65, 32}, DType::f16, 0.0, 0.2);
  const HostTensor bias = random_normal(rng, {65}, DType::f16);
  EXPECT_TRUE(tensors_close(linear_on(be, p, a, wt, bias), linear_on(ref, p, a, wt, bias),
                            tolerance("matmul", p, Check::backend)))
      << "linear 66x32 -> 65";

  // conv_implicit_mma takes 32 channels or more, one k-tile per tap: a 2x2 kernel keeps it to 4 tiles
  // and still wraps the tap's column into the next row; 10 x 9 outputs end in partial blocks.
  const HostTensor x = random_normal(rng, {1, 32, 9, 8}, DType::f16);
  const HostTensor w = random_normal(rng, {64, 32, 2, 2}, DType::f16, 0.0, 0.1);
  const HostTensor cb = random_normal(rng, {64}, DType::f16);
  const auto conv = [&](Backend& on) {
    const Tensor tb = on.upload(cb);
    return on.download(ops::conv2d(make_context(on, p), on.upload(x), on.upload(w), &tb, 1, 1));
  };
  EXPECT_TRUE(tensors_close(conv(be), conv(ref), tolerance("conv2d", p, Check::backend))) << "conv 32x9x8 -> 64, 2x2";

  struct Attn {
    std::int64_t sq, sk, heads, d, dv;
  };
  // Ragged query blocks and key tiles, padded head sizes (40 -> 48 and 40, 8 -> 16 and 6 -> 8).
  for (const Attn& s : {Attn{20, 45, 1, 40, 40}, Attn{5, 9, 2, 8, 6}}) {
    const HostTensor q = random_normal(rng, {1, s.sq, s.heads * s.d}, DType::f16);
    const HostTensor k = random_normal(rng, {1, s.sk, s.heads * s.d}, DType::f16);
    const HostTensor v = random_normal(rng, {1, s.sk, s.heads * s.dv}, DType::f16);
    const float scale = static_cast<float>(1.0 / std::sqrt(double(s.d)));
    const auto attention = [&](Backend& on) {
      return on.download(ops::attention(make_context(on, p, {AttentionImpl::fused, 1}), on.upload(q), on.upload(k),
                                        on.upload(v), int(s.heads), scale, false));
    };
    EXPECT_TRUE(tensors_close(attention(be), attention(ref), tolerance("attention_fused", p, Check::backend)))
        << "attention q" << s.sq << " k" << s.sk << " d" << s.d << " dv" << s.dv;
  }
  std::set<std::string> ran;
  for (const opencl::OpTiming& t : be.profile()) ran.insert(t.op.substr(t.op.find(' ') + 1));
  for (const char* kernel : {"gemm_mma", "conv_implicit_mma", "attention_flash_mma"}) {
    EXPECT_TRUE(ran.count(kernel)) << kernel << " did not run";
  }
  expect_no_new_reports();  // its log, while the backend is alive (the listener runs after the test)
  logs().erase(owned.get());
}

// Deliberately broken kernels: each must be reported, and the report must fail a test.
const char* const kBrokenKernels = R"CLC(
kernel void read_past_the_end(global const float* x, global float* y) {
  const size_t i = get_global_id(0);
  y[i] = x[i + 1];  // the last work-item reads x[n]
}

kernel void local_race(global const float* x, global float* y) {
  local float tile[16];
  const size_t l = get_local_id(0);
  tile[l] = x[get_global_id(0)];
  // barrier(CLK_LOCAL_MEM_FENCE) missing: the neighbour's slot may not be written yet
  y[get_global_id(0)] = tile[(l + 1) % 16];
}

kernel void divergent_barrier(global float* y) {
  const size_t l = get_local_id(0);
  if (l < 8) barrier(CLK_LOCAL_MEM_FENCE);  // half the work-group never arrives
  y[get_global_id(0)] = (float)l;
}
)CLC";

class OclgrindSelfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_OCLGRIND();
    be_ = dynamic_cast<opencl::OpenClBackend*>(oclgrind_backend());
    ASSERT_NE(be_, nullptr);
    expect_no_new_reports();  // nothing left over from before
    cl_int err = CL_SUCCESS;
    const char* src = kBrokenKernels;
    program_ = clCreateProgramWithSource(be_->context(), 1, &src, nullptr, &err);
    ASSERT_EQ(err, CL_SUCCESS) << opencl::cl_status_name(err);
    auto dev = static_cast<cl_device_id>(be_->device().cl_device);
    err = clBuildProgram(program_, 1, &dev, "-cl-std=CL1.2", nullptr, nullptr);
    ASSERT_EQ(err, CL_SUCCESS) << opencl::cl_status_name(err);
  }
  void TearDown() override {
    for (cl_kernel k : kernels_) NS_CL_CHECK_NOTHROW(clReleaseKernel(k));
    if (program_) NS_CL_CHECK_NOTHROW(clReleaseProgram(program_));
  }

  // Runs one kernel of kBrokenKernels over n work-items in groups of 16 with buffer arguments.
  void run(const char* name, std::initializer_list<const Tensor*> args, size_t n) {
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program_, name, &err);
    ASSERT_EQ(err, CL_SUCCESS) << name << ": " << opencl::cl_status_name(err);
    kernels_.push_back(k);
    cl_uint i = 0;
    for (const Tensor* t : args) {
      const cl_mem m = be_->buffer(*t);
      NS_CL_CHECK(clSetKernelArg(k, i++, sizeof(m), &m));
    }
    const size_t local = 16;
    be_->launch(k, "SELFTEST", 1, &n, &local);
    be_->synchronize();
  }

  opencl::OpenClBackend* be_ = nullptr;
  cl_program program_ = nullptr;
  std::vector<cl_kernel> kernels_;
};

TEST_F(OclgrindSelfTest, AReadPastTheEndOfABufferFailsTheTest) {
  const Tensor x = be_->upload(HostTensor::from_f32({32}, std::vector<float>(32, 1.0f)));
  const Tensor y = be_->empty({32}, DType::f32);
  run("read_past_the_end", {&x, &y}, 32);
  EXPECT_NONFATAL_FAILURE(expect_no_new_reports(), "Invalid read of size 4 at global memory");
}

TEST_F(OclgrindSelfTest, ARaceOnLocalMemoryFailsTheTest) {
  const Tensor x = be_->upload(HostTensor::from_f32({32}, std::vector<float>(32, 1.0f)));
  const Tensor y = be_->empty({32}, DType::f32);
  run("local_race", {&x, &y}, 32);
  EXPECT_NONFATAL_FAILURE(expect_no_new_reports(), "data race at local memory");
}

TEST_F(OclgrindSelfTest, ABarrierHalfTheGroupSkipsFailsTheTest) {
  const Tensor y = be_->empty({32}, DType::f32);
  run("divergent_barrier", {&y}, 32);
  EXPECT_NONFATAL_FAILURE(expect_no_new_reports(), "divergence");
}

// The whole path, as CTest sees it: a test whose kernel Oclgrind reports fails
// through the listener, and the executable exits non-zero. The broken test
// runs in a child process (below) so that it fails there and not here.
class OclgrindBrokenKernel : public OclgrindSelfTest {
 protected:
  void SetUp() override {
    if (!std::getenv("NANSCOPE_OCLGRIND_BROKEN_KERNEL")) {
      GTEST_SKIP() << "fails on purpose: OclgrindSelfTest.TheExecutableFailsWhenAKernelIsReported runs it in a child";
    }
    OclgrindSelfTest::SetUp();
  }
};

TEST_F(OclgrindBrokenKernel, ReadsPastTheEnd) {
  const Tensor x = be_->upload(HostTensor::from_f32({32}, std::vector<float>(32, 1.0f)));
  const Tensor y = be_->empty({32}, DType::f32);
  run("read_past_the_end", {&x, &y}, 32);
  // No check here: the listener finds Oclgrind's report after the test and fails it.
}

TEST_F(OclgrindSelfTest, TheExecutableFailsWhenAKernelIsReported) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const ProcessResult r = run_process({"/usr/bin/env", "NANSCOPE_OCLGRIND_BROKEN_KERNEL=1", self,
                                       "--gtest_filter=OclgrindBrokenKernel.ReadsPastTheEnd"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("Oclgrind reported errors on \"" + be_->device().name + "\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Invalid read of size 4 at global memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[  FAILED  ] OclgrindBrokenKernel.ReadsPastTheEnd"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace nanscope::test

int main(int argc, char** argv) {
  using namespace nanscope::test;
  // Before anything makes an OpenCL context or gtest registers the op cases.
  configure_oclgrind();
  set_case_filter(small_cases);
  use_simulators(
      [](const nanscope::DeviceInfo& d) { return make_checked_backend(d, nanscope::KernelStyleChoice::gpu); });
  ::testing::InitGoogleTest(&argc, argv);
  if (GTEST_FLAG_GET(filter) == "*") {
    GTEST_FLAG_SET(
        filter,
        "OclgrindSelfTest.*:OclgrindCoverage.*:OclgrindCpuFamily.*:OclgrindInspector.*:OclgrindTensorCores.*:"
        "Ops/*.BackendVsReference/*");
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new ReportChecker);
  const int result = RUN_ALL_TESTS();
  release_backends();
  return result;
}
