// The step loop's device side: LATENT_STEP (the samplers' arithmetic) and the
// inspector's reductions on every OpenCL device, against the reference backend.
//
// Expectations:
// - LATENT_STEP runs the same f32 statements on both backends (kernels/latent.cl
//   is compiled as C++ for the reference), so results are bit-identical where
//   the device divides correctly rounded (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT,
//   which PoCL has); elsewhere within 2 ulp of OpenCL's default division.
// - map_reduce: counts, min/max and the mask exactly; means and standard
//   deviations to 2e-5 relative (f32 sums over at most a line or a channel,
//   against double); the detectors' verdicts the same.
// - latent_preview: bytes within one step (f32 against double sums, rounding
//   near .5), overshoot/clipped counts exact on data that stays off the thresholds.

#include <gtest/gtest.h>

#include <CL/cl.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "inspect/inspect.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/scheduler.hpp"
#include "pipeline/scheduler_config.hpp"
#include "support/backends.hpp"
#include "support/random.hpp"

namespace nanscope {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> normal(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  test::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal() * scale);
  return v;
}

Tensor upload(Backend& be, const Shape& s, const std::vector<float>& v, DType t = DType::f32) {
  return be.upload(HostTensor::from_f32(s, v, t));
}

std::vector<float> download(Backend& be, const Tensor& t) { return be.download(t).to_f32(); }

// Units in the last place a device's results may differ by: 0 where it divides
// correctly rounded (the backend then builds latent.cl with
// -cl-fp32-correctly-rounded-divide-sqrt), else OpenCL's 2.5 ulp division.
int allowed_ulps(const Backend& be) {
  cl_device_fp_config fp = 0;
  if (be.device().cl_device &&
      clGetDeviceInfo(static_cast<cl_device_id>(be.device().cl_device), CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp,
                      nullptr) == CL_SUCCESS &&
      (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)) {
    return 0;
  }
  return 3;
}

std::int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    std::int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<std::int64_t>(INT32_MIN) - i : static_cast<std::int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

// Equal within `ulps` (0: bit for bit), NaN equal to NaN.
void expect_same(const std::vector<float>& want, const std::vector<float>& got, const std::string& what, int ulps) {
  ASSERT_EQ(want.size(), got.size()) << what;
  int shown = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool both_nan = std::isnan(want[i]) && std::isnan(got[i]);
    const bool same =
        both_nan || want[i] == got[i] ||
        (ulps > 0 && !std::isnan(want[i]) && !std::isnan(got[i]) && ulp_distance(want[i], got[i]) <= ulps);
    if (!same && shown++ < 5) ADD_FAILURE() << what << " [" << i << "]: reference " << want[i] << ", device " << got[i];
  }
}

#define FOR_EACH_DEVICE(be)                                                       \
  if (test::opencl_backends().empty()) GTEST_SKIP() << test::no_opencl_message(); \
  for (Backend * be : test::opencl_backends())

// Every op and prediction type, with NaN, Inf and extreme values among the inputs.
TEST(LatentStep, EveryOpIsBitIdenticalToTheReference) {
  const std::int64_t n = 1000;  // not a multiple of the work-group size
  std::vector<float> x = normal(n, 1, 10.0), m = normal(n, 2), h1 = normal(n, 3), h2 = normal(n, 4);
  x[7] = kNaN;
  m[11] = kInf;
  h1[13] = -kInf;
  x[17] = 3e38f;
  m[19] = 1e-40f;  // subnormal
  const std::array<float, 8> c{0.7310586f, 0.682689f, -0.35f, 1.5f, 1.0f, 0.25f, 0.6f, 0.4f};
  Backend& ref = test::reference_backend();
  FOR_EACH_DEVICE(dev) {
    for (int op = 0; op <= static_cast<int>(LatentOp::dpm3); ++op) {
      for (int pred = 0; pred < 3; ++pred) {
        for (int flag = 0; flag < 2; ++flag) {
          auto run = [&](Backend& be) {
            const Shape s{n};
            const Tensor tx = upload(be, s, x), tm = upload(be, s, m), t1 = upload(be, s, h1), t2 = upload(be, s, h2);
            Tensor out = be.empty(s, DType::f32), x0 = be.empty(s, DType::f32);
            be.latent_step(
                LatentStepArgs{static_cast<LatentOp>(op), n, tx, 0, &tm, 0, &t1, &t2, out, 0, &x0, c, pred, flag});
            return std::make_pair(download(be, out), download(be, x0));
          };
          const auto want = run(ref);
          const auto got = run(*dev);
          const std::string what = dev->device().name + " op " + std::to_string(op) + " pred " + std::to_string(pred) +
                                   " flag " + std::to_string(flag);
          expect_same(want.first, got.first, what + " out", allowed_ulps(*dev));
          expect_same(want.second, got.second, what + " x0", allowed_ulps(*dev));
        }
      }
    }
  }
}

