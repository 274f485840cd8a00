// GROUP_NORM and LAYER_NORM: the precision matrix on odd and SD shapes, the f16
// native statistics overflow on large activations (the VAE's classic failure),
// and bad inputs.

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

// Activations with a non-zero mean (norms exist to remove it) and unit-ish spread.
HostTensor activations(Rng& rng, const Shape& s, DType t) { return random_normal(rng, s, t, 0.5, 2.0); }

OpCase group_norm_case(const Shape& x, int groups, bool affine, float eps = 1e-5f) {
  const std::int64_t c_ch = x[1];
  OpCase c;
  c.op = "group_norm";
  c.family = "norm";
  c.desc = "x" + shape_tag(x) + "_g" + std::to_string(groups) + (affine ? "_affine" : "");
  c.oracle = {{"op", "group_norm"}, {"groups", groups}, {"eps", eps}, {"affine", affine}};
  c.build = [=](Rng& rng, const Precision& p) {
    std::vector<HostTensor> in{activations(rng, x, p.dtype)};
    if (affine) {
      in.push_back(random_normal(rng, {c_ch}, p.dtype, 1.0, 0.2));
      in.push_back(random_normal(rng, {c_ch}, p.dtype, 0.0, 0.2));
    }
    return in;
  };
  c.run = [=](const OpContext& ctx, const std::vector<Tensor>& in) {
    return ops::group_norm(ctx, in[0], groups, affine ? &in[1] : nullptr, affine ? &in[2] : nullptr, eps);
  };
  return c;
}

OpCase layer_norm_case(const Shape& x, bool affine, float eps = 1e-5f) {
  const std::int64_t d = x.back();
  OpCase c;
  c.op = "layer_norm";
  c.family = "norm";
  c.desc = "x" + shape_tag(x) + (affine ? "_affine" : "");
  c.oracle = {{"op", "layer_norm"}, {"eps", eps}, {"affine", affine}};
  c.build = [=](Rng& rng, const Precision& p) {
    std::vector<HostTensor> in{activations(rng, x, p.dtype)};
    if (affine) {
      in.push_back(random_normal(rng, {d}, p.dtype, 1.0, 0.2));
      in.push_back(random_normal(rng, {d}, p.dtype, 0.0, 0.2));
    }
    return in;
  };
  c.run = [=](const OpContext& ctx, const std::vector<Tensor>& in) {
    return ops::layer_norm(ctx, in[0], affine ? &in[1] : nullptr, affine ? &in[2] : nullptr, eps);
  };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c) {
    for (auto& p : expand(c, precision_matrix())) all.push_back(std::move(p));
  };
  add(group_norm_case({2, 12, 5, 7}, 3, true));    // odd spatial, 4 channels per group
  add(group_norm_case({1, 13, 5, 7}, 13, false));  // 13 groups of one channel, no affine
  add(group_norm_case({2, 6, 77}, 2, true));       // rank 3
  // SD shapes: groups of 2560 and 40960 values. bf16 partial sums stop growing
  // long before the end (each added value is below half an ulp of the sum) and
  // over 40960 values the f16 sum of x*x passes 65504: the native modes are
  // checked against the reference's semantics only.
  OpCase mid = group_norm_case({2, 1280, 8, 8}, 32, true);  // SD mid block
  mid.native_close_to_exact = false;
  add(mid);
  OpCase big = group_norm_case({1, 320, 64, 64}, 32, true, 1e-6f);  // SD VAE/UNet at 64x64
  big.native_close_to_exact = false;
  add(big);
  // Groups of 17956 values: the CPU kernels' statistics (common/norm_stats.cl norm_stats_chunked) in 4 chunks of 4096
  // and a last one of 1572, whose last 4 values are not a whole vector.
  OpCase chunks = group_norm_case({1, 8, 67, 67}, 2, true);
  chunks.native_close_to_exact = false;
  add(chunks);
  add(layer_norm_case({5, 13}, true));
  add(layer_norm_case({1, 77, 768}, true));     // CLIP
  add(layer_norm_case({2, 4096, 320}, false));  // SD transformer block norm1 at 64x64 (affine folded)
  return all;
}

