// MATMUL and LINEAR: the precision matrix on odd and SD shapes, the f16 native
// overflow that f32 accumulation avoids, and bad inputs.

#include <cmath>

#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "support/backends.hpp"
#include "support/op_case.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

namespace nanscope::test {
namespace {

OpCase matmul_case(const Shape& a, const Shape& b, bool trans_b, float alpha, bool bias) {
  const std::int64_t n = trans_b ? b[b.size() - 2] : b.back();
  OpCase c;
  c.op = "matmul";
  c.family = "matmul";
  c.desc = "a" + shape_tag(a) + "_b" + shape_tag(b) + (trans_b ? "_tb" : "") + (alpha != 1.0f ? "_alpha" : "") +
           (bias ? "_bias" : "");
  c.oracle = {{"op", "matmul"}, {"trans_b", trans_b}, {"alpha", alpha}, {"bias", bias}};
  c.flops = 2.0 * static_cast<double>(shape_numel(a)) * static_cast<double>(n);
  c.build = [=](Rng& rng, const Precision& p) {
    std::vector<HostTensor> in{random_normal(rng, a, p.dtype), random_normal(rng, b, p.dtype)};
    if (bias) in.push_back(random_normal(rng, {n}, p.dtype));
    return in;
  };
  c.run = [=](const OpContext& ctx, const std::vector<Tensor>& in) {
    return ops::matmul(ctx, in[0], in[1], trans_b, alpha, bias ? &in[2] : nullptr);
  };
  return c;
}

OpCase linear_case(const Shape& x, std::int64_t out_features, bool bias) {
  const std::int64_t k = x.back();
  OpCase c;
  c.op = "linear";
  c.family = "matmul";
  c.desc = "x" + shape_tag(x) + "_out" + std::to_string(out_features) + (bias ? "_bias" : "");
  c.oracle = {{"op", "linear"}, {"bias", bias}};
  c.flops = 2.0 * static_cast<double>(shape_numel(x)) * static_cast<double>(out_features);
  c.build = [=](Rng& rng, const Precision& p) {
    // Weights at the scale of a trained layer (std 1/sqrt(k)) keep outputs O(1).
    std::vector<HostTensor> in{random_normal(rng, x, p.dtype),
                               random_normal(rng, {out_features, k}, p.dtype, 0.0, 1.0 / std::sqrt(double(k)))};
    if (bias) in.push_back(random_normal(rng, {out_features}, p.dtype, 0.0, 0.1));
    return in;
  };
  c.run = [=](const OpContext& ctx, const std::vector<Tensor>& in) {
    return ops::linear(ctx, in[0], in[1], bias ? &in[2] : nullptr);
  };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c) {
    for (auto& p : expand(c, precision_matrix())) all.push_back(std::move(p));
  };
  add(matmul_case({1, 77}, {77, 13}, false, 1.0f, true));           // M=1, K=77, shared weights
  add(matmul_case({3, 5, 77}, {3, 77, 13}, false, 0.125f, false));  // batched, alpha
  add(matmul_case({2, 7, 40}, {2, 9, 40}, true, 1.0f, false));      // q.k^T layout
  add(matmul_case({2, 3, 5, 13}, {13, 7}, false, 1.0f, true));      // rank 4 a, shared b
  add(linear_case({5, 13}, 7, false));
  add(linear_case({2, 77, 768}, 320, true));    // SD cross-attention to_k on CLIP output
  add(linear_case({1, 1024, 320}, 320, true));  // SD attention projection, 32x32 latent
  // k = 700: several k-blocks (passes) of the CPU panel GEMM and the GPU k-tiles, odd m and n.
  add(linear_case({29, 700}, 41, true));
  add(matmul_case({2, 29, 700}, {2, 700, 41}, false, 1.0f, false));
  // m = 67, n = 77: past one 64-row GPU tile, ragged edges in both directions.
  add(matmul_case({2, 67, 70}, {2, 70, 77}, false, 0.7f, true));
  // f16 with f32 accumulation runs on NVIDIA's tensor cores from 64 x 64 x 32 (gemm.hpp
  // tensor_core_tiles); the case above and linear 2x77x768 take the 64 x 128 blocks. Here B
  // stored as [N, K] (k-contiguous loads), and a GEMM big enough for the 128 x 128 blocks on a
  // 132-unit GPU (8 x 6 blocks x 3 batches), every edge ragged (k = 40: a 32-deep tile and 8).
  for (auto& p : expand(matmul_case({2, 80, 72}, {2, 96, 72}, true, 1.0f, false), {Precision{DType::f16}})) {
    all.push_back(std::move(p));
  }
  for (auto& p : expand(matmul_case({3, 1000, 40}, {3, 40, 700}, false, 1.0f, true), {Precision{DType::f16}})) {
    all.push_back(std::move(p));
  }
  return all;
}

NANSCOPE_OP_TESTS(Matmul, cases());

// The tensor-core rule (gemm.hpp tensor_core_tiles): only f16 storage with f32
// accumulation in the GPU family on NVIDIA sm_80+, only shapes of at least
// 64 x 64 x 32, and 128 x 128 blocks only where they give each compute unit one
// (no GPU here runs the kernel: the op suite does on an NVIDIA device).
TEST(MatmulTensorCores, SelectionRule) {
  using opencl::gemm::MmaTiles;
  using opencl::gemm::tensor_core_tiles;
  opencl::gemm::TensorCoreCase h100;
  h100.gpu_style = true;
  h100.nv_compute_capability = 90;
  h100.dtype = DType::f16;
  h100.batch = 2, h100.m = 4096, h100.n = 320, h100.k = 320;  // SD attention projection, 64x64 latent
  h100.compute_units = 132;
  h100.max_work_group_size = 1024;
  const MmaTiles big{2, 4}, small{1, 4};
  EXPECT_EQ(tensor_core_tiles(h100), big);  // 32 x 3 blocks x 2 batches >= 132 units
  auto c = h100;
  c.batch = 1;
  EXPECT_EQ(tensor_core_tiles(c), small);  // 96 blocks of 128 x 128 would leave units idle
  c = h100;
  c.max_work_group_size = 128;
  EXPECT_EQ(tensor_core_tiles(c), small);
  c = h100;
  c.m = 64, c.n = 64, c.k = 32, c.batch = 1;  // the smallest shape taken
  EXPECT_EQ(tensor_core_tiles(c), small);
  c = h100;
  c.nv_compute_capability = 80;  // A100
  EXPECT_EQ(tensor_core_tiles(c), big);
  const auto refused = [&](auto change) {
    auto x = h100;
    change(x);
    return !tensor_core_tiles(x).has_value();
  };
  using Case = opencl::gemm::TensorCoreCase;
  EXPECT_TRUE(refused([](Case& x) { x.gpu_style = false; }));
  EXPECT_TRUE(refused([](Case& x) { x.allowed = false; }));  // NANSCOPE_TENSOR_CORES=0, or an earlier failure
  EXPECT_TRUE(refused([](Case& x) { x.nv_compute_capability = 75; }));  // m16n8k16 needs sm_80
  EXPECT_TRUE(refused([](Case& x) { x.nv_compute_capability = 0; }));   // not NVIDIA
  EXPECT_TRUE(refused([](Case& x) { x.dtype = DType::f32; }));
  EXPECT_TRUE(refused([](Case& x) { x.dtype = DType::bf16; }));
  EXPECT_TRUE(refused([](Case& x) { x.native_accumulation = true; }));
  EXPECT_TRUE(refused([](Case& x) { x.m = 63; }));
  EXPECT_TRUE(refused([](Case& x) { x.n = 63; }));
  EXPECT_TRUE(refused([](Case& x) { x.k = 31; }));
  EXPECT_TRUE(refused([](Case& x) { x.max_work_group_size = 64; }));  // not even the 4-warp blocks
}

// gemm_cpu_direct_a (A read where it lies, f16 / bf16 rows converted in the
// kernel, or to f32 rows first where 8 or more column panels read them:
// gemm_cpu_direct_f32a) against gemm_cpu on A packed into panels by
// gemm_pack_a: the same sums in the same order, so the same bytes, for every
// storage dtype. k = 700 runs in three k-blocks (240, 240, 220: the last one
// ends in 12 k that the half kernel reads one at a time), k = 77 in one block
// of 4 x 16 + 13; m = 29 leaves a partial row block, n = 41 a partial column
// panel; batch 2 with a per-batch A, alpha and a bias; n = 1041 (33 panels of
// 32, 66 of 16) has many column work-items over the same converted rows, the
// last one partial, and its rows are converted first; n = 16 is one column
// panel. m = 3000 with one A for both batches (a convolution's weights), a
// bias per row and n = 300 converts its rows first, in chunks; m = 200, k = 17000 (between the im2col depths of
// the UNet's 8x8 convolutions, 11520 and 23040: a chunk of rows would hold less than two row groups at every
// block height NANSCOPE_GEMM_CPU takes, 4 to 8 rows) converts them in the GEMM. The
// per-batch cases are also checked against the reference backend, so a kernel that wrote nothing would not pass.
TEST(MatmulDirectA, ReadsAWhereItLiesBitForBitAsThePackedPanels) {
  // Only the CPU family reads A in place (gemm::reads_a_directly); elsewhere this would only build
  // programs no op uses (about 80 s of PoCL compiles under NANSCOPE_KERNEL_STYLE=gpu).
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  struct Case {
    std::int64_t m, k, n;
    bool shared_a;  // one A for every batch, and a bias per row
  };
  const Case cases[] = {{29, 700, 41, false}, {29, 77, 41, false},    {29, 700, 1041, false},
                        {29, 77, 16, false},  {3000, 700, 300, true}, {200, 17000, 100, true}};
  for (opencl::OpenClBackend* ocl : cpu) {
    Backend* be = ocl;
    namespace gemm = opencl::gemm;
    const gemm::Tuning& t = gemm::tuning(ocl->device());
    for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (const auto& [m, k, n, shared_a] : cases) {
        constexpr std::int64_t batch = 2;
        const Precision p{dt};
        SCOPED_TRACE("device \"" + be->device().name + "\", " + p.describe() + ", m " + std::to_string(m) + ", k " +
                     std::to_string(k) + ", n " + std::to_string(n) + (shared_a ? ", shared A" : ""));
        Rng rng(seed_from("matmul direct a " + std::to_string(k)));
        SCOPED_TRACE("seed " + std::to_string(rng.seed()));
        const std::int64_t a_batches = shared_a ? 1 : batch;
        const HostTensor ha = random_normal(rng, {a_batches, m, k}, dt), hb = random_normal(rng, {batch, k, n}, dt);
        const HostTensor hbias = random_normal(rng, {shared_a ? m : n}, dt);
        const Tensor a = be->upload(ha), b = be->upload(hb), bias = be->upload(hbias);
        const std::int64_t a_f = gemm::a_panel_floats(t, m, k), b_f = gemm::b_panel_floats(t, n, k);
        const Tensor a_panels = be->upload(HostTensor({a_batches * a_f}, DType::f32));
        const Tensor b_panels = be->upload(HostTensor({batch * b_f}, DType::f32));
        const std::string opts = gemm::options(*ocl, p);
        gemm::Problem pr;
        pr.a = {ocl->buffer(a), 0, shared_a ? 0 : m * k, k, 1};
        pr.b = {ocl->buffer(b), 0, k * n, n, 1};
        gemm::pack_a(*ocl, p, pr.a, a_batches, m, k, ocl->buffer(a_panels), a_f, "TEST");
        gemm::pack_b(*ocl, opts, pr.b, batch, k, n, ocl->buffer(b_panels), b_f, "TEST");
        pr.b_panels = ocl->buffer(b_panels);
        pr.b_panels_bs = b_f;
        pr.bias = ocl->buffer(bias);
        pr.bias_mode = shared_a ? gemm::kBiasRow : gemm::kBiasCol;
        pr.alpha = 0.7f;
        pr.batch = batch, pr.m = m, pr.n = n, pr.k = k;
        pr.c_bs = m * n, pr.ldc = n;
        const Tensor packed = be->upload(HostTensor({batch, m, n}, dt));
        const Tensor direct = be->upload(HostTensor({batch, m, n}, dt));
        pr.c = ocl->buffer(packed);
        gemm::compute_panels(*ocl, p, ocl->buffer(a_panels), 0, shared_a ? 0 : a_f, pr, "TEST");
        pr.c = ocl->buffer(direct);
        gemm::compute_direct_a(*ocl, p, pr.a, pr, "TEST");
        if (dt != DType::f32) {
          const bool converted_first = m == 3000 || n == 1041;  // 8 and more column panels, k short enough
          EXPECT_EQ(gemm::converts_a_rows(*ocl, p, pr.a, pr), converted_first);
        }
        const HostTensor got = be->download(direct), want = be->download(packed);
        EXPECT_TRUE(bitwise_equal(got, want)) << "gemm_cpu_direct_a against gemm_cpu on packed panels";
        if (shared_a) {
          // The last row's sums (its own bias, the last chunk) are not left at zero.
          const std::vector<float> v = got.to_f32();
          EXPECT_NE(v[static_cast<std::size_t>((batch * m - 1) * n)], 0.0f);
          continue;
        }
        Backend& ref = reference_backend();
        const Tensor ref_bias = ref.upload(hbias);
        const HostTensor expected =
            ref.download(ops::matmul(make_context(ref, p), ref.upload(ha), ref.upload(hb), false, 0.7f, &ref_bias));
        EXPECT_TRUE(tensors_close(got, expected, tolerance("matmul", p, Check::backend)));
      }
    }
  }
}

