// ATTENTION: storage x accumulate x softmax precision x impl {fused, bmm,
// sliced(1), sliced(3)} on odd shapes (77 tokens, d != dv, causal), SD shapes
// (cross-attention at 64x64 on the reference; self-attention at 64x64 with 4096
// tokens on OpenCL against PyTorch only, the reference being too slow), the SD
// head sizes 40..160 through the fused (on GPUs: flash) kernel, and the
// failure modes: native softmax overflow on large logits, the impls' agreement,
// sliced == bmm bit for bit.

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"
#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

struct AttnShape {
  std::int64_t batch, sq, sk, heads, d, dv;
  bool causal;
  std::string tag() const {
    return "b" + std::to_string(batch) + "_q" + std::to_string(sq) + "_k" + std::to_string(sk) + "_h" +
           std::to_string(heads) + "_d" + std::to_string(d) + (dv != d ? "_dv" + std::to_string(dv) : "") +
           (causal ? "_causal" : "");
  }
};

// The CPU flash kernel's geometries (BackendOptions::attention_cpu_lanes and attention_cpu_rows): 16 lanes x 32
// rows (two halves) x 8 keys a block and 16 x 16 x 16 for AVX-512, 8 x 16 x 6 and 8 x 8 x 12 for AVX2. PoCL
// builds each for any CPU (wider vectors than the CPU's are split), so every CPU runs all four.
struct FlashCpuGeometry {
  int lanes = 0, rows = 0;
  std::string tag() const { return std::to_string(lanes) + " lanes x " + std::to_string(rows) + " rows"; }
};
constexpr FlashCpuGeometry kFlashCpuGeometries[] = {{16, 32}, {16, 16}, {8, 16}, {8, 8}};

OpCase attention_case(const AttnShape& s, const AttentionConfig& cfg) {
  OpCase c;
  c.op = "attention";
  c.family = cfg.impl == AttentionImpl::fused ? "attention_fused" : "attention";
  c.desc = s.tag();
  c.attention = cfg;
  c.uses_softmax = true;
  c.uses_attention = true;
  const float scale = static_cast<float>(1.0 / std::sqrt(double(s.d)));
  c.oracle = {{"op", "attention"}, {"heads", s.heads}, {"scale", scale}, {"causal", s.causal}};
  c.flops = 2.0 * double(s.batch * s.heads * s.sq * s.sk) * double(s.d + s.dv);
  c.build = [s](Rng& rng, const Precision& p) {
    return std::vector<HostTensor>{random_normal(rng, {s.batch, s.sq, s.heads * s.d}, p.dtype),
                                   random_normal(rng, {s.batch, s.sk, s.heads * s.d}, p.dtype),
                                   random_normal(rng, {s.batch, s.sk, s.heads * s.dv}, p.dtype)};
  };
  c.run = [s, scale](const OpContext& ctx, const std::vector<Tensor>& in) {
    return ops::attention(ctx, in[0], in[1], in[2], static_cast<int>(s.heads), scale, s.causal);
  };
  return c;
}

const std::vector<AttnShape>& odd_shapes() {
  static const std::vector<AttnShape> shapes{
      {2, 77, 77, 4, 8, 8, false},    // self-attention over 77 tokens
      {1, 13, 77, 2, 40, 24, false},  // cross-attention, d != dv
      {1, 77, 77, 4, 16, 16, true},   // CLIP's causal self-attention
  };
  return shapes;
}