NANSCOPE_OP_TESTS(Norm, cases());

// Positive activations around 200: each group's sum of x passes 65504 after
// ~330 values. With native f16 statistics the sum is +Inf and the output turns
// non-finite; with f32 accumulation it is finite and matches PyTorch's math.
TEST(NormFailureModes, GroupNormNativeF16OverflowsOnLargeActivations) {
  const Shape shape{1, 8, 16, 16};
  Rng rng(seed_from("group_norm overflow"));
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const HostTensor x = random_normal(rng, shape, DType::f16, 200.0, 10.0);
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const Tensor tx = be->upload(x);
    const auto native = be->download(
        ops::group_norm(make_context(*be, {DType::f16, Accumulate::native}), tx, 2, nullptr, nullptr, 1e-5f));
    const auto exact =
        be->download(ops::group_norm(make_context(*be, {DType::f16, Accumulate::f32}), tx, 2, nullptr, nullptr, 1e-5f));
    EXPECT_GT(count_nonfinite(native), 0) << "native f16 statistics should overflow";
    EXPECT_EQ(count_nonfinite(exact), 0);
    // The f32-accumulated output is a proper normalisation: per group mean ~0, variance ~1.
    for (int g = 0; g < 2; ++g) {
      double s = 0, s2 = 0;
      const std::int64_t n = 4 * 16 * 16;
      for (std::int64_t i = g * n; i < (g + 1) * n; ++i) {
        s += exact.get(i);
        s2 += double(exact.get(i)) * exact.get(i);
      }
      EXPECT_NEAR(s / n, 0.0, 0.01) << "group " << g;
      EXPECT_NEAR(s2 / n, 1.0, 0.02) << "group " << g;
    }
  }
}

// Groups around a mean 150x their spread (300 + N(0, 2), 17956 values each), f32: the statistics must keep the
// mean within half an ulp of 300 (1.5e-5), as a correctly rounded f32 mean is. That error moves every output by
// up to 1.5e-5 / 2: nmse 5.8e-11 against the exact normalisation of the same inputs (f64 on the host), the limit.
// Both kernel styles sum about a shift (common/norm_stats.cl norm_stats): 1.3e-11 here. Summed as they come, over the
// whole group (one f32 sum per vector lane), they gave 7.8e-11: the mean about 1.2 ulp off.
TEST(NormStatistics, AMeanFarFromZeroIsKeptToAboutOneUlp) {
  const Shape shape{1, 8, 67, 67};
  const std::int64_t groups = 2, n = 4 * 67 * 67;
  Rng rng(seed_from("group_norm far mean"));
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const HostTensor x = random_normal(rng, shape, DType::f32, 300.0, 2.0);
  std::vector<double> want(static_cast<std::size_t>(groups * n));
  for (std::int64_t g = 0; g < groups; ++g) {
    double sum = 0, m2 = 0;
    for (std::int64_t i = g * n; i < (g + 1) * n; ++i) sum += x.get(i);
    const double mean = sum / static_cast<double>(n);
    for (std::int64_t i = g * n; i < (g + 1) * n; ++i) m2 += (x.get(i) - mean) * (x.get(i) - mean);
    const double rstd = 1.0 / std::sqrt(m2 / static_cast<double>(n) + 1e-5);
    for (std::int64_t i = g * n; i < (g + 1) * n; ++i) want[static_cast<std::size_t>(i)] = (x.get(i) - mean) * rstd;
  }
  for_each_backend([&](Backend& be) {
    const HostTensor got =
        be.download(ops::group_norm(make_context(be, {DType::f32}), be.upload(x), 2, nullptr, nullptr, 1e-5f));
    double err = 0, ref = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      err += (got.get(static_cast<std::int64_t>(i)) - want[i]) * (got.get(static_cast<std::int64_t>(i)) - want[i]);
      ref += want[i] * want[i];
    }
    EXPECT_LE(err / ref, 5.8e-11);
  });
}

