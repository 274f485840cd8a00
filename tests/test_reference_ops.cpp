// Known-value tests of the reference backend through the ops API: small
// hand-checkable cases per op, the attention implementations against each
// other, the accumulation failure modes the product is about (f16 overflow of
// a partial sum, bf16 loss of small terms) and the op layer's error messages.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/reference/host_access.hpp"
#include "backend/reference/reference_backend.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

namespace nanscope {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class ReferenceOps : public ::testing::Test {
 protected:
  OpContext ctx(DType t = DType::f32, Accumulate acc = Accumulate::f32, SoftmaxPrecision sm = SoftmaxPrecision::f32) {
    OpContext c;
    c.backend = &be_;
    c.path = "test";
    c.precision = Precision{t, acc, sm};
    return c;
  }
  Tensor up(Shape s, const std::vector<float>& v, DType t = DType::f32) {
    return be_.upload(HostTensor::from_f32(std::move(s), v, t));
  }
  std::vector<float> down(const Tensor& t) { return be_.download(t).to_f32(); }
  std::vector<float> random(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
  }

  reference::ReferenceBackend be_;
};

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at index " << i;
}

// --- rounding primitives -----------------------------------------------------

TEST(ReferenceRounding, FastRoundingMatchesCoreBitForBit) {
  // round_d works on the double's bits (it runs once per native partial sum);
  // core's round_to_from_double is the tested definition. Random doubles over
  // every exponent that matters, plus exact ties of each narrow type.
  std::mt19937_64 rng(7);
  std::vector<double> values{0.0,
                             -0.0,
                             65504.0,
                             65519.999,
                             65520.0,
                             -65520.0,
                             0x1p-24,
                             0x1p-25,
                             0x1.8p-25,
                             0x1p-26,
                             0x1.fep127,
                             0x1.fdp127,
                             0x1p-133,
                             0x1p-134,
                             1e300,
                             -1e-300,
                             std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  std::uniform_int_distribution<int> exp_dist(-140, 130);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) {
    const double m = std::ldexp(mant(rng), exp_dist(rng)) * (i % 2 ? -1.0 : 1.0);
    values.push_back(m);
    // Ties: an f16 / bf16 value plus half its quantum, nudged or not.
    const float h = round_to(DType::f16, static_cast<float>(m));
    const float b = round_to(DType::bf16, static_cast<float>(m));
    if (std::isfinite(h) && h != 0.0f) {
      const double q = std::ldexp(1.0, std::ilogb(h) - 11);
      values.insert(values.end(), {h + q, h - q, std::nextafter(h + q, 0.0), std::nextafter(h + q, 1e300)});
    }
    if (std::isfinite(b) && b != 0.0f) {
      const double q = std::ldexp(1.0, std::ilogb(b) - 8);
      values.insert(values.end(), {b + q, b - q, std::nextafter(b + q, 0.0), std::nextafter(b + q, 1e300)});
    }
  }
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    int mismatches = 0;
    for (double v : values) {
      const float want = round_to_from_double(t, v);
      const auto got = static_cast<float>(reference::detail::round_d(t, v));
      const bool same = std::memcmp(&want, &got, sizeof(float)) == 0 || (std::isnan(want) && std::isnan(got));
      if (!same && ++mismatches < 5)
        ADD_FAILURE() << dtype_name(t) << " " << std::hexfloat << v << ": " << got << " vs " << want;
    }
    EXPECT_EQ(mismatches, 0) << dtype_name(t);
  }
}

