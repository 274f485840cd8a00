// CONCAT, SLICE, PERMUTE, UPSAMPLE_NEAREST2X and CAST: data movement and one
// rounding, so every backend must match the reference and PyTorch bit for bit.

#include <bit>
#include <cmath>
#include <cstdint>

#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

OpCase shape_case(const std::string& op, const std::string& desc, std::vector<Shape> inputs, nlohmann::json oracle,
                  std::function<Tensor(const OpContext&, const std::vector<Tensor>&)> run) {
  OpCase c;
  c.op = op;
  c.family = "exact";
  c.desc = desc;
  oracle["op"] = op;
  c.oracle = std::move(oracle);
  c.build = [inputs](Rng& rng, const Precision& p) {
    std::vector<HostTensor> in;
    for (const auto& s : inputs) in.push_back(random_normal(rng, s, p.dtype));
    return in;
  };
  c.run = std::move(run);
  return c;
}

OpCase concat_case(std::vector<Shape> parts, int dim) {
  std::string desc;
  for (const auto& s : parts) desc += shape_tag(s) + "_";
  return shape_case("concat", desc + "d" + std::to_string(dim + 4), parts, {{"dim", dim}},
                    [dim](const OpContext& ctx, const std::vector<Tensor>& in) { return ops::concat(ctx, in, dim); });
}

OpCase slice_case(const Shape& x, int dim, std::int64_t begin, std::int64_t end) {
  return shape_case(
      "slice", shape_tag(x) + "_d" + std::to_string(dim + 4) + "_" + std::to_string(begin) + "_" + std::to_string(end),
      {x}, {{"dim", dim}, {"begin", begin}, {"end", end}},
      [=](const OpContext& ctx, const std::vector<Tensor>& in) { return ops::slice(ctx, in[0], dim, begin, end); });
}

OpCase permute_case(const Shape& x, std::vector<int> perm) {
  std::string p;
  for (int d : perm) p += std::to_string(d);
  return shape_case(
      "permute", shape_tag(x) + "_p" + p, {x}, {{"perm", perm}},
      [perm](const OpContext& ctx, const std::vector<Tensor>& in) { return ops::permute(ctx, in[0], perm); });
}

OpCase upsample_case(const Shape& x) {
  return shape_case(
      "upsample_nearest2x", shape_tag(x), {x}, nlohmann::json::object(),
      [](const OpContext& ctx, const std::vector<Tensor>& in) { return ops::upsample_nearest2x(ctx, in[0]); });
}

// Cast from the case's storage dtype to `to`. Values up to ~1e5 overflow f16.
OpCase cast_case(const Shape& x, DType to) {
  OpCase c = shape_case(
      "cast", shape_tag(x) + "_to_" + std::string(dtype_name(to)), {x}, {{"out_dtype", std::string(dtype_name(to))}},
      [to](const OpContext& ctx, const std::vector<Tensor>& in) { return ops::cast(ctx, in[0], to); });
  // Values past 65504 are Inf once stored as (or cast to) f16: the non-finite
  // pattern must then match exactly, and the finite rest bit for bit.
  c.expect_nonfinite = true;
  c.build = [x](Rng& rng, const Precision& p) {
    std::vector<float> v = normal_values(rng, shape_numel(x), 0.0, 1.0);
    // Spread over magnitudes 2^-30..2^17: subnormals, ties and overflow of the narrow types.
    for (auto& f : v) f = std::ldexp(f, static_cast<int>(rng.next_u64() % 48) - 30);
    return std::vector<HostTensor>{HostTensor::from_f32(x, v, p.dtype)};
  };
  return c;
}