const std::vector<AttentionConfig>& impls() {
  static const std::vector<AttentionConfig> all{
      {AttentionImpl::fused, 1}, {AttentionImpl::bmm, 1}, {AttentionImpl::sliced, 1}, {AttentionImpl::sliced, 3}};
  return all;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c, const std::vector<Precision>& ps, bool on_reference = true) {
    for (auto& p : expand(c, ps)) {
      auto q = std::make_shared<OpCase>(*p);
      q->on_reference = on_reference;
      all.push_back(std::move(q));
    }
  };
  for (const auto& s : odd_shapes()) {
    for (const auto& cfg : impls()) add(attention_case(s, cfg), precision_matrix(/*with_softmax=*/true));
  }
  const std::vector<Precision> sd_precisions{
      {DType::f32},
      {DType::f16, Accumulate::f32, SoftmaxPrecision::f32},
      {DType::f16, Accumulate::native, SoftmaxPrecision::native},
      {DType::bf16, Accumulate::f32, SoftmaxPrecision::f32},
  };
  const AttnShape sd_cross{1, 4096, 77, 8, 40, 40, false};  // SD 1.x attn2 at 64x64, one CFG half
  for (const auto impl : {AttentionImpl::fused, AttentionImpl::bmm})
    add(attention_case(sd_cross, {impl, 1}), sd_precisions);
  // The head sizes of SD 1.x (40, 80, 160) and SD 2.x / XL (64) through the fused
  // implementation (on GPU-style devices the flash kernel's tiles: 64 query rows
  // and 64 or 32 keys per tile, 32 x 32 at 160, so these end in partial tiles), and
  // fewer rows than a tile.
  const std::vector<Precision> head_precisions{sd_precisions[0], sd_precisions[1], sd_precisions[3]};
  // The last three are small enough for test_oclgrind: ragged query blocks and key tiles
  // at the 40, 64 and 160 tilings (64 rows x 64 keys, 64 x 32, 32 x 32).
  for (const AttnShape& s : {AttnShape{1, 100, 130, 2, 64, 64, false}, AttnShape{1, 70, 77, 2, 80, 80, false},
                             AttnShape{1, 65, 150, 1, 160, 160, false}, AttnShape{2, 3, 5, 3, 40, 40, false},
                             AttnShape{1, 70, 70, 1, 40, 40, false}, AttnShape{1, 40, 40, 1, 64, 64, false},
                             AttnShape{1, 33, 34, 1, 160, 160, false}})
    add(attention_case(s, {AttentionImpl::fused, 1}), head_precisions);
  // SD 1.x attn1 at 64x64: 21 GFLOP per run, fused only (bmm took 24 s per run on
  // PoCL here; bmm at 4096 query rows is covered by the cross-attention cases).
  const AttnShape sd_self{1, 4096, 4096, 8, 40, 40, false};
  add(attention_case(sd_self, {AttentionImpl::fused, 1}), {sd_precisions[0], sd_precisions[1]},
      /*on_reference=*/false);
  return all;
}

NANSCOPE_OP_TESTS(Attention, cases());

// Runs one attention on a backend and downloads the result.
HostTensor run_attention(Backend& be, const std::vector<HostTensor>& qkv, const Precision& p,
                         const AttentionConfig& cfg, int heads, float scale, bool causal = false) {
  const OpContext ctx = make_context(be, p, cfg);
  const Tensor q = be.upload(qkv[0].converted(p.dtype));
  const Tensor k = be.upload(qkv[1].converted(p.dtype));
  const Tensor v = be.upload(qkv[2].converted(p.dtype));
  const Tensor out = ops::attention(ctx, q, k, v, heads, scale, causal);
  be.synchronize();
  return be.download(out);
}

// Logits near 80000: finite in f32, +Inf once stored in f16. With the softmax
// upcast (diffusers' upcast_softmax) the output is finite; with native softmax
// the scores overflow and Inf - Inf poisons the rows.
TEST(AttentionFailureModes, F16NativeSoftmaxOverflowsOnLargeLogits) {
  constexpr std::int64_t seq = 8, d = 64;
  Rng rng(seed_from("attention large logits"));
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  std::vector<float> qk(seq * d);
  for (auto& x : qk) x = rng.next_u64() & 1 ? 100.0f : -100.0f;  // q.k up to 640000 on the diagonal
  const std::vector<HostTensor> qkv{HostTensor::from_f32({1, seq, d}, qk), HostTensor::from_f32({1, seq, d}, qk),
                                    random_normal(rng, {1, seq, d}, DType::f16).converted(DType::f32)};
  const float scale = 0.125f;
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const HostTensor want = run_attention(*be, qkv, {DType::f32}, {AttentionImpl::bmm, 1}, 1, scale);
    ASSERT_EQ(count_nonfinite(want), 0);
    for (const auto& cfg : impls()) {
      SCOPED_TRACE(std::string(attention_impl_name(cfg.impl)) + " slice " + std::to_string(cfg.slice_size));
      const Precision upcast{DType::f16, Accumulate::f32, SoftmaxPrecision::f32};
      const Precision native{DType::f16, Accumulate::f32, SoftmaxPrecision::native};
      const HostTensor ok = run_attention(*be, qkv, upcast, cfg, 1, scale);
      const HostTensor bad = run_attention(*be, qkv, native, cfg, 1, scale);
      EXPECT_EQ(count_nonfinite(ok), 0);
      EXPECT_TRUE(tensors_close(ok, want.converted(DType::f16), tolerance("attention_fused", upcast, Check::torch)));
      EXPECT_GT(count_nonfinite(bad), 0) << "native f16 softmax should overflow on logits of 80000";
    }
  }
}

