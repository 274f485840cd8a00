// LINEAR with GEGLU in its GEMM's epilogue (ops::linear_geglu; gemm::Epilogue): the same bits as the two ops
// on every backend, precision and blocking, the fused kernel really runs where the backend says it does
// (Backend::linear_fuses_epilogue, from gemm::fuses_epilogue), and the calls that need the projection on its
// own (the layer trace, another dtype for the next module) take the two ops.

#include <cmath>
#include <limits>

#include "backend/dry_run_backend.hpp"
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "support/backends.hpp"
#include "support/op_case.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

namespace nanscope::test {
namespace {

// The shapes: tokens (rows: odd, a partial row block), in features (k: 700 takes several k-blocks), out features
// of the product (GEGLU: twice the output's; 160 is a multiple of both 16- and 32-column panels, 80 only of 16,
// 88 of neither: its calls run the two ops; 320 fills 10 or 20 column panels, where half-precision rows are
// converted to f32 first: gemm_cpu_direct_f32a_geglu).
struct LinearShape {
  std::int64_t batch, tokens, in, out;
  bool bias;
};
constexpr LinearShape kShapes[] = {{2, 37, 70, 160, true},
                                   {1, 29, 700, 160, false},
                                   {1, 5, 64, 80, true},
                                   {2, 9, 40, 88, true},
                                   {1, 21, 64, 320, true}};

std::string describe(const LinearShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.tokens) + "x" + std::to_string(s.in) + " -> " +
         std::to_string(s.out) + (s.bias ? " with bias" : "");
}

// Whether the backend fuses the epilogue into this LINEAR (what the ops ask before they call matmul()).
bool fuses(const Backend& be, const Precision& p, const LinearShape& s) {
  return be.linear_fuses_epilogue(MatmulEpilogue::geglu, p, s.batch * s.tokens, s.out, s.in, s.bias);
}

// How many launches of a kernel the backend's profile holds.
int launches_of(opencl::OpenClBackend& be, std::string_view op_prefix) {
  int n = 0;
  for (const auto& t : be.profile()) {
    if (t.op.rfind(op_prefix, 0) == 0) n += static_cast<int>(t.launches);
  }
  return n;
}

TEST(LinearEpilogue, GegluBitEqualToTheTwoOps) {
  for (const Precision& p : precision_matrix()) {
    for (const LinearShape& s : kShapes) {
      SCOPED_TRACE(p.describe() + ", " + describe(s));
      Rng rng(seed_from("linear epilogue " + describe(s) + p.describe()));
      const HostTensor hx = random_normal(rng, {s.batch, s.tokens, s.in}, p.dtype);
      const HostTensor hw = random_normal(rng, {s.out, s.in}, p.dtype, 0.0, 1.0 / std::sqrt(double(s.in)));
      const HostTensor hb = random_normal(rng, {s.out}, p.dtype, 0.0, 0.1);
      for_each_backend([&](Backend& be) {
        const Tensor x = be.upload(hx), w = be.upload(hw), b = be.upload(hb);
        const Tensor* bias = s.bias ? &b : nullptr;
        const OpContext ctx = make_context(be, p, {}, "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj");
        const OpContext act = make_context(be, p, {}, "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0");
        const HostTensor two = be.download(ops::geglu(act, ops::linear(ctx, x, w, bias)));
        const HostTensor fused = be.download(ops::linear_geglu(ctx, act, x, w, bias));
        EXPECT_EQ(fused.shape, (Shape{s.batch, s.tokens, s.out / 2}));
        EXPECT_TRUE(bitwise_equal(fused, two));
        // Against the reference backend's sums in double (a GEMM that wrote nothing would match the bits above
        // only where the two ops wrote nothing too).
        Backend& ref = reference_backend();
        const Tensor rb = ref.upload(hb);
        const HostTensor want =
            ref.download(ops::geglu(make_context(ref, p), ops::linear(make_context(ref, p), ref.upload(hx),
                                                                      ref.upload(hw), s.bias ? &rb : nullptr)));
        EXPECT_TRUE(tensors_close(fused, want, tolerance("matmul", p, Check::backend)));
      });
    }
  }
}

// The fused kernel runs where the backend says (no GEGLU launch of its own), and where it cannot (88
// outputs, native accumulation) the two ops do; the reference backend and the GPU family never fuse, and the
// memory plan's stand-in answers as the backend it stands in for (its plan then holds the buffers the calls
// make).
TEST(LinearEpilogue, FusedWhereTheGemmCanElseTheTwoOps) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  for (Backend* be : opencl_backends()) {
    if (dynamic_cast<opencl::OpenClBackend&>(*be).kernel_style() == opencl::KernelStyle::gpu) {
      EXPECT_FALSE(fuses(*be, Precision{DType::f32}, kShapes[0])) << be->device().name;
    }
  }
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  const opencl::gemm::Tuning& t = opencl::gemm::tuning(cpu.front()->device());
  for (const Precision& p : precision_matrix()) {
    for (const LinearShape& s : kShapes) {
      SCOPED_TRACE(p.describe() + ", " + describe(s));
      BackendOptions o = test_backend_options();
      o.profile = true;
      const auto owned = make_backend(cpu.front()->device(), o);
      auto& be = dynamic_cast<opencl::OpenClBackend&>(*owned);
      const bool f32_sums = p.dtype == DType::f32 || p.accumulate == Accumulate::f32;
      const bool geglu_fuses = f32_sums && t.nv <= 2 && s.out % t.nr() == 0;
      EXPECT_EQ(fuses(be, p, s), geglu_fuses);
      EXPECT_EQ(fuses(DryRunBackend(be), p, s), geglu_fuses);
      EXPECT_FALSE(fuses(reference_backend(), p, s));
      Rng rng(seed_from("linear epilogue launches"));
      const Tensor x = be.upload(random_normal(rng, {s.batch, s.tokens, s.in}, p.dtype));
      const Tensor w = be.upload(random_normal(rng, {s.out, s.in}, p.dtype, 0.0, 0.1));
      const OpContext ctx = make_context(be, p);
      (void)be.download(ops::linear_geglu(ctx, ctx, x, w, nullptr));
      EXPECT_EQ(launches_of(be, "GEGLU"), geglu_fuses ? 0 : 1);
      const bool f32_rows = p.dtype != DType::f32 && s.out / t.nr() >= 8;  // gemm::compute_direct_a
      EXPECT_EQ(launches_of(be, f32_rows ? "MATMUL gemm_cpu_direct_f32a_geglu" : "MATMUL gemm_cpu_direct_a_geglu"),
                geglu_fuses ? 1 : 0);
    }
  }
}