TEST(LatentStep, OffsetsAddressRowsOfABatchAndBadArgumentsAreOpErrors) {
  Backend& ref = test::reference_backend();
  const std::vector<float> batch = normal(8, 5);  // two rows of 4: [uncond, cond]
  FOR_EACH_DEVICE(dev) {
    for (Backend* be : {&ref, dev}) {
      const Tensor b = upload(*be, {2, 4}, batch);
      Tensor out = be->empty({4}, DType::f32);
      be->latent_step(LatentStepArgs{LatentOp::cfg, 4, b, 0, &b, 4, nullptr, nullptr, out, 0, nullptr, {7.5f}, 0, 0});
      const auto got = download(*be, out);
      for (int i = 0; i < 4; ++i) {
        const float diff = batch[4 + i] - batch[i];
        const float scaled = 7.5f * diff;
        EXPECT_EQ(got[i], batch[i] + scaled) << be->device().name;
      }
      Tensor scaled_rows = be->empty({2, 4}, DType::f32);
      const Tensor row = upload(*be, {4}, {1, 2, 3, 4});
      be->latent_step(LatentStepArgs{
          LatentOp::scale, 4, row, 0, nullptr, 0, nullptr, nullptr, scaled_rows, 4, nullptr, {2.0f}, 0, 0});
      EXPECT_EQ(download(*be, scaled_rows)[7], 2.0f);
      // An f16 latent, a short tensor and a missing input are refused with the op's name.
      const Tensor half = upload(*be, {4}, {1, 2, 3, 4}, DType::f16);
      EXPECT_THROW(be->latent_step(LatentStepArgs{
                       LatentOp::mul, 4, half, 0, nullptr, 0, nullptr, nullptr, out, 0, nullptr, {1.0f}, 0, 0}),
                   OpError);
      EXPECT_THROW(be->latent_step(LatentStepArgs{
                       LatentOp::mul, 5, row, 0, nullptr, 0, nullptr, nullptr, out, 0, nullptr, {1.0f}, 0, 0}),
                   OpError);
      try {
        be->latent_step(
            LatentStepArgs{LatentOp::dpm2, 4, row, 0, &row, 0, nullptr, nullptr, out, 0, nullptr, {}, 0, 0});
        ADD_FAILURE() << "dpm2 without its older prediction ran";
      } catch (const OpError& e) {
        EXPECT_NE(std::string(e.what()).find("LATENT_STEP"), std::string::npos) << e.what();
      }
    }
  }
}

// Whole samplers: the same model outputs on both backends give the same latents, step after step.
TEST(LatentStep, SamplersOnTheDeviceMatchTheHostBitForBit) {
  struct Case {
    SamplerId kind;
    const char* prediction;
    int order;
  };
  const Case cases[] = {{SamplerId::euler, "epsilon", 2},        {SamplerId::euler, "v_prediction", 2},
                        {SamplerId::euler_a, "epsilon", 2},      {SamplerId::ddim, "epsilon", 2},
                        {SamplerId::ddim, "sample", 2},          {SamplerId::dpmpp_2m, "epsilon", 2},
                        {SamplerId::dpmpp_2m, "v_prediction", 3}};
  const std::int64_t n = 4 * 8 * 8;
  FOR_EACH_DEVICE(dev) {
    for (const Case& k : cases) {
      nlohmann::json j = {{"prediction_type", k.prediction}, {"solver_order", k.order}, {"clip_sample", false}};
      const auto config = pipeline::SchedulerConfig::from_json(j, k.kind, "test scheduler_config.json");
      auto host = pipeline::make_sampler(config);
      auto device = pipeline::make_sampler(config);
      host->set_timesteps(6);
      device->set_timesteps(6);
      std::vector<float> latent = normal(static_cast<std::size_t>(n), 6);
      Tensor dev_latent = upload(*dev, {n}, latent);
      pipeline::TorchCpuNoise noise_h(9), noise_d(9);
      for (int i = 0; i < host->num_steps(); ++i) {
        const std::vector<float> eps = normal(static_cast<std::size_t>(n), 100 + i);
        std::vector<float> denoised(static_cast<std::size_t>(n));
        host->step(eps, latent, i, &noise_h, denoised);
        const Tensor dev_eps = upload(*dev, {n}, eps);
        Tensor dev_x0 = dev->empty({n}, DType::f32);
        device->step(*dev, dev_eps, dev_latent, i, &noise_d, &dev_x0);
        const std::string what = std::string(sampler_name(k.kind)) + " " + k.prediction + " step " + std::to_string(i);
        // Over several steps a division's ulp can grow through the update: 8 ulp where division is not exact.
        const int ulps = allowed_ulps(*dev) ? 8 : 0;
        expect_same(latent, download(*dev, dev_latent), what + " latent", ulps);
        expect_same(denoised, download(*dev, dev_x0), what + " denoised", ulps);
      }
    }
  }
}