std::vector<OpCasePtr> cases() {
  std::vector<OpCasePtr> all;
  const auto add = [&](const OpCase& c) {
    for (auto& p : expand(c, precision_matrix())) all.push_back(std::move(p));
  };
  add(concat_case({{2, 13, 5, 7}, {2, 3, 5, 7}}, 1));
  add(concat_case({{5, 7}, {5, 1}, {5, 13}}, -1));
  add(concat_case({{2, 1280, 8, 8}, {2, 640, 8, 8}}, 1));  // SD up block skip connection
  add(slice_case({2, 13, 5, 7}, 1, 3, 10));
  add(slice_case({2, 77, 26}, -1, 13, 26));
  add(slice_case({1, 1024, 2560}, 2, 0, 1280));     // SD GEGLU halves at 32x32
  add(permute_case({2, 77, 8, 40}, {0, 2, 1, 3}));  // heads to the front
  add(permute_case({13, 5, 7}, {2, 0, 1}));
  add(permute_case({2, 5, 7, 19}, {3, 1, 0, 2}));     // innermost dimension moves: the gather path
  add(permute_case({2, 320, 32, 32}, {0, 2, 3, 1}));  // NCHW -> NHWC before a transformer
  add(upsample_case({2, 13, 5, 7}));
  add(upsample_case({1, 1280, 8, 8}));
  for (const DType to : {DType::f32, DType::f16, DType::bf16}) add(cast_case({3, 1000}, to));
  return all;
}

NANSCOPE_OP_TESTS(ShapeOps, cases());

TEST(ShapeOpsBadInput, ShapesRangesAndEmptyTensors) {
  for (Backend* be : all_backends()) {
    SCOPED_TRACE("device \"" + be->device().name + "\"");
    const OpContext ctx = make_context(*be, {DType::f32});
    const std::vector<Tensor> parts{be->upload(HostTensor({2, 13, 5}, DType::f32)),
                                    be->upload(HostTensor({2, 13, 6}, DType::f32))};
    expect_op_error([&] { ops::concat(ctx, parts, 1); }, {"CONCAT", "[2,13,5]", "[2,13,6]"});
    expect_op_error([&] { ops::concat(ctx, parts, 3); }, {"CONCAT", "dimension 3"});
    expect_op_error([&] { ops::slice(ctx, parts[0], 1, 5, 14); }, {"SLICE", "[2,13,5]"});
    expect_op_error([&] { ops::slice(ctx, parts[0], 1, 5, 5); }, {"SLICE", "[2,13,5]"});
    const std::vector<int> bad_perm{0, 0, 1};
    expect_op_error([&] { ops::permute(ctx, parts[0], bad_perm); }, {"PERMUTE", "[2,13,5]", "perm"});
    const Tensor x3 = be->upload(HostTensor({13, 5, 7}, DType::f32));
    expect_op_error([&] { ops::upsample_nearest2x(ctx, x3); }, {"UPSAMPLE_NEAREST2X", "[13,5,7]"});
    const Tensor empty = be->upload(HostTensor({0, 5}, DType::f32));
    expect_op_error([&] { ops::cast(ctx, empty, DType::f16); }, {"CAST", "[0,5]"});
    const Tensor h = be->upload(HostTensor({2, 13, 5}, DType::f16));
    expect_op_error([&] { ops::slice(ctx, h, 0, 0, 1); }, {"SLICE", "f16"});
  }
}

// Hand-worked values on every backend.
TEST(ShapeOpsKnownValues, ConcatSlicePermuteUpsampleCast) {
  std::vector<float> xv(24);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
  for_each_backend([&](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const std::vector<Tensor> parts{upload_values(be, {2, 2}, {1, 2, 3, 4}), upload_values(be, {2, 1}, {5, 6})};
    const Tensor cat = ops::concat(c, parts, -1);
    EXPECT_EQ(cat.shape(), (Shape{2, 3}));
    EXPECT_EQ(download_values(be, cat), (std::vector<float>{1, 2, 5, 3, 4, 6}));
    const Tensor sl = ops::slice(c, cat, 1, 1, 3);
    EXPECT_EQ(sl.shape(), (Shape{2, 2}));
    EXPECT_EQ(download_values(be, sl), (std::vector<float>{2, 5, 4, 6}));

    const std::vector<int> perm{0, 2, 1};
    const Tensor p = ops::permute(c, upload_values(be, {2, 3, 4}, xv), perm);
    EXPECT_EQ(p.shape(), (Shape{2, 4, 3}));
    const auto pv = download_values(be, p);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 3; ++k) EXPECT_EQ(pv[(i * 4 + j) * 3 + k], xv[(i * 3 + k) * 4 + j]);

    EXPECT_EQ(download_values(be, ops::upsample_nearest2x(c, upload_values(be, {1, 1, 2, 2}, {1, 2, 3, 4}))),
              (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));

    // Round to nearest even, overflow to Inf; the f16 -> f32 widening is exact.
    const Tensor x = upload_values(be, {5}, {65504, 65520, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -70000});
    const Tensor h = ops::cast(c, x, DType::f16);
    EXPECT_EQ(h.dtype(), DType::f16);
    EXPECT_EQ(download_values(be, h), (std::vector<float>{65504, INFINITY, 1.0f, 1.0f + 0x1p-9f, -INFINITY}));
    EXPECT_EQ(download_values(be, ops::cast(make_context(be, {DType::f16}), h, DType::f32)), download_values(be, h));
  });
}