// Runs check(shape, qkv, scale, backend, precision, bmm_result) for every odd
// shape, backend and precision, on q/k/v seeded by `salt` and the shape.
template <typename Check>
void for_each_case_against_bmm(const std::string& salt, Check check) {
  for (const auto& s : odd_shapes()) {
    Rng rng(seed_from(salt + " " + s.tag()));
    SCOPED_TRACE(s.tag() + " seed " + std::to_string(rng.seed()));
    const std::vector<HostTensor> qkv{random_normal(rng, {s.batch, s.sq, s.heads * s.d}, DType::f32),
                                      random_normal(rng, {s.batch, s.sk, s.heads * s.d}, DType::f32),
                                      random_normal(rng, {s.batch, s.sk, s.heads * s.dv}, DType::f32)};
    const float scale = static_cast<float>(1.0 / std::sqrt(double(s.d)));
    for (Backend* be : all_backends()) {
      for (const Precision& p : precision_matrix(true)) {
        SCOPED_TRACE("device \"" + be->device().name + "\" " + p.describe());
        const auto bmm = run_attention(*be, qkv, p, {AttentionImpl::bmm, 1}, int(s.heads), scale, s.causal);
        check(s, qkv, scale, *be, p, bmm);
      }
    }
  }
}

// The three implementations compute one function: fused (online softmax) may
// differ from bmm only by rounding, within the fused tolerance, in every precision.
TEST(AttentionImpls, FusedAgreesWithBmm) {
  for_each_case_against_bmm(
      "impls", [](const auto& s, const auto& qkv, float scale, Backend& be, const Precision& p, const HostTensor& bmm) {
        const auto fused = run_attention(be, qkv, p, {AttentionImpl::fused, 1}, int(s.heads), scale, s.causal);
        EXPECT_TRUE(tensors_close(fused, bmm, tolerance("attention_fused", p, Check::torch), false,
                                  tolerance_key("attention_fused_vs_bmm", p, Check::torch) + " " +
                                      std::string(device_kind_name(be.device().kind))));
      });
}

// Slicing only changes how many (batch, head) score matrices exist at once:
// every slice size must reproduce bmm bit for bit, in every precision.
TEST(AttentionImpls, SlicedEqualsBmmBitForBit) {
  for_each_case_against_bmm("sliced", [](const auto& s, const auto& qkv, float scale, Backend& be, const Precision& p,
                                         const HostTensor& bmm) {
    for (const int slice : {1, 3, 100}) {
      SCOPED_TRACE("slice_size " + std::to_string(slice));
      const auto sliced = run_attention(be, qkv, p, {AttentionImpl::sliced, slice}, int(s.heads), scale, s.causal);
      EXPECT_TRUE(bitwise_equal(sliced, bmm));
    }
  });
}