// A [C, H, W] map with everything the detectors look at: NaN and Inf in one
// corner, a near-limit value, a bright row (a band) and values beyond 1 and 3.
std::vector<float> rich_map(std::int64_t c, std::int64_t h, std::int64_t w, std::uint64_t seed) {
  std::vector<float> v = normal(static_cast<std::size_t>(c * h * w), seed, 0.8);
  auto at = [&](std::int64_t ch, std::int64_t y, std::int64_t x) -> float& {
    return v[static_cast<std::size_t>((ch * h + y) * w + x)];
  };
  at(0, 1, 1) = kNaN;
  at(1, 1, 2) = kInf;
  at(2, 2, 1) = -kInf;
  at(3, h - 2, w - 3) = 60000.0f;  // near f16's limit
  for (std::int64_t x = 0; x < w; ++x) at(1, h / 2, x) += 6.0f;
  return v;
}

void expect_close(double want, double got, double rel, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
    return;
  }
  EXPECT_NEAR(got, want, rel * std::max(1.0, std::fabs(want))) << what;
}

// Counts, min/max and the mask exactly; moments to 2e-5 relative.
void expect_same_reduction(const MapReduction& want, const MapReduction& got, const std::string& what) {
  ASSERT_EQ(got.per_channel.size(), want.per_channel.size()) << what;
  for (std::size_t ch = 0; ch < want.per_channel.size(); ++ch) {
    const auto& a = want.per_channel[ch];
    const auto& b = got.per_channel[ch];
    const std::string wc = what + " channel " + std::to_string(ch);
    EXPECT_EQ(b.count, a.count) << wc;
    EXPECT_EQ(b.finite, a.finite) << wc;
    EXPECT_EQ(b.nan, a.nan) << wc;
    EXPECT_EQ(b.pos_inf, a.pos_inf) << wc;
    EXPECT_EQ(b.neg_inf, a.neg_inf) << wc;
    EXPECT_EQ(b.near_limit, a.near_limit) << wc;
    EXPECT_EQ(b.over, a.over) << wc;
    EXPECT_EQ(b.clipped, a.clipped) << wc;
    EXPECT_EQ(b.min, a.min) << wc;
    EXPECT_EQ(b.max, a.max) << wc;
    expect_close(a.mean, b.mean, 2e-5, wc + " mean");
    expect_close(a.m2, b.m2, 2e-5, wc + " m2");
  }
  ASSERT_EQ(got.row_mean.size(), want.row_mean.size()) << what;
  ASSERT_EQ(got.col_mean.size(), want.col_mean.size()) << what;
  for (std::size_t i = 0; i < want.row_mean.size(); ++i) {
    expect_close(want.row_mean[i], got.row_mean[i], 2e-5, what + " row mean " + std::to_string(i));
    expect_close(want.row_std[i], got.row_std[i], 2e-5, what + " row std " + std::to_string(i));
  }
  for (std::size_t i = 0; i < want.col_mean.size(); ++i) {
    expect_close(want.col_mean[i], got.col_mean[i], 2e-5, what + " col mean " + std::to_string(i));
    expect_close(want.col_std[i], got.col_std[i], 2e-5, what + " col std " + std::to_string(i));
  }
  EXPECT_EQ(got.mask_rows, want.mask_rows) << what;
  EXPECT_EQ(got.mask_cols, want.mask_cols) << what;
  EXPECT_EQ(got.mask_bad, want.mask_bad) << what;
}