// A backend that packs every LINEAR weight per call (the reference for kept panels).
std::unique_ptr<Backend> backend_keeping_no_panels(const DeviceInfo& device) {
  BackendOptions none_kept = test_backend_options();
  none_kept.weight_panel_bytes = 0;
  return make_backend(device, none_kept);
}

// LINEAR weights' panels are packed at their first use and kept with the
// weight (backend/opencl/weight_panels.hpp): the kept panels give the same
// bits as packing per call (a backend that keeps none), are found again only
// for the same buffer and view, go back to the pool with the weight, and stop
// at the budget.
TEST(MatmulWeightPanels, KeptWithTheWeightBitForBitAndGivenBackWithIt) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();  // the GPU family reads B where it lies
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  for (opencl::OpenClBackend* ocl : cpu) {
    Backend* be = ocl;
    const auto uncached = backend_keeping_no_panels(be->device());
    BackendOptions small = test_backend_options();
    small.weight_panel_bytes = 64 * 1024;
    const auto tight = make_backend(be->device(), small);
    for (const DType dt : {DType::f32, DType::f16}) {
      const Precision p{dt};
      SCOPED_TRACE("device \"" + be->device().name + "\", " + p.describe());
      Rng rng(seed_from("weight panels"));
      SCOPED_TRACE("seed " + std::to_string(rng.seed()));
      constexpr std::int64_t tokens = 37, in = 70, out = 90;
      const HostTensor hx = random_normal(rng, {2, tokens, in}, dt), hw = random_normal(rng, {out, in}, dt);
      const HostTensor hbias = random_normal(rng, {out}, dt);
      const auto run = [&](Backend& b, const Tensor& x, const Tensor& w, const Tensor& bias) {
        return b.download(ops::linear(make_context(b, p), x, w, &bias));
      };
      const HostTensor want = run(*uncached, uncached->upload(hx), uncached->upload(hw), uncached->upload(hbias));
      const std::uint64_t before = ocl->allocated_bytes();
      const std::size_t kept_before = ocl->weight_panels().kept_bytes();
      {
        const Tensor x = be->upload(hx), bias = be->upload(hbias);
        const Tensor w = be->upload(hw);
        const HostTensor first = run(*be, x, w, bias);
        const std::size_t kept = ocl->weight_panels().kept_bytes() - kept_before;
        EXPECT_GT(kept, 0u) << "the first use packs the weight's panels and keeps them";
        const HostTensor second = run(*be, x, w, bias);
        EXPECT_EQ(ocl->weight_panels().kept_bytes() - kept_before, kept) << "the second use finds them";
        EXPECT_TRUE(bitwise_equal(first, want)) << "kept panels against packing per call";
        EXPECT_TRUE(bitwise_equal(second, want));
        // The same buffer under another view ([45, 140]: other in and out) is not served the [90, 70] panels.
        const Tensor w2 = w.reshaped({45, 140});
        const Tensor x2 = be->upload(random_normal(rng, {3, 140}, dt));
        const HostTensor got2 = be->download(ops::linear(make_context(*be, p), x2, w2, nullptr));
        const HostTensor want2 =
            uncached->download(ops::linear(make_context(*uncached, p), uncached->upload(be->download(x2)),
                                           uncached->upload(hw).reshaped({45, 140}), nullptr));
        EXPECT_TRUE(bitwise_equal(got2, want2)) << "another view of a weight with kept panels";
        // A converted copy of the weight (mixed precision: a weight stored in another dtype than the op's) is
        // never kept.
        if (dt == DType::f16) {
          const std::size_t k0 = ocl->weight_panels().kept_bytes();
          const Tensor w32 = be->upload(HostTensor::from_f32({out, in}, hw.to_f32(), DType::f32));
          OpContext mixed = make_context(*be, p);
          mixed.mixed_precision = true;
          (void)be->download(ops::linear(mixed, x, w32, &bias));
          EXPECT_EQ(ocl->weight_panels().kept_bytes(), k0) << "a copy made for one call is not kept";
        }
      }
      EXPECT_EQ(ocl->weight_panels().kept_bytes(), kept_before) << "the panels go with the weight";
      EXPECT_EQ(ocl->allocated_bytes(), before);
      // Past the budget (64 KiB: the [90, 70] weight's panels take 96 x 70 x 4 = 26 KiB, served as 28; a [900, 70]
      // one 252 KiB)
      // the panels are packed per call, with the same results.
      auto* small_ocl = dynamic_cast<opencl::OpenClBackend*>(tight.get());
      ASSERT_NE(small_ocl, nullptr);
      const HostTensor hbig = random_normal(rng, {900, in}, dt);
      const Tensor big = tight->upload(hbig), xs = tight->upload(hx);
      const HostTensor got_big = tight->download(ops::linear(make_context(*tight, p), xs, big, nullptr));
      EXPECT_EQ(small_ocl->weight_panels().kept_bytes(), 0u) << "over the budget: nothing kept";
      const HostTensor want_big = uncached->download(
          ops::linear(make_context(*uncached, p), uncached->upload(hx), uncached->upload(hbig), nullptr));
      EXPECT_TRUE(bitwise_equal(got_big, want_big));
      // The memory plan's limit: no room left for the run, nothing new is kept; the limit lifted, the budget holds.
      const Tensor small_w = tight->upload(hw);
      tight->limit_cache_growth(0);
      (void)tight->download(ops::linear(make_context(*tight, p), xs, small_w, nullptr));
      EXPECT_EQ(small_ocl->weight_panels().kept_bytes(), 0u) << "no room for the run: nothing kept";
      tight->limit_cache_growth(std::uint64_t{1} << 40);
      EXPECT_EQ(small_ocl->weight_panels().budget_bytes(), 64u * 1024u) << "never above the budget it was made with";
      (void)tight->download(ops::linear(make_context(*tight, p), xs, small_w, nullptr));
      EXPECT_GT(small_ocl->weight_panels().kept_bytes(), 0u) << "room again: kept";
    }
  }
}