TEST(NormBadInput, ShapesDtypesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::bf16});
    const Tensor x = be->upload(HostTensor({2, 13, 5, 7}, DType::bf16));
    expect_op_error([&] { ops::group_norm(ctx, x, 4, nullptr, nullptr, 1e-5f); },
                    {"GROUP_NORM", "[2,13,5,7]", "groups=4"});
    const Tensor gamma = be->upload(HostTensor({12}, DType::bf16));
    expect_op_error([&] { ops::group_norm(ctx, x, 13, &gamma, &gamma, 1e-5f); }, {"GROUP_NORM", "gamma", "[13]"});
    const Tensor x32 = be->upload(HostTensor({2, 13, 5, 7}, DType::f32));
    expect_op_error([&] { ops::group_norm(ctx, x32, 13, nullptr, nullptr, 1e-5f); }, {"GROUP_NORM", "f32", "bf16"});
    const Tensor empty = be->upload(HostTensor({2, 0, 5}, DType::bf16));
    expect_op_error([&] { ops::layer_norm(ctx, empty, nullptr, nullptr, 1e-5f); }, {"LAYER_NORM", "[2,0,5]"});
    const Tensor y = be->upload(HostTensor({3, 7}, DType::bf16));
    expect_op_error([&] { ops::layer_norm(ctx, y, &gamma, nullptr, 1e-5f); }, {"LAYER_NORM", "[3,7]", "gamma"});
  }
}

// Hand-worked values on every backend.
TEST(NormKnownValues, GroupAndLayerNorm) {
  for_each_backend([](Backend& be) {
    const Precision p{DType::f32};
    const OpContext c = make_context(be, p);
    // Groups of two channels: {1,2,3,4} and {10,10,30,30}.
    const Tensor x = upload_values(be, {1, 4, 2}, {1, 2, 3, 4, 10, 10, 30, 30});
    const Tensor gamma = upload_values(be, {4}, {1, 1, 2, 2});
    const Tensor beta = upload_values(be, {4}, {0, 0, 0, 1});
    const double s = 1.0 / std::sqrt(1.25);
    EXPECT_TRUE(matches_known(be.download(ops::group_norm(c, x, 2, &gamma, &beta, 0.0f)),
                              {float(-1.5 * s), float(-0.5 * s), float(0.5 * s), float(1.5 * s), -2, -2, 3, 3}, "norm",
                              p));
    const Tensor r = upload_values(be, {2, 4}, {1, 2, 3, 4, 5, 5, 5, 5});
    const double t = 1.0 / std::sqrt(1.25 + 1e-5);
    EXPECT_TRUE(matches_known(be.download(ops::layer_norm(c, r, nullptr, nullptr, 1e-5f)),
                              {float(-1.5 * t), float(-0.5 * t), float(0.5 * t), float(1.5 * t), 0, 0, 0, 0}, "norm",
                              p));
  });
}

// 64 values around 3000 (exact in f16): x*x is already past 65504 and the
// running sum of x passes it after 22 terms, so native f16 statistics are
// Inf/NaN while f32 accumulation normalises the group.
TEST(NormFailureModes, F16NativeGroupNormOverflowsOnLargeActivations) {
  std::vector<float> xv(64);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = 3000.0f + 2.0f * static_cast<float>(i % 8);
  for_each_backend([&](Backend& be) {
    const Tensor x = upload_values(be, {1, 2, 32}, xv, DType::f16);
    const auto native = download_values(
        be, ops::group_norm(make_context(be, {DType::f16, Accumulate::native}), x, 1, nullptr, nullptr, 1e-5f));
    const auto wide = download_values(
        be, ops::group_norm(make_context(be, {DType::f16, Accumulate::f32}), x, 1, nullptr, nullptr, 1e-5f));
    EXPECT_TRUE(std::isnan(native[0])) << native[0];
    for (float v : wide) EXPECT_TRUE(std::isfinite(v));
    EXPECT_NEAR(wide[0], -7.0f / std::sqrt(21.0f), 2e-3f);  // offsets 0, 2, .., 14: mean 7, var 21; f16 output
  });
}