void check_map_reduce(const std::vector<Backend*>& devices) {
  const std::int64_t c = 4, h = 24, w = 40;  // lines longer than a work-group on GPUs, odd mask cells
  const std::vector<float> values = rich_map(c, h, w, 11);
  Backend& ref = test::reference_backend();
  if (devices.empty()) GTEST_SKIP() << test::no_opencl_message();
  for (Backend* dev : devices) {
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      const double limit = dtype_max(DType::f16);
      const Shape s{2, c, h, w};  // image 1 of a batch of 2
      std::vector<float> batch(values.size(), 0.5f);
      batch.insert(batch.end(), values.begin(), values.end());
      const Tensor on_ref = upload(ref, s, batch, t);
      const MapReduction want = ref.map_reduce(MapReduceArgs{on_ref, 1, 0.9 * limit, 3.0, 8});
      const Tensor on_dev = upload(*dev, s, batch, t);
      const MapReduction got = dev->map_reduce(MapReduceArgs{on_dev, 1, 0.9 * limit, 3.0, 8});
      const std::string what = dev->device().name + " " + std::string(dtype_name(t));
      expect_same_reduction(want, got, what);

      // The same conclusions: non-finite, the band row found, the mask's corner.
      inspect::MapOptions o;
      o.limit = limit;
      o.image_scale = true;
      const inspect::MapStats ms_ref = inspect::analyze_reduction(want, o), ms_dev = inspect::analyze_reduction(got, o);
      EXPECT_EQ(ms_dev.verdict, ms_ref.verdict) << what;
      EXPECT_EQ(ms_dev.note, ms_ref.note) << what;
      EXPECT_EQ(ms_dev.bands.band_rows, ms_ref.bands.band_rows) << what;
      EXPECT_EQ(ms_dev.bands.band_rows, std::vector<int>{static_cast<int>(h / 2)}) << what;
      EXPECT_TRUE(ms_dev.mask.at(0, 0) > 0) << what;
      EXPECT_NEAR(ms_dev.saturation, ms_ref.saturation, 1e-12) << what;
    }
  }
}

TEST(MapReduce, DeviceReductionMatchesTheReferenceInEveryStorageDtype) { check_map_reduce(test::opencl_backends()); }

// Every OpenCL device in its own kernel style and in the other one (on CPUs the
// GPU family: a work-group per line, local-memory reductions).
struct BothStyles {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> all, others;
  BothStyles() {
    for (Backend* be : test::opencl_backends()) {
      BackendOptions o;
      o.kernel_style = be->device().kind == DeviceKind::gpu ? KernelStyleChoice::cpu : KernelStyleChoice::gpu;
      owned.push_back(make_backend(be->device(), o));
      others.push_back(owned.back().get());
      all.push_back(be);
      all.push_back(owned.back().get());
    }
  }
};

std::string style_name(Backend& be) {
  return be.device().name + (dynamic_cast<opencl::OpenClBackend&>(be).kernel_style() == opencl::KernelStyle::cpu
                                 ? " (CPU kernels)"
                                 : " (GPU kernels)");
}

TEST(MapReduce, TheOtherKernelStyleMatchesToo) { check_map_reduce(BothStyles().others); }