// Row 0 of a is 16 everywhere; column 1 of b is +16 for the first 300 k and -16
// for the last 300. The exact result there is 0, but its partial sums reach
// 76800: with native f16 accumulation they pass 65504 and stay +Inf.
TEST(MatmulFailureModes, F16NativeSumOverflowsToInfInPlace) {
  constexpr std::int64_t m = 3, k = 600, n = 4;
  Rng rng(seed_from("matmul overflow"));
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  std::vector<float> a(m * k), b(k * n);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < k; ++j) a[i * k + j] = i == 0 ? 16.0f : static_cast<float>(0.1 * rng.normal());
  }
  for (std::int64_t j = 0; j < k; ++j) {
    b[j * n + 0] = 0.5f;
    b[j * n + 1] = j < 300 ? 16.0f : -16.0f;
    b[j * n + 2] = j % 2 ? 1.0f : -1.0f;
    b[j * n + 3] = static_cast<float>(0.1 * rng.normal());
  }
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const Tensor ta = be->upload(HostTensor::from_f32({m, k}, a, DType::f16));
    const Tensor tb = be->upload(HostTensor::from_f32({k, n}, b, DType::f16));

    const auto native = be->download(ops::matmul(make_context(*be, {DType::f16, Accumulate::native}), ta, tb));
    const auto exact = be->download(ops::matmul(make_context(*be, {DType::f16, Accumulate::f32}), ta, tb));
    for (std::int64_t i = 0; i < m * n; ++i) {
      SCOPED_TRACE("index " + multi_index({m, n}, i));
      EXPECT_TRUE(std::isfinite(exact.get(i)));
      if (i == 1) {
        EXPECT_EQ(native.get(i), INFINITY);
        EXPECT_EQ(exact.get(i), 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(native.get(i)));
      }
    }
    EXPECT_EQ(exact.get(0), 16.0f * 0.5f * k);  // 4800, exact in f16
    EXPECT_EQ(count_nonfinite(native), 1);
  }
}