// Non-finite inputs through the flash kernels (and every other fused kernel)
// land where the reference puts them: a query row of +Inf scores NaN against
// keys of both signs (Inf - Inf in the softmax), a row whose scores are all
// -Inf takes no key (0/0), an Inf in V reaches every row that weighs its key,
// and a NaN in one key's channel poisons every row. 37 keys: a partial last
// block of 16; d = 24 and dv = 20: padded head sizes.
// f32 fused attention on every OpenCL device in both kernel families (the CPU
// and the GPU flash kernels) against the reference's `want`: close where
// finite, and NaN / Inf exactly where the reference has them.
void expect_flash_nonfinite_like(const std::vector<HostTensor>& qkv, const HostTensor& want, int heads, float scale,
                                 const std::string& trace) {
  for (Backend* be : all_backends()) {
    // The GPU style, and the CPU style at each of its flash kernel's geometries.
    struct Family {
      KernelStyleChoice style;
      FlashCpuGeometry geometry;
    };
    std::vector<Family> families{{KernelStyleChoice::gpu, {}}};
    for (const FlashCpuGeometry& g : kFlashCpuGeometries) families.push_back({KernelStyleChoice::cpu, g});
    for (const auto& [style, geometry] : families) {
      if (be->device().kind == DeviceKind::reference) continue;
      BackendOptions options = test_backend_options();
      options.kernel_style = style;
      options.attention_cpu_lanes = geometry.lanes;
      options.attention_cpu_rows = geometry.rows;
      const std::unique_ptr<Backend> own = make_backend(be->device(), options);
      SCOPED_TRACE(trace + "device \"" + be->device().name +
                   (style == KernelStyleChoice::cpu ? "\" cpu style, " + geometry.tag() : std::string("\" gpu style")));
      const HostTensor got = run_attention(*own, qkv, {DType::f32}, {AttentionImpl::fused, 1}, heads, scale);
      EXPECT_TRUE(tensors_close(got, want, tolerance("attention_fused", Precision{DType::f32}, Check::backend), true));
      const CompareStats st = compare_stats(got, want);
      EXPECT_EQ(st.nonfinite_mismatches, 0) << "first at " << multi_index(want.shape, st.first_mismatch);
      expect_no_guard_violations(*own);
    }
  }
}

// The tensor-core flash kernel (attention_flash_mma, mma.sync emulated through
// local memory on any OpenCL device) in f16 against the reference's fused f16:
// close where finite, NaN / Inf exactly where the reference has them.
void expect_tensor_core_flash_nonfinite_like(const std::vector<HostTensor>& qkv, int heads, float scale) {
  const Precision p{DType::f16, Accumulate::f32, SoftmaxPrecision::f32};
  const HostTensor want = run_attention(reference_backend(), qkv, p, {AttentionImpl::fused, 1}, heads, scale);
  ASSERT_GT(count_nonfinite(want), 0);
  for (Backend* be : all_backends()) {
    if (be->device().kind == DeviceKind::reference) continue;
    BackendOptions options = test_backend_options();
    options.kernel_style = KernelStyleChoice::gpu;
    options.emulate_tensor_cores = true;
    options.profile = true;
    const std::unique_ptr<Backend> own = make_backend(be->device(), options);
    SCOPED_TRACE("device \"" + be->device().name + "\" tensor cores emulated");
    const HostTensor got = run_attention(*own, qkv, p, {AttentionImpl::fused, 1}, heads, scale);
    EXPECT_TRUE(tensors_close(got, want, tolerance("attention_fused", p, Check::backend), true));
    const CompareStats st = compare_stats(got, want);
    EXPECT_EQ(st.nonfinite_mismatches, 0) << "first at " << multi_index(want.shape, st.first_mismatch);
    expect_no_guard_violations(*own);
    bool ran = false;
    if (auto* ocl = dynamic_cast<opencl::OpenClBackend*>(own.get())) {
      for (const opencl::OpTiming& t : ocl->profile())
        ran = ran || t.op.find("attention_flash_mma") != std::string::npos;
    }
    EXPECT_TRUE(ran) << "attention_flash_mma did not run";
  }
}

