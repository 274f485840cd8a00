// CONV2D: the precision matrix on odd shapes (5x7 spatial, 13 channels, strides,
// 1x1) and SD shapes (conv_in, the mid block at 8x8, and one 64x64 320->320
// conv in f32 only, since the reference takes seconds on it), the f16 native
// overflow, and bad inputs.

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

// family: the tolerance row; "conv2d_winograd" for the shapes the CPU family runs as Winograd F(4x4, 3x3)
// (opencl::gemm::runs_winograd: 3x3, stride 1, 64 channels or more in and out, 256 outputs or more).
OpCase conv_case(const Shape& x, std::int64_t out_ch, std::int64_t ksize, int stride, int padding, bool bias,
                 const char* family = "conv2d") {
  const std::int64_t c_in = x[1];
  const Shape w{out_ch, c_in, ksize, ksize};
  const std::int64_t oh = (x[2] + 2 * padding - ksize) / stride + 1, ow = (x[3] + 2 * padding - ksize) / stride + 1;
  OpCase c;
  c.op = "conv2d";
  c.family = family;
  c.desc = "x" + shape_tag(x) + "_o" + std::to_string(out_ch) + "_k" + std::to_string(ksize) + "_s" +
           std::to_string(stride) + "_p" + std::to_string(padding) + (bias ? "_bias" : "");
  c.oracle = {{"op", "conv2d"}, {"stride", stride}, {"padding", padding}, {"bias", bias}};
  c.flops = 2.0 * double(x[0] * out_ch * oh * ow) * double(c_in * ksize * ksize);
  const double w_std = 1.0 / std::sqrt(double(c_in * ksize * ksize));
  c.build = [=](Rng& rng, const Precision& p) {
    std::vector<HostTensor> in{random_normal(rng, x, p.dtype), random_normal(rng, w, p.dtype, 0.0, w_std)};
    if (bias) in.push_back(random_normal(rng, {out_ch}, p.dtype, 0.0, 0.1));
    return in;
  };
  c.run = [=](const OpContext& ctx, const std::vector<Tensor>& in) {
    return ops::conv2d(ctx, in[0], in[1], bias ? &in[2] : nullptr, stride, padding);
  };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c, const std::vector<Precision>& ps) {
    for (auto& p : expand(c, ps)) all.push_back(std::move(p));
  };
  const auto matrix = precision_matrix();
  add(conv_case({1, 13, 5, 7}, 8, 3, 1, 1, true), matrix);   // odd spatial, 13 channels
  add(conv_case({2, 4, 7, 5}, 5, 3, 2, 1, true), matrix);    // stride 2 (downsample), odd output
  add(conv_case({1, 13, 5, 7}, 3, 1, 1, 0, false), matrix);  // 1x1 (resnet shortcut)
  add(conv_case({2, 6, 9, 7}, 5, 1, 2, 0, true), matrix);    // 1x1 stride 2: through im2col / implicit GEMM
  add(conv_case({1, 3, 9, 11}, 6, 3, 1, 0, true), matrix);   // no padding
  add(conv_case({1, 3, 34, 40}, 5, 3, 1, 1, true), matrix);  // rows wide enough for the vector im2col path
  // Outputs 8 wide (panels.cl im2col_row16_ow8: two output rows per vector): stride 2 from 16 wide, and stride 1
  // without padding from 10 wide (the 8x8 mid block below takes the padded edges).
  add(conv_case({2, 4, 16, 16}, 16, 3, 2, 1, true), matrix);
  add(conv_case({1, 5, 10, 10}, 7, 3, 1, 0, true), matrix);
  // k = 432: two k-blocks. Native bf16 partial sums over 432 terms drift past the torch
  // cell (calibrated on sums of up to 117): checked against the reference's semantics only.
  OpCase deep = conv_case({2, 48, 7, 9}, 5, 3, 1, 1, true);
  deep.native_close_to_exact = false;
  add(deep, matrix);
  add(conv_case({1, 4, 64, 64}, 320, 3, 1, 1, true), matrix);  // SD conv_in
  // SD mid block input, reduced output channels. Its sums run over 11520 terms:
  // far too long for bf16 partial sums to stay near the exact value, so the
  // native modes are checked against the reference's semantics only.
  OpCase mid = conv_case({2, 1280, 8, 8}, 64, 3, 1, 1, true);
  mid.native_close_to_exact = false;
  add(mid, matrix);
  // SD down_blocks.0 resnet conv (Winograd in the CPU family)
  add(conv_case({1, 320, 64, 64}, 320, 3, 1, 1, true, "conv2d_winograd"), {Precision{DType::f32}});
  // Winograd F(4x4, 3x3) in the CPU family (kernels/conv2d.cl winograd_*), every storage dtype with f32
  // accumulation: 2 images of 18x21 (partial tiles at the bottom and right, tile rows of 6: one tile at a time);
  // 16x72 (tile rows of 18: 16 tiles side by side, then a group across the row's end); no padding (32x68);
  // 800 input channels (two k-blocks of the GEMM).
  const std::vector<Precision> acc_f32{Precision{DType::f32}, Precision{DType::f16}, Precision{DType::bf16}};
  add(conv_case({2, 64, 18, 21}, 72, 3, 1, 1, true, "conv2d_winograd"), acc_f32);
  add(conv_case({1, 64, 16, 72}, 64, 3, 1, 1, false, "conv2d_winograd"), acc_f32);
  add(conv_case({1, 80, 34, 70}, 96, 3, 1, 0, true, "conv2d_winograd"), acc_f32);
  add(conv_case({1, 800, 16, 16}, 64, 3, 1, 1, true, "conv2d_winograd"), {Precision{DType::f32}});
  // f16 with f32 accumulation runs on NVIDIA's tensor cores (gemm.hpp tensor_core_tiles: at least
  // 64 outputs x 64 positions x 32 deep; convolutions with 32 input channels or more): stride 2 and
  // 1x1 stride 2 with ragged tiles, and one big enough for the 128 x 128 blocks on a 132-unit GPU
  // (2 x 24 blocks x 3 images), O = 130 leaving a 2-row edge. The tensor-core convolution's k loop
  // walks blocks of 32 channels tap by tap: 40 channels end in a partial block, and 35 (odd) also
  // read the weights' channel pairs half by half.
  const std::vector<Precision> f16{Precision{DType::f16}};
  add(conv_case({2, 40, 17, 15}, 72, 3, 2, 1, true), f16);
  add(conv_case({1, 35, 12, 14}, 70, 3, 1, 1, true), f16);
  add(conv_case({1, 64, 18, 18}, 80, 1, 2, 0, false), f16);
  add(conv_case({3, 32, 48, 64}, 130, 3, 1, 1, true), f16);
  return all;
}

