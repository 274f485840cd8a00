// Winograd F(4x4, 3x3) convolutions of the CPU kernel family (opencl::gemm::runs_winograd, kernels/conv2d.cl
// winograd_*): which convolutions take it, that chunking the tiles and blocking the output channels changes no
// bit, how a non-finite input spreads, and that BackendOptions::winograd = false keeps the direct path. The op
// suite (test_conv2d, family conv2d_winograd) checks its values against the reference and PyTorch.

#include <cmath>
#include <cstring>

#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "support/backends.hpp"
#include "support/op_case.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

namespace nanscope::test {
namespace {

using opencl::gemm::ConvShape;

ConvShape shape3x3(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t o, int stride = 1) {
  const std::int64_t oh = (h + 2 - 3) / stride + 1, ow = (w + 2 - 3) / stride + 1;
  return {n, c, h, w, o, 3, 3, stride, 1, oh, ow};
}

// A CPU-family backend on the same device with these options on top of the test options.
std::unique_ptr<Backend> cpu_backend_with(const opencl::OpenClBackend& like, BackendOptions o) {
  o.kernel_style = KernelStyleChoice::cpu;
  return make_backend(like.device(), o);
}

HostTensor conv(Backend& be, const HostTensor& x, const HostTensor& w, const HostTensor* b, const Precision& p) {
  const Tensor bias = b ? be.upload(*b) : Tensor{};
  return be.download(ops::conv2d(make_context(be, p), be.upload(x), be.upload(w), b ? &bias : nullptr, 1, 1));
}

TEST(Conv2dWinograd, TakesTheLargeStrideOneThreeByThreeConvolutionsWithF32Sums) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  const opencl::OpenClBackend& be = *cpu.front();
  const Precision f32{DType::f32}, f16{DType::f16}, bf16{DType::bf16};
  EXPECT_TRUE(opencl::gemm::runs_winograd(be, f32, shape3x3(2, 320, 64, 64, 320)));
  EXPECT_TRUE(opencl::gemm::runs_winograd(be, f16, shape3x3(2, 1280, 16, 16, 1280)));
  EXPECT_TRUE(opencl::gemm::runs_winograd(be, bf16, shape3x3(1, 128, 512, 512, 128)));
  // Native accumulation keeps its per-partial-sum rounding: the direct path.
  EXPECT_FALSE(opencl::gemm::runs_winograd(be, {DType::f16, Accumulate::native}, shape3x3(2, 320, 64, 64, 320)));
  EXPECT_FALSE(opencl::gemm::runs_winograd(be, f32, shape3x3(2, 320, 64, 64, 320, 2)));  // stride 2
  EXPECT_FALSE(opencl::gemm::runs_winograd(be, f32, shape3x3(2, 1280, 8, 8, 1280)));     // 64 outputs
  EXPECT_FALSE(opencl::gemm::runs_winograd(be, f32, shape3x3(1, 4, 64, 64, 320)));       // conv_in
  EXPECT_FALSE(opencl::gemm::runs_winograd(be, f32, shape3x3(1, 320, 64, 64, 4)));       // conv_out
  ConvShape one_by_one = shape3x3(2, 320, 64, 64, 320);
  one_by_one.kh = one_by_one.kw = 1;
  one_by_one.padding = 0;
  EXPECT_FALSE(opencl::gemm::runs_winograd(be, f32, one_by_one));

  BackendOptions off = test_backend_options();
  off.winograd = false;
  const auto direct = cpu_backend_with(be, off);
  const auto* ocl = dynamic_cast<const opencl::OpenClBackend*>(direct.get());
  ASSERT_NE(ocl, nullptr);
  EXPECT_FALSE(opencl::gemm::runs_winograd(*ocl, f32, shape3x3(2, 320, 64, 64, 320)));