// The CPU flash kernel's four geometries (kFlashCpuGeometries; the op suite
// runs the device's own) against the reference on every CPU-style OpenCL device: ragged query and key blocks,
// d != dv, dv not a multiple of the 8-column pass, the SD head sizes, batch and
// heads above 1, f32 and f16 storage.
TEST(AttentionFlashCpu, EveryGeometryMatchesTheReference) {
  Rng rng(seed_from("attention flash cpu geometries"));
  const AttnShape shapes[] = {{2, 37, 29, 3, 24, 20, false},
                              {1, 100, 130, 2, 64, 64, false},
                              {1, 70, 77, 2, 40, 40, false},
                              {1, 33, 45, 1, 160, 160, false},
                              {1, 9, 200, 2, 80, 80, false}};
  for (Backend* be : all_backends()) {
    if (be->device().kind == DeviceKind::reference || be->device().kind == DeviceKind::simulator) continue;
    for (const FlashCpuGeometry& g : kFlashCpuGeometries) {
      BackendOptions options = test_backend_options();
      options.kernel_style = KernelStyleChoice::cpu;
      options.attention_cpu_lanes = g.lanes;
      options.attention_cpu_rows = g.rows;
      const std::unique_ptr<Backend> own = make_backend(be->device(), options);
      for (const AttnShape& s : shapes) {
        const std::vector<HostTensor> qkv{random_normal(rng, {s.batch, s.sq, s.heads * s.d}, DType::f32),
                                          random_normal(rng, {s.batch, s.sk, s.heads * s.d}, DType::f32),
                                          random_normal(rng, {s.batch, s.sk, s.heads * s.dv}, DType::f32)};
        const float scale = static_cast<float>(1.0 / std::sqrt(double(s.d)));
        for (const Precision& p : {Precision{DType::f32}, Precision{DType::f16}}) {
          SCOPED_TRACE("device \"" + be->device().name + "\" " + g.tag() + ", " + s.tag() + " " +
                       std::string(dtype_name(p.dtype)));
          const HostTensor want =
              run_attention(reference_backend(), qkv, p, {AttentionImpl::fused, 1}, int(s.heads), scale);
          const HostTensor got = run_attention(*own, qkv, p, {AttentionImpl::fused, 1}, int(s.heads), scale);
          EXPECT_TRUE(tensors_close(got, want, tolerance("attention_fused", p, Check::backend)));
          expect_no_guard_violations(*own);
        }
      }
      bool flash = true;
      for (const std::string& n : own->kernel_notes())
        flash = flash && n.find("flash attention not used") == std::string::npos;
      EXPECT_TRUE(flash) << "the CPU flash kernel must have run every case";
    }
  }
}

// The geometry by default follows the device's native float vectors (16 lanes x 32 rows on AVX-512, 8 x 16
// below); rows alone imply their lanes; rows that are neither the lanes nor twice them are refused by name.
TEST(AttentionFlashCpu, GeometryFromTheDeviceAndTheOptions) {
  for (Backend* be : all_backends()) {
    if (be->device().kind == DeviceKind::reference) continue;
    const auto geometry = [&](int lanes, int rows) {
      BackendOptions options = test_backend_options();
      options.attention_cpu_lanes = lanes;
      options.attention_cpu_rows = rows;
      const std::unique_ptr<Backend> own = make_backend(be->device(), options);
      const auto* ocl = dynamic_cast<const opencl::OpenClBackend*>(own.get());
      EXPECT_NE(ocl, nullptr);
      return ocl ? FlashCpuGeometry{ocl->attention_cpu_lanes(), ocl->attention_cpu_rows()} : FlashCpuGeometry{};
    };
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const int native = opencl::gemm::native_float_width(be->device()) >= 16 ? 16 : 8;
    EXPECT_EQ(geometry(0, 0).lanes, native);
    EXPECT_EQ(geometry(0, 0).rows, 2 * native);
    EXPECT_EQ(geometry(0, 8).lanes, 8);
    EXPECT_EQ(geometry(0, 32).lanes, 16);
    EXPECT_EQ(geometry(0, 16).lanes, native);
    EXPECT_EQ(geometry(16, 0).rows, 32);
    EXPECT_EQ(geometry(8, 0).rows, 16);
    EXPECT_EQ(geometry(8, 8).rows, 8);
    try {
      geometry(16, 8);
      ADD_FAILURE() << "16 lanes x 8 rows must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("attention_cpu_rows must be attention_cpu_lanes or twice it"),
                std::string::npos)
          << e.what();
    }
  }
}