TEST(MatmulBadInput, ShapesDtypesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f32});
    const Tensor a = be->upload(HostTensor({2, 5, 13}, DType::f32));
    const Tensor b = be->upload(HostTensor({12, 7}, DType::f32));
    expect_op_error([&] { ops::matmul(ctx, a, b); }, {"MATMUL", "[2,5,13]", "[12,7]", "k=13"});
    const Tensor w = be->upload(HostTensor({7, 12}, DType::f32));
    expect_op_error([&] { ops::linear(ctx, a, w, nullptr); }, {"LINEAR", "[2,5,13]", "[7,12]"});
    const Tensor b_batch = be->upload(HostTensor({3, 13, 7}, DType::f32));
    expect_op_error([&] { ops::matmul(ctx, a, b_batch); }, {"MATMUL", "batch"});
    const Tensor half = be->upload(HostTensor({13, 7}, DType::f16));
    expect_op_error([&] { ops::matmul(ctx, a, half); }, {"MATMUL", "f16", "f32"});
    const Tensor bias = be->upload(HostTensor({6}, DType::f32));
    const Tensor good_b = be->upload(HostTensor({13, 7}, DType::f32));
    expect_op_error([&] { ops::matmul(ctx, a, good_b, false, 1.0f, &bias); }, {"MATMUL", "bias", "[7]"});
    const Tensor empty = be->upload(HostTensor({0, 13}, DType::f32));
    expect_op_error([&] { ops::matmul(ctx, empty, good_b); }, {"MATMUL", "[0,13]", "zero-size"});
  }
}