  // What the device probe asks of a backend for each convolution it replays (Backend::conv2d_winograd).
  Backend& any = *cpu.front();
  const Tensor x = any.empty({1, 64, 16, 16}, DType::f32), w3 = any.empty({64, 64, 3, 3}, DType::f32);
  const Tensor w1 = any.empty({64, 64, 1, 1}, DType::f32);
  Tensor out = any.empty({1, 64, 16, 16}, DType::f32);
  const Conv2dArgs three{x, w3, nullptr, out, 1, 64, 16, 16, 64, 3, 3, 16, 16, 1, 1, f32};
  const Conv2dArgs one{x, w1, nullptr, out, 1, 64, 16, 16, 64, 1, 1, 16, 16, 1, 0, f32};
  EXPECT_TRUE(any.conv2d_winograd(three));
  EXPECT_FALSE(any.conv2d_winograd(one));
  EXPECT_FALSE(direct->conv2d_winograd(three));
  EXPECT_FALSE(reference_backend().conv2d_winograd(three));
}

// The 36 products of each tile are sums over the input channels in the same order whatever the chunk of tiles
// or the block of output channels they are computed in: a backend whose scratch budget is 16 MB (largest
// allocation 32 MB) splits 256 output channels of 1024 inputs into blocks of 112 and 160 tiles into chunks of
// 96, and gives the same bytes as one block and one chunk. Both within the Winograd tolerance of the reference.
// Under a 16 MB scratch budget the weights go in three blocks of output channels; at 32x40 the tiles in two
// chunks too (each chunk transformed again per block), at 16x16 in one chunk (transformed once for all blocks).
TEST(Conv2dWinograd, ChunksOfTilesAndBlocksOfOutputChannelsChangeNoBit) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  Rng rng(seed_from("winograd chunks"));
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const std::int64_t n = 2, c = 1024, o = 256;
  const Precision p{DType::f32};
  BackendOptions small = test_backend_options();
  small.max_alloc_limit_bytes = std::uint64_t{32} << 20;
  for (const auto& [h, w] : {std::pair<std::int64_t, std::int64_t>{32, 40}, {16, 16}}) {
    SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(w));
    const HostTensor hx = random_normal(rng, {n, c, h, w}, p.dtype);
    const HostTensor hw = random_normal(rng, {o, c, 3, 3}, p.dtype, 0.0, 1.0 / std::sqrt(double(c * 9)));
    const HostTensor hb = random_normal(rng, {o}, p.dtype, 0.0, 0.1);
    for (opencl::OpenClBackend* be : cpu) {
      SCOPED_TRACE("device \"" + be->device().name + "\"");
      ASSERT_TRUE(opencl::gemm::runs_winograd(*be, p, shape3x3(n, c, h, w, o)));
      const auto limited = cpu_backend_with(*be, small);
      ASSERT_EQ(opencl::gemm::scratch_budget(limited->device()), std::size_t{16} << 20);
      const HostTensor whole = conv(*be, hx, hw, &hb, p);
      const HostTensor split = conv(*limited, hx, hw, &hb, p);
      EXPECT_TRUE(bitwise_equal(whole, split));
      Backend& ref = reference_backend();
      EXPECT_TRUE(tensors_close(whole, conv(ref, hx, hw, &hb, p), tolerance("conv2d_winograd", p, Check::backend)));
    }
  }
}