// The CPU flash kernel's blocking over memory (row blocks per work-item taking
// K and V in chunks of key blocks; a large head's K and V would otherwise be
// streamed from memory for every block of rows) changes the schedule, never a
// row's sums: forced blockings give the default's results bit for bit, with
// and without the causal mask, on ragged row and key blocks, for every
// geometry, and stay close to the reference.
TEST(AttentionFlashCpu, BlockingOverMemoryKeepsTheResultsBitForBit) {
  Rng rng(seed_from("attention flash cpu blocking"));
  const AttnShape shapes[] = {{2, 61, 53, 2, 24, 20, false}, {1, 75, 75, 1, 40, 40, true}, {1, 40, 97, 2, 8, 8, true}};
  struct Blocking {
    int row_blocks, key_chunk;
  };
  for (Backend* be : all_backends()) {
    if (be->device().kind == DeviceKind::reference || be->device().kind == DeviceKind::simulator) continue;
    for (const FlashCpuGeometry& g : kFlashCpuGeometries) {
      const auto backend = [&](Blocking b) {
        BackendOptions options = test_backend_options();
        options.kernel_style = KernelStyleChoice::cpu;
        options.attention_cpu_lanes = g.lanes;
        options.attention_cpu_rows = g.rows;
        options.attention_cpu_row_blocks = b.row_blocks;
        options.attention_cpu_key_chunk = b.key_chunk;
        return make_backend(be->device(), options);
      };
      const std::unique_ptr<Backend> plain = backend({1, 1000});
      for (const AttnShape& s : shapes) {
        const std::vector<HostTensor> qkv{random_normal(rng, {s.batch, s.sq, s.heads * s.d}, DType::f32),
                                          random_normal(rng, {s.batch, s.sk, s.heads * s.d}, DType::f32),
                                          random_normal(rng, {s.batch, s.sk, s.heads * s.dv}, DType::f32)};
        const float scale = static_cast<float>(1.0 / std::sqrt(double(s.d)));
        const Precision p{DType::f32};
        const HostTensor want = run_attention(*plain, qkv, p, {AttentionImpl::fused, 1}, int(s.heads), scale, s.causal);
        const HostTensor ref =
            run_attention(reference_backend(), qkv, p, {AttentionImpl::fused, 1}, int(s.heads), scale, s.causal);
        EXPECT_TRUE(tensors_close(want, ref, tolerance("attention_fused", p, Check::backend)));
        for (const Blocking b : {Blocking{3, 2}, Blocking{2, 1}, Blocking{16, 3}}) {
          SCOPED_TRACE("device \"" + be->device().name + "\" " + g.tag() + ", " + s.tag() + ", " +
                       std::to_string(b.row_blocks) + " row blocks, chunks of " + std::to_string(b.key_chunk));
          const std::unique_ptr<Backend> blocked = backend(b);
          EXPECT_TRUE(bitwise_equal(
              run_attention(*blocked, qkv, p, {AttentionImpl::fused, 1}, int(s.heads), scale, s.causal), want));
          expect_no_guard_violations(*blocked);
        }
      }
    }
  }
}

TEST(AttentionNonFinite, FlashKernelsPutNanAndInfWhereTheReferenceDoes) {
  Rng rng(seed_from("attention non-finite"));
  const std::int64_t sq = 11, sk = 37, heads = 2, d = 24, dv = 20;
  HostTensor q = random_normal(rng, {1, sq, heads * d}, DType::f32);
  HostTensor k = random_normal(rng, {1, sk, heads * d}, DType::f32);
  HostTensor v = random_normal(rng, {1, sk, heads * dv}, DType::f32);
  std::vector<float> qv = q.to_f32(), kv = k.to_f32(), vv = v.to_f32();
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t c = 0; c < d; ++c) qv[static_cast<std::size_t>(2 * heads * d + c)] = inf;  // row 2, head 0
  for (std::int64_t j = 0; j < sk; ++j) {  // head 1: keys all negative in channel 0, so row 5 scores -Inf
    kv[static_cast<std::size_t>(j * heads * d + d)] = -1.0f - std::abs(kv[static_cast<std::size_t>(j * heads * d + d)]);
  }
  qv[static_cast<std::size_t>(5 * heads * d + d)] = inf;
  vv[static_cast<std::size_t>(20 * heads * dv + 3)] = inf;               // key 20, head 0
  kv[static_cast<std::size_t>(33 * heads * d + d + 7)] = std::nanf("");  // key 33, head 1
  q = HostTensor::from_f32(q.shape, qv);
  k = HostTensor::from_f32(k.shape, kv);
  v = HostTensor::from_f32(v.shape, vv);
  const float scale = 0.2f;
  const HostTensor want =
      run_attention(reference_backend(), {q, k, v}, {DType::f32}, {AttentionImpl::fused, 1}, int(heads), scale);
  ASSERT_GT(count_nonfinite(want), 0);
  expect_flash_nonfinite_like({q, k, v}, want, int(heads), scale, "");
  expect_tensor_core_flash_nonfinite_like({q, k, v}, int(heads), scale);
}