// Hand-worked values on every backend (integer arithmetic: exact everywhere).
TEST(MatmulKnownValues, ProductsBiasAlphaLayoutsAndBroadcastWeights) {
  for_each_backend([](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const auto up = [&](const Shape& s, const std::vector<float>& v) { return upload_values(be, s, v); };
    const Tensor a = up({2, 3}, {1, 2, 3, 4, 5, 6});
    const Tensor b = up({3, 2}, {7, 8, 9, 10, 11, 12});
    EXPECT_EQ(download_values(be, ops::matmul(c, a, b)), (std::vector<float>{58, 64, 139, 154}));
    const Tensor bias = up({2}, {1, -1});
    EXPECT_EQ(download_values(be, ops::matmul(c, a, b, false, 0.5f, &bias)), (std::vector<float>{30, 31, 70.5f, 76}));
    // trans_b: b given as [n, k].
    const Tensor bt = up({2, 3}, {7, 9, 11, 8, 10, 12});
    EXPECT_EQ(download_values(be, ops::matmul(c, a, bt, true)), (std::vector<float>{58, 64, 139, 154}));
    // Batched b, and one b shared by every batch.
    const Tensor a3 = up({2, 1, 2}, {1, 2, 3, 4});
    EXPECT_EQ(download_values(be, ops::matmul(c, a3, up({2, 2, 1}, {1, 1, 10, 100}))), (std::vector<float>{3, 430}));
    const Tensor shared = ops::matmul(c, a3, up({2, 1}, {1, 1}));
    EXPECT_EQ(shared.shape(), (Shape{2, 1, 1}));
    EXPECT_EQ(download_values(be, shared), (std::vector<float>{3, 7}));
    // linear takes torch's weight layout [out, in]: out0 = x0, out1 = x0 + x1 + x2.
    const Tensor lin_bias = up({2}, {0.5f, -0.5f});
    const Tensor y = ops::linear(c, up({1, 2, 3}, {1, 2, 3, 4, 5, 6}), up({2, 3}, {1, 0, 0, 1, 1, 1}), &lin_bias);
    EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
    EXPECT_EQ(download_values(be, y), (std::vector<float>{1.5f, 5.5f, 4.5f, 14.5f}));
  });
}