NANSCOPE_OP_TESTS(Conv2d, cases());

// A 1x1 conv over 600 channels is a dot product: channel-major partial sums of
// +256 then -256 reach 76800 before returning to 0. Native f16 accumulation
// stops at +Inf in that output position; f32 accumulation gives 0.
TEST(Conv2dFailureModes, F16NativeSumOverflowsToInfInPlace) {
  constexpr std::int64_t c_in = 600, hw = 3;
  std::vector<float> x(c_in * hw * hw, 0.25f), w(2 * c_in);
  for (std::int64_t ci = 0; ci < c_in; ++ci) {
    x[ci * hw * hw + 4] = 16.0f;  // the centre pixel [1,1]
    w[ci] = ci < 300 ? 16.0f : -16.0f;
    w[c_in + ci] = 0.01f;
  }
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const Tensor tx = be->upload(HostTensor::from_f32({1, c_in, hw, hw}, x, DType::f16));
    const Tensor tw = be->upload(HostTensor::from_f32({2, c_in, 1, 1}, w, DType::f16));
    const auto native =
        be->download(ops::conv2d(make_context(*be, {DType::f16, Accumulate::native}), tx, tw, nullptr, 1, 0));
    const auto exact =
        be->download(ops::conv2d(make_context(*be, {DType::f16, Accumulate::f32}), tx, tw, nullptr, 1, 0));
    EXPECT_EQ(native.get(4), INFINITY) << "output [0,0,1,1]";
    EXPECT_EQ(count_nonfinite(native), 1);
    EXPECT_EQ(count_nonfinite(exact), 0);
    EXPECT_EQ(exact.get(4), 0.0f);
    EXPECT_EQ(exact.get(0), 0.0f);  // +-0.25*16 terms cancel
    EXPECT_NEAR(exact.get(hw * hw + 4), 0.01f * 16.0f * c_in, 0.05);
  }
}

TEST(Conv2dBadInput, ShapesDtypesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f16});
    const Tensor x = be->upload(HostTensor({1, 13, 5, 7}, DType::f16));
    const Tensor w = be->upload(HostTensor({8, 12, 3, 3}, DType::f16));
    expect_op_error([&] { ops::conv2d(ctx, x, w, nullptr, 1, 1); }, {"CONV2D", "[1,13,5,7]", "[8,12,3,3]"});
    const Tensor w32 = be->upload(HostTensor({8, 13, 3, 3}, DType::f32));
    expect_op_error([&] { ops::conv2d(ctx, x, w32, nullptr, 1, 1); }, {"CONV2D", "f32", "f16"});
    const Tensor big_w = be->upload(HostTensor({8, 13, 9, 9}, DType::f16));
    expect_op_error([&] { ops::conv2d(ctx, x, big_w, nullptr, 1, 0); }, {"CONV2D", "[8,13,9,9]"});
    const Tensor empty = be->upload(HostTensor({1, 13, 0, 7}, DType::f16));
    const Tensor good_w = be->upload(HostTensor({8, 13, 3, 3}, DType::f16));
    expect_op_error([&] { ops::conv2d(ctx, empty, good_w, nullptr, 1, 1); }, {"CONV2D", "[1,13,0,7]"});
    const Tensor x3 = be->upload(HostTensor({13, 5, 7}, DType::f16));
    expect_op_error([&] { ops::conv2d(ctx, x3, good_w, nullptr, 1, 1); }, {"CONV2D", "[13,5,7]", "rank"});
  }
}