// Where the tiles fill one or two column panels, winograd_fused_cpu transforms the weights inside the GEMM
// (gemm::fuses_winograd_weights): the same U (common/panels.cl wino_weights16) and the same sums in the same order as
// winograd_weights + gemm_cpu_direct_a, so the same bytes as the two passes (BackendOptions::
// winograd_fused_weights = false), in every storage dtype. 784 input channels go in two k-blocks of 400 and 384
// (32 at a time, the last 16 of the first block alone), 200 output channels end in a partial row block, and 28
// tiles (1 x 16 x 28) leave part of a panel empty; 2 x 16 x 16 is 32 tiles, the SD UNet's 16x16 layers. 1280
// output channels, as many as the UNet's widest, take row groups the device's local memory holds (16 blocks of
// U and sums would not fit PoCL's 512 KB on a Zen 3, whose L2 it reports).
TEST(Conv2dWinograd, WeightsTransformedInsideTheGemmAreTheSameBitsAsTwoPasses) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  Rng rng(seed_from("winograd fused weights"));
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  BackendOptions apart = test_backend_options();
  apart.winograd_fused_weights = false;
  struct Case {
    std::int64_t n, c, h, w, o;
  };
  for (const Case& k : {Case{2, 784, 16, 16, 200}, Case{1, 336, 16, 28, 64}, Case{2, 64, 16, 16, 1280}}) {
    for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const Precision p{dt};
      SCOPED_TRACE(std::to_string(k.n) + "x" + std::to_string(k.c) + "x" + std::to_string(k.h) + "x" +
                   std::to_string(k.w) + " -> " + std::to_string(k.o) + ", " + p.describe());
      const HostTensor hx = random_normal(rng, {k.n, k.c, k.h, k.w}, dt);
      const HostTensor hw = random_normal(rng, {k.o, k.c, 3, 3}, dt, 0.0, 1.0 / std::sqrt(double(k.c * 9)));
      const HostTensor hb = random_normal(rng, {k.o}, dt, 0.0, 0.1);
      const ConvShape s = shape3x3(k.n, k.c, k.h, k.w, k.o);
      for (opencl::OpenClBackend* be : cpu) {
        SCOPED_TRACE("device \"" + be->device().name + "\"");
        ASSERT_TRUE(opencl::gemm::fuses_winograd_weights(*be, p, s));
        const auto two = cpu_backend_with(*be, apart);
        ASSERT_FALSE(opencl::gemm::fuses_winograd_weights(dynamic_cast<opencl::OpenClBackend&>(*two), p, s));
        ASSERT_TRUE(opencl::gemm::runs_winograd(dynamic_cast<opencl::OpenClBackend&>(*two), p, s));
        const HostTensor fused = conv(*be, hx, hw, &hb, p);
        EXPECT_TRUE(bitwise_equal(fused, conv(*two, hx, hw, &hb, p)));
        if (dt == DType::f32 && k.c == 336) {
          EXPECT_TRUE(tensors_close(fused, conv(reference_backend(), hx, hw, &hb, p),
                                    tolerance("conv2d_winograd", p, Check::backend)));
        }
      }
    }
  }
  // The two-pass path where the tiles fill more than two panels: 2 x 16 x 48 is 96 tiles, three panels of 32
  // (six of 16 on AVX2).
  for (opencl::OpenClBackend* be : cpu) {
    const ConvShape wide = shape3x3(2, 64, 16, 48, 64);
    EXPECT_TRUE(opencl::gemm::runs_winograd(*be, Precision{DType::f32}, wide));
    EXPECT_FALSE(opencl::gemm::fuses_winograd_weights(*be, Precision{DType::f32}, wide));
  }
}