// One batch of maps in several shapes, dtypes and buffers, with their own
// thresholds, interleaved: the CPU kernels reduce up to three maps of one shape
// and dtype per launch (here a launch of three, one of one and one each for the
// other shape and the f16 map), each map with its own buffer, offset and limits.
TEST(MapReduce, ABatchOfMapsInSeveralShapesAndDtypesMatchesMapByMap) {
  const BothStyles devices;
  if (devices.all.empty()) GTEST_SKIP() << test::no_opencl_message();
  Backend& ref = test::reference_backend();
  const std::int64_t c = 4, h = 24, w = 40;
  std::vector<float> pair = rich_map(c, h, w, 31);
  const std::vector<float> second = rich_map(c, h, w, 32);
  pair.insert(pair.end(), second.begin(), second.end());
  const std::vector<float> other = rich_map(c, h, w, 33), small = normal(3 * 10 * 7, 34, 2.0);
  for (Backend* dev : devices.all) {
    std::vector<Tensor> keep;
    auto maps = [&](Backend& be) {
      keep = {upload(be, {2, c, h, w}, pair), upload(be, {1, c, h, w}, other), upload(be, {1, 3, 10, 7}, small),
              upload(be, {1, c, h, w}, other, DType::f16)};
      return std::vector<MapReduceArgs>{{keep[0], 1, 60000.0, 3.0, 8}, {keep[2], 0, 60000.0, 3.0, 4},
                                        {keep[0], 0, 60000.0, 3.0, 8}, {keep[3], 0, 60000.0, 3.0, 8},
                                        {keep[1], 0, 2.0, 1.5, 8},     {keep[0], 1, 1.0, 0.5, 16}};
    };
    const std::vector<MapReduction> want = ref.map_reduce_batch(maps(ref));
    const std::vector<MapReduction> got = dev->map_reduce_batch(maps(*dev));
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t m = 0; m < want.size(); ++m)
      expect_same_reduction(want[m], got[m], style_name(*dev) + " map " + std::to_string(m));
    // The thresholds differ per map: map 5 counts more values near the limit and beyond the overshoot than map 0.
    EXPECT_GT(got[5].per_channel[0].near_limit, got[0].per_channel[0].near_limit);
    EXPECT_GT(got[5].per_channel[0].over, got[0].per_channel[0].over);
  }
}

// The device preview: bytes within one step of the reference's double sums,
// its counts exactly; three channels of factors on a latent of three; more than
// four channels refused with the op's name.
TEST(LatentPreview, TheDevicePreviewMatchesTheReferenceAndCountsItsValues) {
  const BothStyles devices;
  if (devices.all.empty()) GTEST_SKIP() << test::no_opencl_message();
  Backend& ref = test::reference_backend();
  const auto sd1 = inspect::latent_rgb_factors("sd1");
  ASSERT_TRUE(sd1);
  std::vector<float> four;
  for (const auto& row : sd1->factors) four.insert(four.end(), row.begin(), row.end());
  const std::vector<float> three(four.begin(), four.begin() + 9);
  for (Backend* dev : devices.all) {
    for (const std::int64_t c : {4, 3}) {
      const std::int64_t h = 9, w = 13;
      std::vector<float> lat = normal(static_cast<std::size_t>(2 * c * h * w), 41, 2.5);
      lat[static_cast<std::size_t>(c * h * w + 5)] = kNaN;          // image 1, channel 0, pixel 5: all three colours
      lat[static_cast<std::size_t>(c * h * w + h * w + 7)] = kInf;  // channel 1, pixel 7
      const std::string what = style_name(*dev) + " " + std::to_string(c) + " channels";
      auto run = [&](Backend& be) {
        const Tensor t = upload(be, {2, c, h, w}, lat);
        return be.latent_preview(LatentPreviewArgs{t, 1, c == 4 ? four : three, {0.1f, -0.2f, 0.05f}, 0.8, 1.5});
      };
      const PreviewReduction want = run(ref), got = run(*dev);
      EXPECT_EQ(got.width, w) << what;
      EXPECT_EQ(got.height, h) << what;
      ASSERT_EQ(got.rgb.size(), want.rgb.size()) << what;
      for (std::size_t i = 0; i < want.rgb.size(); ++i)
        EXPECT_LE(std::abs(int(got.rgb[i]) - int(want.rgb[i])), 1) << what << " byte " << i;
      EXPECT_EQ(got.finite, want.finite) << what;
      EXPECT_EQ(got.finite, 3 * h * w - 6) << what;
      EXPECT_EQ(got.over, want.over) << what;
      EXPECT_EQ(got.clipped, want.clipped) << what;
      EXPECT_GT(got.over, 0) << what;
      EXPECT_GT(got.clipped, got.over) << what;
    }
    const Tensor wide = upload(*dev, {1, 5, 4, 4}, normal(80, 42));
    try {
      dev->latent_preview(LatentPreviewArgs{wide, 0, std::vector<float>(15, 0.1f), {}, 1.0, 3.0});
      ADD_FAILURE() << style_name(*dev) << ": a preview from 5 channels ran";
    } catch (const OpError& e) {
      EXPECT_NE(std::string(e.what()).find("LATENT_PREVIEW"), std::string::npos) << e.what();
    }
  }
}