// A NaN stays a NaN of its sign through every narrowing, wherever its payload lies: a signaling NaN whose payload
// sits only in the 13 mantissa bits f16 drops (and the 16 bf16 drops) would become Inf if the payload were merely
// truncated. 37 values: the 16-wide vector stores and the scalar tail both see each kind.
TEST(ShapeOpsKnownValues, CastKeepsEveryNaNWhereverItsPayloadLies) {
  const std::vector<std::uint32_t> kinds{0x7f800001u, 0xff800001u, 0x7f801fffu, 0x7f80ffffu, 0x7fc00000u,
                                         0xffc00001u, 0x7fbfffffu, 0x7f802000u, 0xff810000u};
  std::vector<float> xv(37);
  for (std::size_t i = 0; i < xv.size(); ++i)
    xv[i] = i % 4 == 3 ? static_cast<float>(i) : std::bit_cast<float>(kinds[i % kinds.size()]);
  for_each_backend([&](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const Tensor x = upload_values(be, {static_cast<std::int64_t>(xv.size())}, xv);
    for (DType to : {DType::f16, DType::bf16}) {
      const std::vector<float> got = download_values(be, ops::cast(c, x, to));
      for (std::size_t i = 0; i < xv.size(); ++i) {
        if (!std::isnan(xv[i])) {
          EXPECT_EQ(got[i], xv[i]) << dtype_name(to) << " element " << i;
          continue;
        }
        EXPECT_TRUE(std::isnan(got[i])) << dtype_name(to) << " element " << i << " (f32 bits 0x" << std::hex
                                        << std::bit_cast<std::uint32_t>(xv[i]) << ") became " << got[i];
        EXPECT_EQ(std::signbit(got[i]), std::signbit(xv[i])) << dtype_name(to) << " element " << i;
      }
    }
  });
}

// Upsampled outputs of 32 MB and more go around the caches on CPU devices (non-temporal stores where the address
// suits them, kernels/shape_ops.cl): the same bits as the reference's copy, for 4- and 2-byte words, with widths
// whose rows keep every vector aligned (512) and widths whose rows do not (516: ordinary stores for those).
TEST(ShapeOpsUpsample, LargeOutputsAreTheSameBitsWhenStreamed) {
  if (opencl_backends().empty()) GTEST_SKIP() << no_opencl_message();
  Backend& ref = reference_backend();
  for (const auto& [dt, x] :
       {std::pair{DType::f32, Shape{1, 8, 512, 512}}, std::pair{DType::f16, Shape{1, 16, 512, 512}},
        std::pair{DType::f32, Shape{1, 8, 512, 516}}}) {
    Rng rng(seed_from("upsample stream " + shape_str(x)));
    const HostTensor hx = random_normal(rng, x, dt);
    const HostTensor want = ref.download(ops::upsample_nearest2x(make_context(ref, {dt}), ref.upload(hx)));
    ASSERT_GE(want.data.size(), std::size_t{32} << 20);
    for (Backend* be : opencl_backends()) {
      SCOPED_TRACE("device \"" + be->device().name + "\", " + std::string(dtype_name(dt)) + " " + shape_str(x));
      EXPECT_TRUE(bitwise_equal(be->download(ops::upsample_nearest2x(make_context(*be, {dt}), be->upload(hx))), want));
    }
  }
}
}  // namespace
}  // namespace nanscope::test