// The layer trace needs the projection's output on its own: a traced call runs (and records) the two ops; so
// does a next module in another dtype.
TEST(LinearEpilogue, TracedAndMixedCallsTakeTheTwoOps) {
  for (const DType dt : {DType::f32, DType::f16}) {
    const Precision p{dt};
    SCOPED_TRACE(p.describe());
    Rng rng(seed_from("linear epilogue traced"));
    const HostTensor hx = random_normal(rng, {1, 21, 48}, dt), hw = random_normal(rng, {64, 48}, dt, 0.0, 0.15);
    for_each_backend([&](Backend& be) {
      const Tensor x = be.upload(hx), w = be.upload(hw);
      const OpContext ctx = make_context(be, p, {}, "mid_block.attentions.0.transformer_blocks.0.ff.net.0.proj");
      const OpContext act = make_context(be, p, {}, "mid_block.attentions.0.transformer_blocks.0.ff.net.0");
      OpNameRecorder rec;
      OpContext traced = ctx, traced_act = act;
      traced.tracer = traced_act.tracer = &rec;
      EXPECT_TRUE(bitwise_equal(be.download(ops::linear_geglu(traced, traced_act, x, w, nullptr)),
                                be.download(ops::geglu(act, ops::linear(ctx, x, w, nullptr)))));
      EXPECT_EQ(rec.names, (std::vector<std::string>{"LINEAR", "GEGLU"}));
      // The activation module in f32 under an f16 projection: GEGLU casts the projection first.
      if (dt == DType::f16) {
        OpContext mixed = ctx, mixed_act = make_context(be, Precision{DType::f32});
        mixed.mixed_precision = mixed_act.mixed_precision = true;
        const HostTensor got = be.download(ops::linear_geglu(mixed, mixed_act, x, w, nullptr));
        EXPECT_EQ(got.dtype, DType::f32);
        EXPECT_TRUE(bitwise_equal(got, be.download(ops::geglu(mixed_act, ops::linear(mixed, x, w, nullptr)))));
      }
    });
  }
}