TEST(ReferenceRounding, RoundSumBreaksTiesWithTheExactRemainder) {
  using reference::detail::round_sum;
  // 1 + 2^-8 is a bf16 tie; 2^-80 is lost in the double sum but decides it.
  EXPECT_EQ(round_sum(DType::bf16, 1.0 + 0x1p-8, 0x1p-80), 1.0 + 0x1p-7);
  EXPECT_EQ(round_sum(DType::bf16, 1.0 + 0x1p-8, -0x1p-80), 1.0);
  EXPECT_EQ(round_sum(DType::bf16, 1.0 + 0x1p-8, 0.0), 1.0);  // a true tie goes to even
  EXPECT_EQ(round_sum(DType::f16, 2048.0 + 1.0, 0x1p-60), 2050.0);
  EXPECT_EQ(round_sum(DType::f16, 65504.0, 16.0), std::numeric_limits<double>::infinity());
}

// --- matmul / linear -------------------------------------------------------

TEST_F(ReferenceOps, MatmulKnownValues) {
  auto c = ctx();
  const Tensor a = up({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = up({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_EQ(down(ops::matmul(c, a, b)), (std::vector<float>{58, 64, 139, 154}));
  const Tensor bias = up({2}, {1, -1});
  EXPECT_EQ(down(ops::matmul(c, a, b, false, 0.5f, &bias)), (std::vector<float>{30, 31, 70.5f, 76}));
  // trans_b: b given as [n, k].
  const Tensor bt = up({2, 3}, {7, 9, 11, 8, 10, 12});
  EXPECT_EQ(down(ops::matmul(c, a, bt, true)), (std::vector<float>{58, 64, 139, 154}));
}

TEST_F(ReferenceOps, MatmulBatchedAndSharedWeights) {
  auto c = ctx();
  const Tensor a = up({2, 1, 2}, {1, 2, 3, 4});
  const Tensor b_batched = up({2, 2, 1}, {1, 1, 10, 100});
  EXPECT_EQ(down(ops::matmul(c, a, b_batched)), (std::vector<float>{3, 430}));
  const Tensor b_shared = up({2, 1}, {1, 1});
  const Tensor out = ops::matmul(c, a, b_shared);
  EXPECT_EQ(out.shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(down(out), (std::vector<float>{3, 7}));
}

TEST_F(ReferenceOps, LinearUsesTorchWeightLayout) {
  auto c = ctx();
  const Tensor x = up({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor w = up({2, 3}, {1, 0, 0, 1, 1, 1});  // out0 = x0, out1 = x0 + x1 + x2
  const Tensor b = up({2}, {0.5f, -0.5f});
  const Tensor y = ops::linear(c, x, w, &b);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(down(y), (std::vector<float>{1.5f, 5.5f, 4.5f, 14.5f}));
}

// --- the failure modes native accumulation must reproduce -------------------

TEST_F(ReferenceOps, F16NativeDotOverflowsWhereF32AccumulationIsFinite) {
  // 256 products of +256 reach 65536 (past 65504: +Inf in f16) before 44
  // products of -256 bring the exact sum back to 54272, representable in f16.
  std::vector<float> av(300, 16.0f), bv(300, 16.0f);
  for (std::size_t i = 256; i < 300; ++i) bv[i] = -16.0f;
  const Tensor a = up({1, 300}, av, DType::f16);
  const Tensor b = up({300, 1}, bv, DType::f16);
  const float native = down(ops::matmul(ctx(DType::f16, Accumulate::native), a, b))[0];
  const float wide = down(ops::matmul(ctx(DType::f16, Accumulate::f32), a, b))[0];
  EXPECT_EQ(native, kInf);
  EXPECT_EQ(wide, 54272.0f);
}

TEST_F(ReferenceOps, Bf16NativeSumLosesSmallTerms) {
  // 1 + 256 * 2^-9: each small term is a quarter of bf16's ulp at 1 (2^-7),
  // so every native partial sum rounds back to 1. The exact sum 1.5 is a bf16 value.
  std::vector<float> av(257, 1.0f), bv(257, 0x1p-9f);
  bv[0] = 1.0f;
  const Tensor a = up({1, 257}, av, DType::bf16);
  const Tensor b = up({257, 1}, bv, DType::bf16);
  EXPECT_EQ(down(ops::matmul(ctx(DType::bf16, Accumulate::native), a, b))[0], 1.0f);
  EXPECT_EQ(down(ops::matmul(ctx(DType::bf16, Accumulate::f32), a, b))[0], 1.5f);
}

TEST_F(ReferenceOps, F16NativeGroupNormOverflowsOnLargeActivations) {
  // 64 values around 3000 (exact in f16): x*x is already past 65504 and the
  // running sum of x passes it after 22 terms, so mean and variance are Inf/NaN.
  std::vector<float> xv(64);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 3000.0f + 2.0f * static_cast<float>(i % 8);
  const Tensor x = up({1, 2, 32}, xv, DType::f16);
  const auto native = down(ops::group_norm(ctx(DType::f16, Accumulate::native), x, 1, nullptr, nullptr, 1e-5f));
  const auto wide = down(ops::group_norm(ctx(DType::f16, Accumulate::f32), x, 1, nullptr, nullptr, 1e-5f));
  EXPECT_TRUE(std::isnan(native[0])) << native[0];
  for (float v : wide) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(wide[0], -7.0f / std::sqrt(21.0f), 2e-3f);  // offsets 0, 2, .., 14: mean 7, var 21
}

TEST_F(ReferenceOps, NativeSoftmaxScoresOverflowToNaN) {
  // q.k = 90000 is past f16's range: stored as an f16 score it is +Inf and the
  // softmax turns Inf - Inf into NaN; an f32 score keeps the row finite.
  const Tensor q = up({1, 1, 1}, {300}, DType::f16);
  const Tensor k = up({1, 2, 1}, {300, 1}, DType::f16);
  const Tensor v = up({1, 2, 1}, {2, 4}, DType::f16);
  auto native = ctx(DType::f16, Accumulate::f32, SoftmaxPrecision::native);
  auto upcast = ctx(DType::f16, Accumulate::f32, SoftmaxPrecision::f32);
  for (AttentionImpl impl : {AttentionImpl::bmm, AttentionImpl::fused}) {
    native.attention.impl = upcast.attention.impl = impl;
    EXPECT_TRUE(std::isnan(down(ops::attention(native, q, k, v, 1, 1.0f))[0])) << attention_impl_name(impl);
    EXPECT_EQ(down(ops::attention(upcast, q, k, v, 1, 1.0f))[0], 2.0f) << attention_impl_name(impl);
  }
}

TEST_F(ReferenceOps, Conv1x1EqualsMatmulBitForBitInNativeF16) {
  // Same terms in the same order (input channels ascending): identical roundings.
  const std::int64_t c = 37, o = 5, hw = 12;
  const auto xv = random(static_cast<std::size_t>(c * hw), 1, -4.0f, 4.0f);
  const auto wv = random(static_cast<std::size_t>(o * c), 2, -4.0f, 4.0f);
  auto cx = ctx(DType::f16, Accumulate::native);
  const auto conv =
      down(ops::conv2d(cx, up({1, c, 3, 4}, xv, DType::f16), up({o, c, 1, 1}, wv, DType::f16), nullptr, 1, 0));
  const auto mm = down(ops::matmul(cx, up({o, c}, wv, DType::f16), up({c, hw}, xv, DType::f16)));
  EXPECT_EQ(conv, mm);
}

// --- conv / norms / softmax / activations ----------------------------------

TEST_F(ReferenceOps, Conv2dKnownValues) {
  auto c = ctx();
  const Tensor x = up({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Tensor w = up({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  EXPECT_EQ(down(ops::conv2d(c, x, w, nullptr, 1, 1)), (std::vector<float>{12, 21, 16, 27, 45, 33, 24, 39, 28}));
  const Tensor bias = up({1}, {100});
  const Tensor y = ops::conv2d(c, x, w, &bias, 2, 1);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(down(y), (std::vector<float>{112, 116, 124, 128}));
  // Two input channels, two outputs, 1x1: out = w0 * x0 + w1 * x1 + b.
  const Tensor x2 = up({1, 2, 1, 2}, {1, 2, 10, 20});
  const Tensor w2 = up({2, 2, 1, 1}, {1, 1, 2, -1});
  const Tensor b2 = up({2}, {0, 0.5f});
  EXPECT_EQ(down(ops::conv2d(c, x2, w2, &b2, 1, 0)), (std::vector<float>{11, 22, -7.5f, -15.5f}));
}

TEST_F(ReferenceOps, Conv2dNonFiniteWeightPoisonsPadding) {
  // As im2col + GEMM: 0 (padding) * Inf = NaN at the border, Inf inside.
  const Tensor x = up({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  const Tensor w = up({1, 1, 3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, kInf});
  const auto y = down(ops::conv2d(ctx(), x, w, nullptr, 1, 1));
  EXPECT_EQ(y[0], kInf);
  EXPECT_TRUE(std::isnan(y[8]));
}

TEST_F(ReferenceOps, GroupAndLayerNormKnownValues) {
  auto c = ctx();
  // Groups of two channels: {1,2,3,4} and {10,10,30,30}.
  const Tensor x = up({1, 4, 2}, {1, 2, 3, 4, 10, 10, 30, 30});
  const Tensor gamma = up({4}, {1, 1, 2, 2});
  const Tensor beta = up({4}, {0, 0, 0, 1});
  const auto y = down(ops::group_norm(c, x, 2, &gamma, &beta, 0.0f));
  const float s = 1.0f / std::sqrt(1.25f);
  expect_near_all(y, {-1.5f * s, -0.5f * s, 0.5f * s, 1.5f * s, -2, -2, 3, 3}, 1e-6f);

  const Tensor r = up({2, 4}, {1, 2, 3, 4, 5, 5, 5, 5});
  const auto ln = down(ops::layer_norm(c, r, nullptr, nullptr, 1e-5f));
  const float t = 1.0f / std::sqrt(1.25f + 1e-5f);
  expect_near_all(ln, {-1.5f * t, -0.5f * t, 0.5f * t, 1.5f * t, 0, 0, 0, 0}, 1e-6f);
}

TEST_F(ReferenceOps, SoftmaxKnownValuesAndStability) {
  auto c = ctx();
  expect_near_all(down(ops::softmax(c, up({1, 3}, {1, 2, 3}))), {0.09003057f, 0.24472847f, 0.66524096f}, 1e-7f);
  expect_near_all(down(ops::softmax(c, up({2, 2}, {1000, 1000, -1e30f, 0}))), {0.5f, 0.5f, 0, 1}, 0.0f);
  // Native f16: each step rounded, still a distribution close to the exact one.
  const auto h =
      down(ops::softmax(ctx(DType::f16, Accumulate::f32, SoftmaxPrecision::native), up({1, 3}, {1, 2, 3}, DType::f16)));
  expect_near_all(h, {0.09003057f, 0.24472847f, 0.66524096f}, 1e-3f);
}

TEST_F(ReferenceOps, ActivationsKnownValues) {
  auto c = ctx();
  const Tensor x = up({3}, {-1, 0, 1});
  expect_near_all(down(ops::silu(c, x)), {-0.26894142f, 0, 0.73105858f}, 1e-7f);
  expect_near_all(down(ops::gelu(c, x)), {-0.15865525f, 0, 0.84134475f}, 1e-7f);
  expect_near_all(down(ops::gelu(c, x, ops::GeluApprox::tanh)), {-0.15880801f, 0, 0.84119199f}, 1e-7f);
  const float qg = static_cast<float>(1.0 / (1.0 + std::exp(-1.702)));
  expect_near_all(down(ops::quick_gelu(c, x)), {-(1 - qg), 0, qg}, 1e-7f);
  EXPECT_EQ(down(ops::scale(c, x, 0.18215f)), (std::vector<float>{-0.18215f, 0, 0.18215f}));
  // GEGLU: values [1, 2], gate [0, 1] -> [1 * gelu(0), 2 * gelu(1)].
  expect_near_all(down(ops::geglu(c, up({1, 4}, {1, 2, 0, 1}))), {0, 1.6826895f}, 1e-6f);
  // Large inputs stay finite and exact: silu(x) = x for big x.
  EXPECT_EQ(down(ops::silu(ctx(DType::f16), up({1}, {60000}, DType::f16)))[0], 60000.0f);
}

TEST_F(ReferenceOps, ElementwiseBroadcasting) {
  auto c = ctx();
  std::vector<float> av(24);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i);
  const Tensor a = up({2, 3, 4}, av);
  // b [3, 1]: one value per middle row.
  const auto s = down(ops::add(c, a, up({3, 1}, {100, 200, 300})));
  for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(s[i], av[i] + 100.0f * static_cast<float>(1 + (i / 4) % 3));
  // b [4]: one value per column; b [2, 1, 4]: broadcast over the middle.
  const auto d = down(ops::sub(c, a, up({4}, {0, 1, 2, 3})));
  for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(d[i], av[i] - static_cast<float>(i % 4));
  const auto m = down(ops::mul(c, a, up({2, 1, 4}, {1, 1, 1, 1, 2, 2, 2, 2})));
  for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(m[i], av[i] * (i < 12 ? 1.0f : 2.0f));
  // A rank-5 shape whose broadcast pattern collapses to rank 4.
  const Tensor a5 = up({2, 1, 2, 2, 3}, random(24, 3));
  const auto a5v = down(a5);
  const auto r5 = down(ops::add(c, a5, up({2, 1, 3}, {1, 2, 3, 4, 5, 6})));
  for (std::size_t i = 0; i < 24; ++i) {
    const std::size_t k = i % 3, j = (i / 6) % 2;
    EXPECT_EQ(r5[i], a5v[i] + static_cast<float>(j * 3 + k + 1));
  }
  // f16: the exact sum rounds once: 65520 is the tie that goes to Inf, 65512 rounds down.
  EXPECT_EQ(down(ops::add(ctx(DType::f16), up({1}, {65504}, DType::f16), up({1}, {16}, DType::f16)))[0], kInf);
  EXPECT_EQ(down(ops::add(ctx(DType::f16), up({1}, {65504}, DType::f16), up({1}, {8}, DType::f16)))[0], 65504.0f);
}

TEST_F(ReferenceOps, ShapeOps) {
  auto c = ctx();
  const Tensor a = up({2, 2}, {1, 2, 3, 4});
  const Tensor b = up({2, 1}, {5, 6});
  const std::vector<Tensor> parts{a, b};
  const Tensor cat = ops::concat(c, parts, -1);
  EXPECT_EQ(cat.shape(), (Shape{2, 3}));
  EXPECT_EQ(down(cat), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  const Tensor sl = ops::slice(c, cat, 1, 1, 3);
  EXPECT_EQ(sl.shape(), (Shape{2, 2}));
  EXPECT_EQ(down(sl), (std::vector<float>{2, 5, 4, 6}));

  std::vector<float> xv(24);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
  const std::vector<int> perm{0, 2, 1};
  const Tensor p = ops::permute(c, up({2, 3, 4}, xv), perm);
  EXPECT_EQ(p.shape(), (Shape{2, 4, 3}));
  const auto pv = down(p);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(pv[(i * 4 + j) * 3 + k], xv[(i * 3 + k) * 4 + j]);

  const Tensor u = ops::upsample_nearest2x(c, up({1, 1, 2, 2}, {1, 2, 3, 4}));
  EXPECT_EQ(down(u), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
}

TEST_F(ReferenceOps, CastRoundsToNearestEvenAndOverflows) {
  auto c = ctx();
  const Tensor x = up({5}, {65504, 65520, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -70000});
  const Tensor h = ops::cast(c, x, DType::f16);
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(down(h), (std::vector<float>{65504, kInf, 1.0f, 1.0f + 0x1p-9f, -kInf}));
  // Cast accepts any input dtype; the f16 -> f32 widening is exact.
  EXPECT_EQ(down(ops::cast(ctx(DType::f16), h, DType::f32)), down(h));
}

TEST_F(ReferenceOps, TimestepEmbeddingKnownValues) {
  auto c = ctx();
  const std::vector<float> ts{0.0f, 1.0f};
  // dim 4, shift 1: half = 2, freq = exp(-ln(10000) * i / (2 - 1)) = {1, 1e-4}.
  const auto e = down(ops::timestep_embedding(c, ts, 4, false, 1.0f));
  expect_near_all(e, {0, 0, 1, 1, std::sin(1.0f), std::sin(1e-4f), std::cos(1.0f), std::cos(1e-4f)}, 1e-7f);
  const auto f = down(ops::timestep_embedding(c, ts, 5, true, 1.0f));
  expect_near_all(f, {1, 1, 0, 0, 0, std::cos(1.0f), std::cos(1e-4f), std::sin(1.0f), std::sin(1e-4f), 0}, 1e-7f);
}

// --- attention ---------------------------------------------------------------

TEST_F(ReferenceOps, AttentionKnownValues) {
  for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::bmm, AttentionImpl::sliced}) {
    auto c = ctx();
    c.attention.impl = impl;
    // Scores {0, ln 3}: probabilities {1/4, 3/4}; values {4, 8} -> 7.
    const Tensor q = up({1, 1, 1}, {1});
    const Tensor k = up({1, 2, 1}, {0, std::log(3.0f)});
    const Tensor v = up({1, 2, 1}, {4, 8});
    EXPECT_NEAR(down(ops::attention(c, q, k, v, 1, 1.0f))[0], 7.0f, 1e-6f) << attention_impl_name(impl);
    // Causal with zero queries: query i averages v[0..i].
    const Tensor q3 = up({1, 3, 1}, {0, 0, 0});
    const Tensor k3 = up({1, 3, 1}, {1, 2, 3});
    const Tensor v3 = up({1, 3, 1}, {3, 6, 12});
    expect_near_all(down(ops::attention(c, q3, k3, v3, 1, 1.0f, true)), {3, 4.5f, 7}, 1e-6f);
  }
}

struct AttnShape {
  std::int64_t batch, sq, sk, heads, d, dv;
  bool causal;
};

TEST_F(ReferenceOps, AttentionImplementationsAgreeInF32) {
  for (const AttnShape s : {AttnShape{2, 5, 7, 3, 4, 6, false}, AttnShape{1, 9, 9, 2, 8, 8, true}}) {
    const Tensor q = up({s.batch, s.sq, s.heads * s.d}, random(s.batch * s.sq * s.heads * s.d, 10, -2, 2));
    const Tensor k = up({s.batch, s.sk, s.heads * s.d}, random(s.batch * s.sk * s.heads * s.d, 11, -2, 2));
    const Tensor v = up({s.batch, s.sk, s.heads * s.dv}, random(s.batch * s.sk * s.heads * s.dv, 12));
    auto c = ctx();
    c.attention.impl = AttentionImpl::bmm;
    const auto bmm = down(ops::attention(c, q, k, v, static_cast<int>(s.heads), 0.5f, s.causal));
    c.attention = {AttentionImpl::sliced, 2};
    EXPECT_EQ(down(ops::attention(c, q, k, v, static_cast<int>(s.heads), 0.5f, s.causal)), bmm);
    c.attention.impl = AttentionImpl::fused;
    expect_near_all(down(ops::attention(c, q, k, v, static_cast<int>(s.heads), 0.5f, s.causal)), bmm, 1e-6f);
  }
}

TEST_F(ReferenceOps, SlicedEqualsBmmBitwiseInF16) {
  const AttnShape s{2, 6, 11, 3, 8, 5, false};
  const Tensor q = up({s.batch, s.sq, s.heads * s.d}, random(s.batch * s.sq * s.heads * s.d, 20, -3, 3), DType::f16);
  const Tensor k = up({s.batch, s.sk, s.heads * s.d}, random(s.batch * s.sk * s.heads * s.d, 21, -3, 3), DType::f16);
  const Tensor v = up({s.batch, s.sk, s.heads * s.dv}, random(s.batch * s.sk * s.heads * s.dv, 22), DType::f16);
  for (Accumulate acc : {Accumulate::f32, Accumulate::native}) {
    for (SoftmaxPrecision sm : {SoftmaxPrecision::f32, SoftmaxPrecision::native}) {
      auto c = ctx(DType::f16, acc, sm);
      c.attention.impl = AttentionImpl::bmm;
      const auto bmm = down(ops::attention(c, q, k, v, 3, 0.35f));
      for (int slice : {1, 4, 100}) {
        c.attention = {AttentionImpl::sliced, slice};
        EXPECT_EQ(down(ops::attention(c, q, k, v, 3, 0.35f)), bmm) << c.precision.describe() << " slice " << slice;
      }
      c.attention.impl = AttentionImpl::fused;
      expect_near_all(down(ops::attention(c, q, k, v, 3, 0.35f)), bmm, 1e-2f);
    }
  }
}

// --- errors and tracing ------------------------------------------------------

std::string op_error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const OpError& e) {
    return e.what();
  }
  return "(no OpError thrown)";
}

TEST_F(ReferenceOps, MismatchedShapesNameOpAndShapes) {
  auto c = ctx();
  c.path = "unet.mid_block.attentions.0.proj_in";
  const Tensor a = up({2, 3}, random(6, 1));
  const Tensor b = up({4, 2}, random(8, 2));
  const std::string m = op_error_message([&] { ops::matmul(c, a, b); });
  EXPECT_NE(m.find("MATMUL"), std::string::npos) << m;
  EXPECT_NE(m.find("unet.mid_block.attentions.0.proj_in"), std::string::npos) << m;
  EXPECT_NE(m.find("a[2,3] f32"), std::string::npos) << m;
  EXPECT_NE(m.find("b[4,2] f32"), std::string::npos) << m;
  EXPECT_NE(m.find("\"reference\""), std::string::npos) << m;

  const Tensor x = up({1, 6, 2, 2}, random(24, 3));
  const std::string g = op_error_message([&] { ops::group_norm(c, x, 4, nullptr, nullptr, 1e-5f); });
  EXPECT_NE(g.find("GROUP_NORM"), std::string::npos) << g;
  EXPECT_NE(g.find("x[1,6,2,2]"), std::string::npos) << g;
  EXPECT_NE(g.find("groups=4"), std::string::npos) << g;

  const std::string bc = op_error_message([&] { ops::add(c, x, up({3}, {1, 2, 3})); });
  EXPECT_NE(bc.find("ADD"), std::string::npos) << bc;
  EXPECT_NE(bc.find("cannot broadcast"), std::string::npos) << bc;
}

TEST_F(ReferenceOps, ZeroSizeDtypeMismatchAndForeignTensorsAreRejected) {
  auto c = ctx();
  const Tensor empty = be_.upload(HostTensor({0, 4}, DType::f32));
  const std::string z = op_error_message([&] { ops::softmax(c, empty); });
  EXPECT_NE(z.find("SOFTMAX"), std::string::npos) << z;
  EXPECT_NE(z.find("x[0,4]"), std::string::npos) << z;
  EXPECT_NE(z.find("zero-size"), std::string::npos) << z;

  const Tensor h = up({2, 2}, {1, 2, 3, 4}, DType::f16);
  const std::string d = op_error_message([&] { ops::silu(c, h); });
  EXPECT_NE(d.find("SILU"), std::string::npos) << d;
  EXPECT_NE(d.find("x[2,2] f16"), std::string::npos) << d;
  EXPECT_NE(d.find("precision is f32"), std::string::npos) << d;

  reference::ReferenceBackend other;
  const Tensor foreign = other.upload(HostTensor::from_f32({2}, {1, 2}));
  const std::string f = op_error_message([&] { ops::scale(c, foreign, 2.0f); });
  EXPECT_NE(f.find("another device"), std::string::npos) << f;

  OpContext none;
  EXPECT_THROW(ops::silu(none, up({1}, {1})), OpError);
}

TEST_F(ReferenceOps, TracerSeesEveryOpWithItsInputs) {
  struct Recorder : OpTracer {
    std::vector<std::string> names;
    std::vector<std::size_t> inputs;
    std::vector<std::string> paths;
    void on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const> in,
               const Tensor& out) override {
      names.emplace_back(op);
      inputs.push_back(in.size());
      paths.push_back(ctx.path);
    }
  } rec;
  auto c = ctx().child("down_blocks.0");
  c.tracer = &rec;
  const Tensor x = up({1, 2}, {1, 2});
  const Tensor w = up({3, 2}, random(6, 4));
  const Tensor y = ops::linear(c.child("proj"), x, w, nullptr);
  ops::gelu(c, y);
  EXPECT_EQ(rec.names, (std::vector<std::string>{"LINEAR", "GELU"}));
  EXPECT_EQ(rec.inputs, (std::vector<std::size_t>{2, 1}));
  EXPECT_EQ(rec.paths, (std::vector<std::string>{"test.down_blocks.0.proj", "test.down_blocks.0"}));
}

// Mixed precision (per-module dtype overrides): an op casts inputs of another
// dtype to its context's, activations through a traced CAST under the op's
// module path and weights untraced; without the flag they are an error.
TEST_F(ReferenceOps, MixedPrecisionCastsInputsToTheModulesDtype) {
  struct Recorder : OpTracer {
    std::vector<std::string> names;
    std::vector<DType> dtypes;
    void on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const> in,
               const Tensor& out) override {
      names.emplace_back(op);
      dtypes.push_back(out.dtype());
    }
  } rec;
  const Tensor x16 = up({1, 2}, {30000, 40000}, DType::f16);
  const Tensor w16 = up({2, 2}, {1, 1, 1, 1}, DType::f16);
  OpContext strict = ctx(DType::f32);
  EXPECT_THROW(ops::linear(strict, x16, w16, nullptr), OpError);

  OpContext up32 = ctx(DType::f32);
  up32.mixed_precision = true;
  up32.tracer = &rec;
  const Tensor y = ops::linear(up32, x16, w16, nullptr);  // 70000: past f16's 65504, fine in f32
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(down(y), (std::vector<float>{70000, 70000}));
  EXPECT_EQ(rec.names, (std::vector<std::string>{"CAST", "LINEAR"}));  // the weight's cast is not traced

  // Back in an f16 module the value no longer fits: its CAST is where it breaks.
  OpContext back16 = ctx(DType::f16);
  back16.mixed_precision = true;
  back16.tracer = &rec;
  const Tensor z = ops::scale(back16, y, 0.5f);
  EXPECT_EQ(z.dtype(), DType::f16);
  EXPECT_EQ(rec.names.back(), "SCALE");
  EXPECT_EQ(rec.names[rec.names.size() - 2], "CAST");
  EXPECT_EQ(rec.dtypes[rec.names.size() - 2], DType::f16);
  EXPECT_TRUE(std::isinf(down(z)[0]));
  // Same dtypes: no cast at all.
  const std::size_t before = rec.names.size();
  ops::scale(up32, y, 2.0f);
  EXPECT_EQ(rec.names.size(), before + 1);
}

}  // namespace
}  // namespace nanscope