// Outputs of 32 MB and more are stored around the caches (OpenClBackend::streams_output, common.cl
// st16_stream): 128 output channels at 128x512 (f32) or 256x512 (f16) against the same convolution in two
// halves of 64 channels (16 MB outputs, stored the ordinary way), which must give the same bytes (each output's
// sums do not depend on how many channels are computed with it), and against the direct path within the
// Winograd tolerance.
TEST(Conv2dWinograd, LargeOutputsStreamedAreTheSameBitsAsSmallOnes) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  BackendOptions off = test_backend_options();
  off.winograd = false;
  for (const DType dt : {DType::f32, DType::f16}) {
    const Precision p{dt};
    const std::int64_t c = 64, o = 128, h = dt == DType::f32 ? 128 : 256, w = 512;
    SCOPED_TRACE(p.describe());
    Rng rng(seed_from("winograd streamed " + p.describe()));
    const HostTensor hx = random_normal(rng, {1, c, h, w}, dt);
    const HostTensor hw = random_normal(rng, {o, c, 3, 3}, dt, 0.0, 1.0 / std::sqrt(double(c * 9)));
    const HostTensor hb = random_normal(rng, {o}, dt, 0.0, 0.1);
    const std::vector<float> wv = hw.to_f32(), bv = hb.to_f32();
    HostTensor w_half[2], b_half[2];
    for (int part = 0; part < 2; ++part) {
      const std::int64_t o0 = part * o / 2, rows = o / 2;
      w_half[part] = HostTensor::from_f32(
          {rows, c, 3, 3}, std::vector<float>(wv.begin() + o0 * c * 9, wv.begin() + (o0 + rows) * c * 9), dt);
      b_half[part] = HostTensor::from_f32({rows}, std::vector<float>(bv.begin() + o0, bv.begin() + o0 + rows), dt);
    }
    for (opencl::OpenClBackend* be : cpu) {
      SCOPED_TRACE("device \"" + be->device().name + "\"");
      ASSERT_TRUE(opencl::gemm::runs_winograd(*be, p, shape3x3(1, c, h, w, o / 2)));
      ASSERT_TRUE(be->streams_output(static_cast<std::size_t>(o * h * w) * dtype_size(dt)));
      ASSERT_FALSE(be->streams_output(static_cast<std::size_t>(o / 2 * h * w) * dtype_size(dt)));
      const std::vector<float> whole = conv(*be, hx, hw, &hb, p).to_f32();
      std::vector<float> halves;
      for (int part = 0; part < 2; ++part) {
        const std::vector<float> y = conv(*be, hx, w_half[part], &b_half[part], p).to_f32();
        halves.insert(halves.end(), y.begin(), y.end());
      }
      ASSERT_EQ(whole.size(), halves.size());
      EXPECT_EQ(std::memcmp(whole.data(), halves.data(), whole.size() * sizeof(float)), 0);
      const auto direct = cpu_backend_with(*be, off);
      EXPECT_TRUE(tensors_close(HostTensor::from_f32({1, o, h, w}, whole, dt), conv(*direct, hx, hw, &hb, p),
                                tolerance("conv2d_winograd", p, Check::backend)));
    }
  }
}

// One Inf in the input: the direct convolution makes +-Inf or NaN over its 3x3 neighbourhood; Winograd over
// every output tile (4x4) whose 6x6 input window holds it, and nothing else. Input (5, 5) lies in the window
// of tile (1, 1) only (rows and columns 3..8): outputs 4..7 x 4..7 of every channel are non-finite, the rest
// finite. With Winograd off, only 4..6 x 4..6.
TEST(Conv2dWinograd, OneInfInputMakesItsTilesNonFinite) {
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  Rng rng(seed_from("winograd inf"));
  const std::int64_t c = 64, h = 16, w = 16, o = 64;
  const Precision p{DType::f32};
  HostTensor hx = random_normal(rng, {1, c, h, w}, p.dtype);
  hx.set(5 * w + 5, INFINITY);  // channel 0, row 5, column 5
  const HostTensor hw = random_normal(rng, {o, c, 3, 3}, p.dtype, 0.0, 1.0 / std::sqrt(double(c * 9)));
  BackendOptions off = test_backend_options();
  off.winograd = false;
  for (opencl::OpenClBackend* be : cpu) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    ASSERT_TRUE(opencl::gemm::runs_winograd(*be, p, shape3x3(1, c, h, w, o)));
    const auto direct = cpu_backend_with(*be, off);
    for (const auto& [backend, last] : {std::pair<Backend*, std::int64_t>{be, 7}, {direct.get(), 6}}) {
      const std::vector<float> y = conv(*backend, hx, hw, nullptr, p).to_f32();
      std::int64_t wrong = 0;
      for (std::int64_t ch = 0; ch < o; ++ch) {
        for (std::int64_t r = 0; r < h; ++r) {
          for (std::int64_t col = 0; col < w; ++col) {
            const bool inside = r >= 4 && r <= last && col >= 4 && col <= last;
            wrong += std::isfinite(y[static_cast<std::size_t>((ch * h + r) * w + col)]) == inside;
          }
        }
      }
      EXPECT_EQ(wrong, 0) << (last == 7 ? "Winograd" : "direct") << ": outputs finite where they should not be, or "
                          << "the other way round";
    }
  }
}

}  // namespace
}  // namespace nanscope::test