// Hand-worked values on every backend (integer arithmetic: exact everywhere).
TEST(Conv2dKnownValues, BoxFilterStrideBiasAndChannelMixing) {
  for_each_backend([](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const auto up = [&](const Shape& s, const std::vector<float>& v) { return upload_values(be, s, v); };
    const Tensor x = up({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    const Tensor w = up({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
    EXPECT_EQ(download_values(be, ops::conv2d(c, x, w, nullptr, 1, 1)),
              (std::vector<float>{12, 21, 16, 27, 45, 33, 24, 39, 28}));
    const Tensor bias = up({1}, {100});
    const Tensor y = ops::conv2d(c, x, w, &bias, 2, 1);
    EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
    EXPECT_EQ(download_values(be, y), (std::vector<float>{112, 116, 124, 128}));
    // Two input channels, two outputs, 1x1: out = w0 * x0 + w1 * x1 + b.
    const Tensor b2 = up({2}, {0, 0.5f});
    EXPECT_EQ(download_values(
                  be, ops::conv2d(c, up({1, 2, 1, 2}, {1, 2, 10, 20}), up({2, 2, 1, 1}, {1, 1, 2, -1}), &b2, 1, 0)),
              (std::vector<float>{11, 22, -7.5f, -15.5f}));
  });
}

// As im2col + GEMM: 0 (padding) * Inf = NaN at the border, Inf inside.
TEST(Conv2dFailureModes, NonFiniteWeightPoisonsPadding) {
  for_each_backend([](Backend& be) {
    const Tensor x = upload_values(be, {1, 1, 3, 3}, std::vector<float>(9, 1.0f));
    const Tensor w = upload_values(be, {1, 1, 3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, INFINITY});
    const auto y = download_values(be, ops::conv2d(make_context(be, {DType::f32}), x, w, nullptr, 1, 1));
    EXPECT_EQ(y[0], INFINITY);
    EXPECT_TRUE(std::isnan(y[8]));
  });
}

// Same terms in the same order (input channels ascending): identical roundings.
TEST(Conv2dFailureModes, Conv1x1EqualsMatmulBitForBitInNativeF16) {
  const std::int64_t c = 37, o = 5, hw = 12;
  Rng rng(seed_from("conv1x1 vs matmul"));
  const HostTensor xv = random_normal(rng, {c, hw}, DType::f16, 0.0, 2.0);
  const HostTensor wv = random_normal(rng, {o, c}, DType::f16, 0.0, 2.0);
  for_each_backend([&](Backend& be) {
    const OpContext cx = make_context(be, {DType::f16, Accumulate::native});
    HostTensor x4 = xv, w4 = wv;
    x4.shape = {1, c, 3, 4};
    w4.shape = {o, c, 1, 1};
    const HostTensor conv = be.download(ops::conv2d(cx, be.upload(x4), be.upload(w4), nullptr, 1, 0));
    HostTensor mm = be.download(ops::matmul(cx, be.upload(wv), be.upload(xv)));
    mm.shape = conv.shape;
    EXPECT_TRUE(bitwise_equal(conv, mm));
  });
}
// The CPU family's convolution (kernels/matmul/conv_cpu.cl conv_cpu: B sub-panels
// gathered from the image in the kernel) against MATMUL of the weights and the
// im2col matrix built here on the host: the same sums in the same order, so
// the same bytes, for every storage dtype with f32 accumulation. Shapes that
// conv_cpu runs: 100 channels (k = 900: two k-blocks), 13 output channels (a
// partial row block), 41x48 with padding (1968 positions: a partial column
// panel and a partial group of panels; the gather's edge paths), and 17x16
// (every vector at an edge). Shapes that go through conv_im2col_panels: stride
// 2 on a 5x7 image, and on images wide enough for its two-load path (16
// positions in one output row; 20 and 17 wide, so rows also end mid-vector;
// 3x3 with padding and 1x1). Batch 2. Also checked against the reference backend, so a
// kernel that wrote nothing would not pass.
TEST(Conv2dCpuKernel, EqualsMatmulOnTheIm2colMatrixBitForBit) {
  struct Shape4 {
    std::int64_t c, h, w, o, k, stride, pad;
    bool in_kernel;  // runs conv_cpu
  };
  const Shape4 shapes[] = {{100, 41, 48, 13, 3, 1, 1, true}, {4, 17, 16, 8, 3, 1, 1, true},
                           {6, 5, 7, 9, 3, 2, 1, false},     {6, 34, 40, 9, 3, 2, 1, false},
                           {5, 33, 33, 7, 3, 2, 1, false},   {5, 33, 36, 7, 1, 2, 0, false}};
  const std::vector<opencl::OpenClBackend*> cpu = cpu_family_backends();  // only the CPU family runs conv_cpu
  if (cpu.empty()) GTEST_SKIP() << no_cpu_family_message();
  for (opencl::OpenClBackend* ocl : cpu) {
    Backend* be = ocl;
    for (const DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (const Shape4& g : shapes) {
        constexpr std::int64_t n = 2;
        const std::int64_t oh = (g.h + 2 * g.pad - g.k) / g.stride + 1, ow = (g.w + 2 * g.pad - g.k) / g.stride + 1;
        const std::int64_t kk = g.c * g.k * g.k, pos = oh * ow;
        const Precision p{dt};
        SCOPED_TRACE("device \"" + be->device().name + "\", " + p.describe() + ", " + std::to_string(g.c) +
                     " channels " + std::to_string(g.h) + "x" + std::to_string(g.w) + " stride " +
                     std::to_string(g.stride));
        Rng rng(seed_from("conv cpu kernel " + std::to_string(g.c)));
        SCOPED_TRACE("seed " + std::to_string(rng.seed()));
        const HostTensor hx = random_normal(rng, {n, g.c, g.h, g.w}, dt);
        const HostTensor hw = random_normal(rng, {g.o, g.c, g.k, g.k}, dt, 0.0, 1.0 / std::sqrt(double(kk)));
        const opencl::gemm::ConvShape cs{n, g.c, g.h, g.w, g.o, g.k, g.k, g.stride, g.pad, oh, ow};
        EXPECT_EQ(opencl::gemm::runs_cpu_conv(*ocl, p, cs), g.in_kernel);
        const OpContext cx = make_context(*be, p);
        const HostTensor conv = be->download(ops::conv2d(cx, be->upload(hx), be->upload(hw), nullptr,
                                                         static_cast<int>(g.stride), static_cast<int>(g.pad)));
        // im2col on the host: column (oy, ox), row (ci, ky, kx), zero in the padding.
        const std::vector<float> x = hx.to_f32();
        HostTensor w2 = hw;
        w2.shape = {g.o, kk};
        const Tensor wt = be->upload(w2);
        for (std::int64_t b = 0; b < n; ++b) {
          std::vector<float> cols(static_cast<std::size_t>(kk * pos), 0.0f);
          for (std::int64_t r = 0; r < kk; ++r) {
            const std::int64_t ci = r / (g.k * g.k), ky = r / g.k % g.k, kx = r % g.k;
            for (std::int64_t oy = 0; oy < oh; ++oy) {
              for (std::int64_t ox = 0; ox < ow; ++ox) {
                const std::int64_t iy = oy * g.stride + ky - g.pad, ix = ox * g.stride + kx - g.pad;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                cols[static_cast<std::size_t>(r * pos + oy * ow + ox)] =
                    x[static_cast<std::size_t>(((b * g.c + ci) * g.h + iy) * g.w + ix)];
              }
            }
          }
          const HostTensor mm =
              be->download(ops::matmul(cx, wt, be->upload(HostTensor::from_f32({kk, pos}, cols, dt))));
          const std::vector<float> got = conv.to_f32(), want = mm.to_f32();
          bool same = true;
          for (std::int64_t i = 0; i < g.o * pos && same; ++i) {
            const float u = got[static_cast<std::size_t>(b * g.o * pos + i)], v = want[static_cast<std::size_t>(i)];
            same = std::memcmp(&u, &v, sizeof u) == 0;
          }
          EXPECT_TRUE(same) << "image " << b << ": conv2d differs from matmul on the im2col matrix";
        }
        Backend& ref = reference_backend();
        const HostTensor expected =
            ref.download(ops::conv2d(make_context(ref, p), ref.upload(hx), ref.upload(hw), nullptr,
                                     static_cast<int>(g.stride), static_cast<int>(g.pad)));
        EXPECT_TRUE(tensors_close(conv, expected, tolerance("conv2d", p, Check::backend)));
      }
    }
  }
}
}  // namespace
}  // namespace nanscope::test