// What the inspector looks for comes out of the fused kernels as out of the two ops: f16 products past 65504 are
// Inf before the GELU (Inf * gelu(g), NaN where the gate's GELU is 0 or the value is Inf times 0), a NaN in one
// token's input is NaN across that token's outputs only.
TEST(LinearEpilogue, NonFiniteValuesComeOutAsFromTheTwoOps) {
  for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Precision p{dt};
    SCOPED_TRACE(p.describe());
    Rng rng(seed_from("linear epilogue non-finite"));
    HostTensor hx = random_normal(rng, {1, 19, 32}, dt, 0.0, 1.0);
    const HostTensor hw = random_normal(rng, {64, 32}, dt, 0.0, 0.3);
    for (std::int64_t k = 0; k < 32; ++k) hx.set(3 * 32 + k, 30000.0f);  // token 3: products past f16's range
    hx.set(7 * 32 + 5, std::numeric_limits<float>::quiet_NaN());         // token 7: NaN
    for_each_backend([&](Backend& be) {
      const Tensor x = be.upload(hx), w = be.upload(hw);
      const OpContext ctx = make_context(be, p);
      const HostTensor fused = be.download(ops::linear_geglu(ctx, ctx, x, w, nullptr));
      EXPECT_TRUE(bitwise_equal(fused, be.download(ops::geglu(ctx, ops::linear(ctx, x, w, nullptr)))));
      int nan_tokens_other_than_7 = 0, non_finite_token_3 = 0;
      for (std::int64_t i = 0; i < fused.numel(); ++i) {
        const float v = fused.get(i);
        const std::int64_t token = i / 32;
        if (std::isnan(v) && token != 7 && token != 3) ++nan_tokens_other_than_7;
        if (token == 7) {
          EXPECT_TRUE(std::isnan(v)) << i;
        }
        if (token == 3 && !std::isfinite(v)) ++non_finite_token_3;
      }
      EXPECT_EQ(nan_tokens_other_than_7, 0);
      if (dt == DType::f16) {
        EXPECT_GT(non_finite_token_3, 0);
      }
    });
  }
}

// A GEGLU projection's weight prepared at load keeps its panels in the epilogue's split order: the first call
// finds them (nothing packed then); a plain LINEAR of the same weight packs B's own order per call (one kept view
// per weight, WeightPanels::make: the split panels stay), and both give the bits of a backend that packs per call.
TEST(LinearEpilogue, SplitPanelsPreparedAtLoadServeTheFirstCall) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  const opencl::gemm::Tuning& t = opencl::gemm::tuning(cpu.front()->device());
  if (t.nv > 2) GTEST_SKIP() << "no GEGLU epilogue at " << t.nr() << " columns per panel (" << t.source << ")";
  for (const DType dt : {DType::f32, DType::f16}) {
    const Precision p{dt};
    SCOPED_TRACE(p.describe());
    BackendOptions o = test_backend_options();
    o.profile = true;
    const auto owned = make_backend(cpu.front()->device(), o);
    auto& be = dynamic_cast<opencl::OpenClBackend&>(*owned);
    BackendOptions none = test_backend_options();
    none.weight_panel_bytes = 0;
    const auto uncached = make_backend(be.device(), none);
    Rng rng(seed_from("linear epilogue prepared"));
    const HostTensor hx = random_normal(rng, {1, 33, 96}, dt), hw = random_normal(rng, {128, 96}, dt, 0.0, 0.1);
    const Tensor x = be.upload(hx), w = be.upload(hw);
    // The program must be built for prepare to pack (gemm::prepare_weight): one call on another weight builds it.
    (void)be.download(ops::linear(make_context(be, p), x, be.upload(random_normal(rng, {16, 96}, dt)), nullptr));
    const std::size_t kept0 = be.weight_panels().kept_bytes();
    be.prepare_linear_weight(w, p, true);
    const std::size_t kept1 = be.weight_panels().kept_bytes();
    EXPECT_GT(kept1, kept0) << "packed at load";
    const int packs0 = launches_of(be, "MATMUL gemm_pack_b");
    const OpContext ctx = make_context(be, p);
    const HostTensor geglu = be.download(ops::linear_geglu(ctx, ctx, x, w, nullptr));
    EXPECT_EQ(launches_of(be, "MATMUL gemm_pack_b"), packs0) << "the first call found the panels";
    EXPECT_EQ(be.weight_panels().kept_bytes(), kept1);
    const HostTensor plain = be.download(ops::linear(ctx, x, w, nullptr));
    EXPECT_EQ(launches_of(be, "MATMUL gemm_pack_b"), packs0 + 1) << "B's own order packed for the call";
    EXPECT_EQ(be.weight_panels().kept_bytes(), kept1) << "the split panels stay, nothing else kept";
    (void)be.download(ops::linear_geglu(ctx, ctx, x, w, nullptr));
    EXPECT_EQ(launches_of(be, "MATMUL gemm_pack_b"), packs0 + 1) << "and serve the next GEGLU call";
    const OpContext uctx = make_context(*uncached, p);
    const Tensor ux = uncached->upload(hx), uw = uncached->upload(hw);
    EXPECT_TRUE(bitwise_equal(geglu, uncached->download(ops::geglu(uctx, ops::linear(uctx, ux, uw, nullptr)))));
    EXPECT_TRUE(bitwise_equal(plain, uncached->download(ops::linear(uctx, ux, uw, nullptr))));
  }
}

}  // namespace
}  // namespace nanscope::test