// 1 + 256 * 2^-9: each small term is a quarter of bf16's ulp at 1 (2^-7), so
// every native partial sum rounds back to 1; the exact sum 1.5 is a bf16 value.
TEST(MatmulFailureModes, Bf16NativeSumLosesSmallTerms) {
  std::vector<float> av(257, 1.0f), bv(257, 0x1p-9f);
  bv[0] = 1.0f;
  for_each_backend([&](Backend& be) {
    const Tensor a = upload_values(be, {1, 257}, av, DType::bf16);
    const Tensor b = upload_values(be, {257, 1}, bv, DType::bf16);
    EXPECT_EQ(download_values(be, ops::matmul(make_context(be, {DType::bf16, Accumulate::native}), a, b))[0], 1.0f);
    EXPECT_EQ(download_values(be, ops::matmul(make_context(be, {DType::bf16, Accumulate::f32}), a, b))[0], 1.5f);
  });
}

// A model's load prepares its LINEAR weights (Backend::prepare_linear_weight):
// the panels are packed then, the first call finds them (the same bits as
// packing per call), and they give way to a first call that wants another
// view of the buffer; a weight stored in another dtype than the precision's
// keeps nothing.
TEST(MatmulWeightPanels, PreparedAtLoadServeTheFirstCallOrGiveWayToAnotherView) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  for (opencl::OpenClBackend* ocl : cpu) {
    Backend* be = ocl;
    const auto uncached = backend_keeping_no_panels(be->device());
    BackendOptions profiling = test_backend_options();
    profiling.profile = true;
    for (const DType dt : {DType::f32, DType::f16}) {
      const Precision p{dt};
      SCOPED_TRACE("device \"" + be->device().name + "\", " + p.describe());
      Rng rng(seed_from("prepared weight panels"));
      // out / 2 = 65 is 1 past a multiple of every panel width (16, 32, 48 columns): the view's panels ([65, 140])
      // then take a larger size class of the pool than the prepared ones ([130, 70]) on every CPU (at 16 columns
      // 45056 against 40960 bytes), and replacing them shows in kept_bytes (with 90 rows both came to 53760 bytes
      // at AVX2's 16-wide panels).
      constexpr std::int64_t tokens = 37, in = 70, out = 130;
      const HostTensor hx = random_normal(rng, {2, tokens, in}, dt), hw = random_normal(rng, {out, in}, dt);
      const auto linear_on = [&](Backend& b, const HostTensor& x, const Tensor& w) {
        return b.download(ops::linear(make_context(b, p), b.upload(x), w, nullptr));
      };
      // Without the program at hand (a cold start: nothing built, no kernel cache) the load leaves the packing
      // to the first call, whose program the run's kernel plan builds.
      BackendOptions cold = test_backend_options();
      cold.use_kernel_cache = false;
      const auto fresh = make_backend(be->device(), cold);
      const Tensor fw = fresh->upload(hw);
      fresh->prepare_linear_weight(fw, p, false);
      EXPECT_EQ(dynamic_cast<opencl::OpenClBackend&>(*fresh).weight_panels().kept_bytes(), 0u) << "cold: not packed";
      (void)linear_on(*be, hx, be->upload(hw));  // the program at hand
      const std::size_t kept_before = ocl->weight_panels().kept_bytes();
      {
        const Tensor w = be->upload(hw);
        be->prepare_linear_weight(w, p, false);
        const std::size_t kept = ocl->weight_panels().kept_bytes() - kept_before;
        EXPECT_GT(kept, 0u) << "packed at load";
        be->prepare_linear_weight(w, p, false);
        EXPECT_EQ(ocl->weight_panels().kept_bytes() - kept_before, kept) << "prepared once";
        EXPECT_TRUE(bitwise_equal(linear_on(*be, hx, w), linear_on(*uncached, hx, uncached->upload(hw))));
        EXPECT_EQ(ocl->weight_panels().kept_bytes() - kept_before, kept) << "the first call found them";
        // On a profiling backend: one packing in all, the load's.
        const auto profiled = make_backend(be->device(), profiling);
        auto& pocl = dynamic_cast<opencl::OpenClBackend&>(*profiled);
        const auto packs = [&] {
          std::uint64_t n = 0;
          for (const auto& t : pocl.profile())
            if (t.op.find("gemm_pack_b") != std::string::npos) n += t.launches;
          return n;
        };
        (void)linear_on(*profiled, hx, profiled->upload(hw));  // the program at hand
        const std::uint64_t packs_before = packs();
        const Tensor pw = profiled->upload(hw);
        profiled->prepare_linear_weight(pw, p, false);
        (void)linear_on(*profiled, hx, pw);
        (void)linear_on(*profiled, hx, pw);
        EXPECT_EQ(packs() - packs_before, 1u) << "packed at load only";

        // Another view of a prepared buffer ([65, 140]) at its first call: the prepared panels give way.
        const Tensor v = be->upload(hw);
        be->prepare_linear_weight(v, p, false);
        const HostTensor hx2 = random_normal(rng, {2, tokens, 2 * in}, dt);
        const Tensor view = v.reshaped({out / 2, 2 * in});
        const HostTensor got = linear_on(*be, hx2, view);
        const HostTensor want =
            linear_on(*uncached, hx2, uncached->upload(HostTensor::from_f32({out / 2, 2 * in}, hw.to_f32(), dt)));
        EXPECT_TRUE(bitwise_equal(got, want));
        const std::size_t with_view = ocl->weight_panels().kept_bytes() - kept_before;
        EXPECT_NE(with_view, 2 * kept) << "the view's panels replaced the prepared ones";
        EXPECT_GT(with_view, kept);
        // The first view is now packed per call, with the same bits.
        EXPECT_TRUE(bitwise_equal(linear_on(*be, hx, v), linear_on(*uncached, hx, uncached->upload(hw))));
        EXPECT_EQ(ocl->weight_panels().kept_bytes() - kept_before, with_view);

        // A weight in another dtype than the calls' is converted per call: nothing to prepare.
        const Tensor other = be->upload(hw.converted(dt == DType::f32 ? DType::f16 : DType::f32));
        be->prepare_linear_weight(other, p, false);
        EXPECT_EQ(ocl->weight_panels().kept_bytes() - kept_before, with_view);
      }
      EXPECT_EQ(ocl->weight_panels().kept_bytes(), kept_before) << "the panels go with the weights";
    }
  }
}