// GROUP_NORM+SILU (the resnets' norm and nonlinearity in one pass) gives the
// bits of the two ops on every backend and precision: the normalised value is
// rounded to the storage dtype before the SILU, as when it is stored between
// them. A traced call takes the two ops, so the trace still has the norm's
// output; a SILU module in another dtype does too.
TEST(NormFusedSilu, BitEqualToGroupNormThenSilu) {
  for (const Precision& p : precision_matrix()) {
    SCOPED_TRACE(p.describe());
    Rng rng(seed_from("group_norm_silu " + p.describe()));
    // Odd spatial size (a tail after the 16-wide vectors); 4 x 37 = 148 values per group. Channel 5's
    // outputs are below f16's normal range (gamma 1e-5, no beta: subnormal in f16, both before and after
    // the SILU), and sample 1's group 2 holds a NaN, which makes the whole group NaN.
    HostTensor x = random_normal(rng, {2, 16, 37}, p.dtype, 0.5, 3.0);
    HostTensor gamma = random_normal(rng, {16}, p.dtype, 1.0, 0.5);
    HostTensor beta = random_normal(rng, {16}, p.dtype, 0.0, 0.5);
    gamma.set(5, 1e-5f);
    beta.set(5, 0.0f);
    x.set((16 + 9) * 37 + 20, std::numeric_limits<float>::quiet_NaN());
    for_each_backend([&](Backend& be) {
      const Tensor tx = be.upload(x), tg = be.upload(gamma), tb = be.upload(beta);
      const OpContext ctx = make_context(be, p, {}, "vae.decoder.mid_block.resnets.0.norm1");
      const OpContext act = make_context(be, p, {}, "vae.decoder.mid_block.resnets.0.nonlinearity");
      const HostTensor two = be.download(ops::silu(act, ops::group_norm(ctx, tx, 4, &tg, &tb, 1e-6f)));
      const HostTensor fused = be.download(ops::group_norm_silu(ctx, act, tx, 4, &tg, &tb, 1e-6f));
      EXPECT_TRUE(bitwise_equal(fused, two));
      EXPECT_EQ(fused.dtype, p.dtype);
      // The special values are there: f16 subnormals (non-zero, below 2^-14) in channel 5, NaN over sample 1's
      // group 2 (channels 8-11) and nowhere else.
      int subnormal = 0, nan = 0;
      for (std::int64_t i = 0; i < fused.numel(); ++i) {
        const float v = fused.get(i);
        const std::int64_t n = i / (16 * 37), ch = i / 37 % 16;
        if (n == 0 && ch == 5 && v != 0.0f && std::fabs(v) < 0x1p-14f) ++subnormal;
        if (std::isnan(v)) {
          ++nan;
          EXPECT_TRUE(n == 1 && ch >= 8 && ch < 12) << "NaN at " << i;
        }
      }
      if (p.dtype == DType::f16) {
        EXPECT_GT(subnormal, 20);
      }
      EXPECT_EQ(nan, 4 * 37);

      OpNameRecorder rec;
      OpContext traced = ctx, traced_act = act;
      traced.tracer = traced_act.tracer = &rec;
      EXPECT_TRUE(bitwise_equal(be.download(ops::group_norm_silu(traced, traced_act, tx, 4, &tg, &tb, 1e-6f)), two));
      EXPECT_EQ(rec.names, (std::vector<std::string>{"GROUP_NORM", "SILU"}));
    });
  }
}