TEST(MapReduce, AStepOnTheDeviceReadsBackAFewKilobytesAndConcludesAsTheHost) {
  // SD at 512 x 512: a 4 x 64 x 64 latent, the UNet output of both CFG branches in f16.
  const std::int64_t c = 4, h = 64, w = 64, n = c * h * w;
  const std::vector<float> latent = normal(static_cast<std::size_t>(n), 21);
  std::vector<float> noise = rich_map(c, h, w, 22);  // cond branch: NaN, Inf, near-limit
  const std::vector<float> uncond = normal(static_cast<std::size_t>(n), 23);
  std::vector<float> pred(uncond);
  pred.insert(pred.end(), noise.begin(), noise.end());
  // The host form sees the values the f16 tensor holds.
  const std::vector<float> pred16 = HostTensor::from_f32({2, c, h, w}, pred, DType::f16).to_f32();
  const double limit = dtype_max(DType::f16);
  const auto factors = inspect::latent_rgb_factors("sd1");
  ASSERT_TRUE(factors);
  const std::span<const float> p16(pred16);
  const inspect::StepStats host =
      inspect::analyze_step(latent, p16.subspan(static_cast<std::size_t>(n)), p16.first(static_cast<std::size_t>(n)), c,
                            h, w, limit, &*factors, 1.5);
  FOR_EACH_DEVICE(dev) {
    const Tensor lat = upload(*dev, {1, c, h, w}, latent);
    const Tensor pr = upload(*dev, {2, c, h, w}, pred, DType::f16);
    std::size_t bytes = 0;
    const inspect::StepStats got = inspect::analyze_step(*dev, lat, pr, 1, 0, limit, &*factors, 1.5, &bytes);
    const std::string what = dev->device().name;
    // Three maps of 64 KB each (and a 12 KB preview) stay on the device; what comes back:
    // 3 x 8.4 KB of statistics plus the preview's 12 KB.
    EXPECT_LT(bytes, 40u * 1024u) << what;
    EXPECT_LT(bytes - static_cast<std::size_t>(h * w * 3), 3u * 9u * 1024u) << what;
    EXPECT_EQ(got.verdict, host.verdict) << what;
    EXPECT_EQ(got.verdict, inspect::Verdict::non_finite) << what;
    EXPECT_EQ(got.noise_cond.note, host.noise_cond.note) << what;
    ASSERT_TRUE(got.noise_uncond && host.noise_uncond) << what;
    EXPECT_EQ(got.noise_uncond->verdict, host.noise_uncond->verdict) << what;
    EXPECT_EQ(got.noise_cond.all.nan, 1) << what;
    EXPECT_EQ(got.noise_cond.all.pos_inf, 1) << what;
    EXPECT_EQ(got.noise_cond.all.near_limit, host.noise_cond.all.near_limit) << what;
    EXPECT_EQ(got.noise_cond.bands.band_rows, host.noise_cond.bands.band_rows) << what;
    EXPECT_EQ(got.latent.mask.share, host.latent.mask.share) << what;
    for (std::size_t ch = 0; ch < got.latent.channels.size(); ++ch) {
      expect_close(host.latent.channels[ch].std, got.latent.channels[ch].std, 2e-5, what + " latent std");
      expect_close(host.latent.channels[ch].mean, got.latent.channels[ch].mean, 2e-5, what + " latent mean");
    }
    // The preview: the same picture to one step of 255.
    ASSERT_EQ(got.preview.rgb.size(), host.preview.rgb.size()) << what;
    int off = 0;
    for (std::size_t i = 0; i < host.preview.rgb.size(); ++i) {
      const int d = std::abs(static_cast<int>(got.preview.rgb[i]) - static_cast<int>(host.preview.rgb[i]));
      EXPECT_LE(d, 1) << what << " preview byte " << i;
      off += d;
    }
    EXPECT_LT(off, static_cast<int>(host.preview.rgb.size() / 100)) << what;
    EXPECT_NEAR(got.latent.saturation, host.latent.saturation, 1e-3) << what;
    EXPECT_NEAR(got.latent.clipped, host.latent.clipped, 1e-3) << what;
  }
}

}  // namespace
}  // namespace nanscope