// NANSCOPE_PROFILE=grid (BackendOptions::profile_grids) times each launch geometry of a kernel apart: two linears
// of different token counts are two rows of the GEMM's profile, one row without it.
TEST(MatmulProfile, GridsTimeEachLaunchGeometryApart) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  const Precision p{DType::f32};
  Rng rng(seed_from("profile grids"));
  const HostTensor hw = random_normal(rng, {48, 32}, DType::f32);
  const HostTensor small = random_normal(rng, {1, 8, 32}, DType::f32);
  const HostTensor large = random_normal(rng, {1, 200, 32}, DType::f32);
  for (const bool grids : {false, true}) {
    SCOPED_TRACE(grids ? "profile_grids" : "profile");
    BackendOptions o = test_backend_options();
    o.profile = true;
    o.profile_grids = grids;
    const auto be = make_backend(cpu.front()->device(), o);
    const Tensor w = be->upload(hw);
    for (const HostTensor* x : {&small, &large})
      (void)be->download(ops::linear(make_context(*be, p), be->upload(*x), w, nullptr));
    std::vector<std::string> rows;
    for (const auto& t : dynamic_cast<opencl::OpenClBackend&>(*be).profile()) {
      if (t.op.rfind("MATMUL gemm_cpu_direct_a", 0) == 0) rows.push_back(t.op);
    }
    ASSERT_EQ(rows.size(), grids ? 2u : 1u) << testing::PrintToString(rows);
    for (const std::string& r : rows) EXPECT_EQ(r.find(" global [") != std::string::npos, grids) << r;
  }
}
}  // namespace
}  // namespace nanscope::test