// GROUP_NORM outputs of 32 MB and more go around the caches on CPU devices (non-temporal stores of the storage
// words where a 16-element vector is aligned for them, common/memory.cl st16_stream). Groups are independent, so each
// such output must be the same bits as the same channels normalised in chunks of whole groups small enough to be
// stored the ordinary way: f32, f16 and bf16 words, with and without the fused SILU and the affine, channels of
// whole vectors and channels of 33100 values (rows alternately misaligned, a tail of 12).
TEST(NormGroupNormStream, LargeOutputsStreamedAreTheSameBitsAsSmallOnes) {
  if (opencl_backends().empty()) GTEST_SKIP() << no_opencl_message();
  struct Case {
    DType dtype;
    Shape x;
    bool silu, affine;
  };
  constexpr int kGroups = 32;
  for (const Case& c :
       {Case{DType::f32, {1, 256, 100, 331}, false, true}, Case{DType::f32, {1, 32, 512, 512}, true, true},
        Case{DType::f16, {1, 128, 512, 512}, true, true}, Case{DType::bf16, {1, 64, 512, 512}, false, false}}) {
    const std::int64_t channels = c.x[1], per_group = channels / kGroups, chunk = 8 * per_group;
    const std::size_t plane = static_cast<std::size_t>(c.x[2] * c.x[3]) * dtype_size(c.dtype);
    Rng rng(seed_from("group_norm stream " + shape_str(c.x)));
    const HostTensor hx = activations(rng, c.x, c.dtype);
    const HostTensor gamma = random_normal(rng, {channels}, c.dtype, 1.0, 0.5);
    const HostTensor beta = random_normal(rng, {channels}, c.dtype, 0.0, 0.5);
    ASSERT_GE(hx.data.size(), std::size_t{32} << 20);
    const auto norm = [&](Backend& be, const HostTensor& x, const HostTensor& g, const HostTensor& b) {
      const OpContext ctx = make_context(be, {c.dtype});
      const Tensor tx = be.upload(x), tg = be.upload(g), tb = be.upload(b);
      const int groups = static_cast<int>(x.shape[1] / per_group);
      const Tensor* gp = c.affine ? &tg : nullptr;
      const Tensor* bp = c.affine ? &tb : nullptr;
      return be.download(c.silu ? ops::group_norm_silu(ctx, ctx, tx, groups, gp, bp, 1e-6f)
                                : ops::group_norm(ctx, tx, groups, gp, bp, 1e-6f));
    };
    // Channels [c0, c0 + count) of t (batch 1): a contiguous run of planes.
    const auto channels_of = [](const HostTensor& t, std::int64_t c0, std::int64_t count, std::size_t bytes) {
      Shape shape = t.shape;
      shape[shape.size() == 1 ? 0 : 1] = count;  // gamma / beta: [C]; x: [1, C, H, W]
      HostTensor out(shape, t.dtype);
      std::copy_n(t.data.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(c0) * bytes), out.data.size(),
                  out.data.begin());
      return out;
    };
    const std::size_t elem = dtype_size(c.dtype);
    for (Backend* be : opencl_backends()) {
      SCOPED_TRACE("device \"" + be->device().name + "\", " + std::string(dtype_name(c.dtype)) + " " + shape_str(c.x));
      const HostTensor whole = norm(*be, hx, gamma, beta);
      for (std::int64_t c0 = 0; c0 < channels; c0 += chunk) {
        const HostTensor want = norm(*be, channels_of(hx, c0, chunk, plane), channels_of(gamma, c0, chunk, elem),
                                     channels_of(beta, c0, chunk, elem));
        EXPECT_TRUE(bitwise_equal(channels_of(whole, c0, chunk, plane), want))
            << "channels " << c0 << ".." << c0 + chunk;
      }
    }
  }
}

}  // namespace
}  // namespace nanscope::test