// A row whose scores are -Inf over a whole first tile of keys (64 on the GPU
// flash kernel at this head size, 32 at d 64) takes none of them, so an Inf in
// those keys' V must not reach it (0 * Inf) once later keys score finitely:
// the reference skips them and the result is finite.
TEST(AttentionNonFinite, RowsSkipAWholeTileOfMinusInfScores) {
  Rng rng(seed_from("attention skipped tile"));
  for (const std::int64_t d : {std::int64_t{8}, std::int64_t{64}}) {
    const std::int64_t sq = 3, sk = 70, skipped = 64;
    HostTensor q = random_normal(rng, {1, sq, d}, DType::f32);
    HostTensor k = random_normal(rng, {1, sk, d}, DType::f32);
    HostTensor v = random_normal(rng, {1, sk, d}, DType::f32);
    std::vector<float> qv = q.to_f32(), kv = k.to_f32(), vv = v.to_f32();
    for (std::int64_t i = 0; i < sq; ++i) qv[static_cast<std::size_t>(i * d)] = i == 1 ? 1e30f : 0.0f;
    for (std::int64_t j = 0; j < sk; ++j) kv[static_cast<std::size_t>(j * d)] = j < skipped ? -1e30f : 0.0f;
    vv[static_cast<std::size_t>(3 * d + 1)] = std::numeric_limits<float>::infinity();  // key 3: skipped by row 1
    q = HostTensor::from_f32(q.shape, qv);
    k = HostTensor::from_f32(k.shape, kv);
    v = HostTensor::from_f32(v.shape, vv);
    const HostTensor want =
        run_attention(reference_backend(), {q, k, v}, {DType::f32}, {AttentionImpl::fused, 1}, 1, 0.5f);
    const std::vector<float> w = want.to_f32();
    ASSERT_TRUE(std::isfinite(w[static_cast<std::size_t>(d + 1)]));  // row 1 skipped key 3's Inf
    expect_flash_nonfinite_like({q, k, v}, want, 1, 0.5f, "d " + std::to_string(d) + " ");
  }
}

TEST(AttentionBadInput, ShapesDtypesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f16});
    const Tensor q = be->upload(HostTensor({2, 77, 64}, DType::f16));
    const Tensor k = be->upload(HostTensor({2, 13, 64}, DType::f16));
    const Tensor v = be->upload(HostTensor({2, 13, 48}, DType::f16));
    const Tensor k_bad = be->upload(HostTensor({2, 13, 60}, DType::f16));
    expect_op_error([&] { ops::attention(ctx, q, k_bad, v, 4, 0.125f); }, {"ATTENTION", "[2,77,64]", "[2,13,60]"});
    expect_op_error([&] { ops::attention(ctx, q, k, v, 5, 0.125f); }, {"ATTENTION", "heads=5"});
    const Tensor v_short = be->upload(HostTensor({2, 12, 48}, DType::f16));
    expect_op_error([&] { ops::attention(ctx, q, k, v_short, 4, 0.125f); }, {"ATTENTION", "[2,12,48]", "sequence"});
    const Tensor k1 = be->upload(HostTensor({1, 13, 64}, DType::f16));
    expect_op_error([&] { ops::attention(ctx, q, k1, v, 4, 0.125f); }, {"ATTENTION", "batch"});
    const Tensor k32 = be->upload(HostTensor({2, 13, 64}, DType::f32));
    expect_op_error([&] { ops::attention(ctx, q, k32, v, 4, 0.125f); }, {"ATTENTION", "f32"});
    const Tensor empty = be->upload(HostTensor({2, 0, 64}, DType::f16));
    expect_op_error([&] { ops::attention(ctx, q, empty, empty, 4, 0.125f); }, {"ATTENTION", "[2,0,64]"});
    const OpContext zero_slice = make_context(*be, {DType::f16}, {AttentionImpl::sliced, 0});
    expect_op_error([&] { ops::attention(zero_slice, q, k, v, 4, 0.125f); }, {"ATTENTION", "slice_size"});
  }
}

// Hand-worked values on every backend and in every implementation.
TEST(AttentionKnownValues, TwoKeysAndCausalAverages) {
  const Precision p{DType::f32};
  for_each_backend([&](Backend& be) {
    for (const AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::bmm, AttentionImpl::sliced}) {
      SCOPED_TRACE(std::string(attention_impl_name(impl)));
      const OpContext c = make_context(be, p, {impl, 1});
      // Scores {0, ln 3}: probabilities {1/4, 3/4}; values {4, 8} -> 7.
      const Tensor q = upload_values(be, {1, 1, 1}, {1});
      const Tensor k = upload_values(be, {1, 2, 1}, {0, float(std::log(3.0))});
      const Tensor v = upload_values(be, {1, 2, 1}, {4, 8});
      EXPECT_TRUE(matches_known(be.download(ops::attention(c, q, k, v, 1, 1.0f)), {7}, "attention", p));
      // Causal with zero queries: query i averages v[0..i].
      const Tensor q3 = upload_values(be, {1, 3, 1}, {0, 0, 0});
      const Tensor k3 = upload_values(be, {1, 3, 1}, {1, 2, 3});
      const Tensor v3 = upload_values(be, {1, 3, 1}, {3, 6, 12});
      EXPECT_TRUE(
          matches_known(be.download(ops::attention(c, q3, k3, v3, 1, 1.0f, true)), {3, 4.5f, 7}, "attention", p));
    }
  });
}

// The GPU kernel family, forced on each OpenCL device, puts its family and
// every fallback it takes on record (the run report's "kernels"): causal
// attention leaves the flash kernel, and says so.
TEST(AttentionKernelNotes, FamilyAndFallbacksAreOnRecord) {
  for_each_opencl([](Backend& own) {
    BackendOptions options = test_backend_options();
    options.kernel_style = KernelStyleChoice::gpu;
    const std::unique_ptr<Backend> gpu = make_backend(own.device(), options);
    Rng rng(seed_from("kernel notes"));
    const HostTensor q = random_normal(rng, {1, 9, 2 * 8}, DType::f32);
    const HostTensor want =
        run_attention(reference_backend(), {q, q, q}, {DType::f32}, {AttentionImpl::fused, 1}, 2, 0.3f, true);
    const HostTensor got = run_attention(*gpu, {q, q, q}, {DType::f32}, {AttentionImpl::fused, 1}, 2, 0.3f, true);
    EXPECT_TRUE(tensors_close(got, want, tolerance("attention_fused", Precision{DType::f32}, Check::backend)));
    expect_no_guard_violations(*gpu);
    const std::vector<std::string> notes = gpu->kernel_notes();
    ASSERT_FALSE(notes.empty());
    EXPECT_EQ(notes.front().rfind("kernel family: gpu", 0), 0u) << notes.front();
    bool causal = false;
    for (const auto& n : notes) causal = causal || n.find("flash attention not used") != std::string::npos;
    EXPECT_TRUE(causal) << "no fallback note for causal attention";
    // The suite's own backend names the family its options chose.
    (void)run_attention(own, {q, q, q}, {DType::f32}, {AttentionImpl::fused, 1}, 2, 0.3f);
    ASSERT_FALSE(own.kernel_notes().empty());
    const std::string family = own.kernel_notes().front();
    const bool gpu_forced = test_backend_options().kernel_style == KernelStyleChoice::gpu;
    EXPECT_EQ(family.rfind(
                  gpu_forced || own.device().kind != DeviceKind::cpu ? "kernel family: gpu" : "kernel family: cpu", 0),
              0u)
        << family;
  });
}
}  // namespace
}  // namespace nanscope::test
