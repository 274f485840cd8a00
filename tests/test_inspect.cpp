// The inspector's detectors on synthetic tensors: for each detector, cases
// that must trigger it and cases that must not (flat pictures, noise, stripes,
// shapes, VAE-like edge rows). Seeded; the seed is in the test name.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "inspect/inspect.hpp"

namespace nanscope::inspect {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A [C, H, W] map filled with `v`.
struct Map {
  std::int64_t c, h, w;
  std::vector<float> v;
  Map(std::int64_t c_, std::int64_t h_, std::int64_t w_, float fill = 0.0f)
      : c(c_), h(h_), w(w_), v(static_cast<std::size_t>(c_ * h_ * w_), fill) {}
  float& at(std::int64_t ch, std::int64_t y, std::int64_t x) {
    return v[static_cast<std::size_t>((ch * h + y) * w + x)];
  }
  BandScore bands(double min_dev = 0.5) const { return band_score(v, c, h, w, min_dev); }
  MapStats analyze(MapOptions o = {}) const { return analyze_map(v, c, h, w, o); }
};

Map noise(std::uint32_t seed, std::int64_t c, std::int64_t h, std::int64_t w, float sd = 1.0f) {
  Map m(c, h, w);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, sd);
  for (auto& x : m.v) x = n(rng);
  return m;
}

TEST(InspectStats, CountsNonFiniteAndSummarisesFiniteValues) {
  const std::vector<float> v = {1.0f, -3.0f, kNaN, kInf, -kInf, -kInf, 2.0f};
  const Stats s = compute_stats(v, 0);
  EXPECT_EQ(s.count, 7);
  EXPECT_EQ(s.nan, 1);
  EXPECT_EQ(s.pos_inf, 1);
  EXPECT_EQ(s.neg_inf, 2);
  EXPECT_EQ(s.nonfinite(), 4);
  EXPECT_DOUBLE_EQ(s.min, -3.0);
  EXPECT_DOUBLE_EQ(s.max, 2.0);
  EXPECT_DOUBLE_EQ(s.max_abs, 3.0);
  EXPECT_DOUBLE_EQ(s.mean, 0.0);
  EXPECT_NEAR(s.std, std::sqrt(14.0 / 3.0), 1e-12);
  EXPECT_EQ(s.near_limit, 0);
}

TEST(InspectStats, NearLimitIsWithinTenPercentOfTheDtypeMaximum) {
  const double limit = dtype_max(DType::f16);  // 65504
  EXPECT_EQ(compute_stats(std::vector<float>{60000.0f, -59000.0f, 1.0f}, limit).near_limit, 2);
  EXPECT_EQ(compute_stats(std::vector<float>{58000.0f, -50000.0f, 1.0f}, limit).near_limit, 0);
  // The same values are nowhere near f32's limit.
  EXPECT_EQ(compute_stats(std::vector<float>{60000.0f}, dtype_max(DType::f32)).near_limit, 0);
  EXPECT_NEAR(compute_stats(std::vector<float>{60000.0f, 1, 2, 3}, limit).near_limit_share, 0.25, 1e-12);
}

TEST(InspectStats, MergeEqualsStatsOfTheConcatenation) {
  const Map a = noise(1, 1, 5, 7, 2.0f), b = noise(2, 1, 3, 3, 0.5f);
  std::vector<float> all(a.v);
  all.insert(all.end(), b.v.begin(), b.v.end());
  all.push_back(kNaN);
  Stats m = compute_stats(a.v, 0);
  std::vector<float> bn(b.v);
  bn.push_back(kNaN);
  m.merge(compute_stats(bn, 0));
  const Stats want = compute_stats(all, 0);
  EXPECT_EQ(m.count, want.count);
  EXPECT_EQ(m.nan, want.nan);
  EXPECT_NEAR(m.mean, want.mean, 1e-12);
  EXPECT_NEAR(m.std, want.std, 1e-9);
  EXPECT_EQ(m.min, want.min);
  EXPECT_EQ(m.max, want.max);
}

TEST(InspectMask, MarksTheCellsHoldingNonFiniteValues) {
  Map m(4, 64, 64, 0.5f);
  EXPECT_FALSE(nonfinite_mask(m.v, m.c, m.h, m.w).any());
  m.at(2, 10, 40) = kNaN;
  m.at(0, 63, 0) = -kInf;
  const NonFiniteMask mask = nonfinite_mask(m.v, m.c, m.h, m.w, 32);
  ASSERT_EQ(mask.rows, 32);
  ASSERT_EQ(mask.cols, 32);
  EXPECT_TRUE(mask.any());
  EXPECT_FLOAT_EQ(mask.at(5, 20), 1.0f / 16.0f);  // 1 of 4 channels x 2 x 2 pixels
  EXPECT_FLOAT_EQ(mask.at(31, 0), 1.0f / 16.0f);
  EXPECT_FLOAT_EQ(mask.at(0, 0), 0.0f);
  // A grid smaller than the cell limit keeps one cell per pixel.
  const NonFiniteMask small = nonfinite_mask(m.v, m.c, 64, 64, 100);
  EXPECT_EQ(small.rows, 64);
  EXPECT_FLOAT_EQ(small.at(10, 40), 0.25f);
}

// Report R0: one corrupted line near the top and one near the bottom.
TEST(InspectBands, CorruptedRowsNearTopAndBottomAreBands) {
  Map m = noise(7, 3, 64, 64, 0.05f);
  for (std::int64_t x = 0; x < m.w; ++x)
    for (std::int64_t c = 0; c < m.c; ++c) {
      m.at(c, 2, x) = 1.0f;                     // over-bright line
      m.at(c, 61, x) += c == 0 ? 0.9f : -0.9f;  // over-saturated line
    }
  const BandScore b = m.bands();
  EXPECT_TRUE(b.bands()) << b.row_score;
  EXPECT_EQ(b.band_rows, (std::vector<int>{2, 61}));
  EXPECT_TRUE(b.band_cols.empty());
  EXPECT_TRUE(b.worst_row == 2 || b.worst_row == 61);
  const MapStats s = m.analyze();
  EXPECT_EQ(s.verdict, Verdict::bands);
  EXPECT_NE(s.note.find("rows 2, 61"), std::string::npos) << s.note;
}

TEST(InspectBands, ACorruptedColumnIsABand) {
  Map m(4, 16, 16, 0.0f);
  for (std::int64_t y = 0; y < m.h; ++y) m.at(1, y, 9) = 2.0f;
  const BandScore b = m.bands();
  EXPECT_EQ(b.band_cols, (std::vector<int>{9}));
  EXPECT_TRUE(b.band_rows.empty());
}

TEST(InspectBands, ALineOfNoiseInACleanPictureIsABand) {
  // Same mean as its neighbours, different spread: the std statistic sees it.
  Map m(3, 32, 32, 0.2f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::int64_t x = 0; x < m.w; ++x) m.at(0, 20, x) = 0.2f + u(rng);
  EXPECT_EQ(m.bands().band_rows, (std::vector<int>{20}));
}

TEST(InspectBands, NoiseDoesNotMakeBands) {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    for (float sd : {1.0f, 4096.0f}) {
      const Map m = noise(seed, 4, 16 + seed % 5, 16 + seed % 3, sd);
      const BandScore b = m.bands(0.5 * sd);
      EXPECT_FALSE(b.bands()) << "seed " << seed << " sd " << sd << " score " << b.score();
    }
  }
}

TEST(InspectBands, StripesShapesAndGradientsDoNotMakeBands) {
  for (int width : {1, 2, 3, 4, 5, 8}) {
    Map m(3, 64, 64);
    for (std::int64_t y = 0; y < m.h; ++y)
      for (std::int64_t x = 0; x < m.w; ++x)
        for (std::int64_t c = 0; c < m.c; ++c) m.at(c, y, x) = ((y / width) % 2) ? 1.0f : -1.0f;
    EXPECT_FALSE(m.bands().bands()) << "horizontal stripes " << width << ": " << m.bands().score();
  }
  Map sq(3, 64, 64, -1.0f);  // a square
  for (std::int64_t y = 20; y < 44; ++y)
    for (std::int64_t x = 10; x < 30; ++x) sq.at(0, y, x) = 1.0f;
  EXPECT_FALSE(sq.bands().bands()) << sq.bands().score();
  Map small(3, 64, 64, -1.0f);  // a small square at the top edge
  for (std::int64_t y = 0; y < 14; ++y)
    for (std::int64_t x = 0; x < 14; ++x) small.at(1, y, x) = 1.0f;
  EXPECT_FALSE(small.bands().bands()) << small.bands().score();
  Map circle(3, 64, 64, 0.3f);
  for (std::int64_t y = 0; y < 64; ++y)
    for (std::int64_t x = 0; x < 64; ++x)
      if ((x - 32) * (x - 32) + (y - 32) * (y - 32) < 400) circle.at(2, y, x) = -0.8f;
  EXPECT_FALSE(circle.bands().bands()) << circle.bands().score();
  Map grad(3, 64, 64);
  for (std::int64_t y = 0; y < 64; ++y)
    for (std::int64_t x = 0; x < 64; ++x) grad.at(0, y, x) = static_cast<float>(y) / 32.0f - 1.0f;
  EXPECT_FALSE(grad.bands().bands()) << grad.bands().score();
}

TEST(InspectBands, SmallDifferencesAndBorderLinesDoNotMakeBands) {
  // A line 0.1 off on the -1..1 scale (13 grey levels) is not an artifact.
  Map m(3, 64, 64, 0.4f);
  for (std::int64_t x = 0; x < m.w; ++x) {
    m.at(0, 5, x) = 0.5f;
    m.at(1, 40, x) = 0.3f;
  }
  EXPECT_FALSE(m.bands().bands()) << m.bands().score();
  // The first and last lines are not judged: decoders' padding makes them differ.
  for (std::int64_t x = 0; x < m.w; ++x) {
    m.at(0, 0, x) = 1.0f;
    m.at(2, 63, x) = -1.0f;
  }
  EXPECT_FALSE(m.bands().bands()) << m.bands().score();
  // One line in from the border, the same difference is a band.
  for (std::int64_t x = 0; x < m.w; ++x) m.at(0, 2, x) = 1.0f;
  EXPECT_EQ(m.bands().band_rows, (std::vector<int>{2}));
}

TEST(InspectBands, ManyScoringLinesAreAPatternNotBands) {
  Map m = noise(4, 3, 64, 64, 0.05f);
  for (std::int64_t y = 4; y < 60; y += 6)
    for (std::int64_t x = 0; x < m.w; ++x) m.at(1, y, x) = 1.0f;  // thin periodic lines
  const BandScore b = m.bands();
  EXPECT_GT(b.band_rows.size(), 4u);
  EXPECT_TRUE(b.pattern);
  EXPECT_FALSE(b.bands());
}

TEST(InspectSaturation, ValuesFarBeyondTheImageRangeAreSaturated) {
  Map m = noise(5, 3, 32, 32, 0.3f);
  MapStats clean = m.analyze();
  EXPECT_LT(clean.saturation, kSaturatedShare);
  EXPECT_EQ(clean.verdict, Verdict::clean);
  // Slight overshoot (a VAE's flat colours at 1.05) is clipped, not saturated.
  for (std::int64_t x = 0; x < 32; ++x)
    for (std::int64_t y = 0; y < 16; ++y) m.at(0, y, x) = 1.05f;
  const MapStats clipped = m.analyze();
  EXPECT_GT(clipped.clipped, 0.15);
  EXPECT_EQ(clipped.verdict, Verdict::clean);
  // Over-bright values beyond 3 scattered over 8% of the picture.
  Map s = noise(6, 3, 32, 32, 0.3f);
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::size_t> pick(0, s.v.size() - 1);
  std::size_t hit = 0;
  while (hit < 246) {
    float& x = s.v[pick(rng)];
    if (std::fabs(x) > 3.0f) continue;
    x = hit % 2 ? 4.0f : -3.5f;
    ++hit;
  }
  const MapStats sat = s.analyze();
  EXPECT_NEAR(sat.saturation, 246.0 / 3072.0, 1e-9);
  EXPECT_EQ(sat.verdict, Verdict::saturated) << sat.note;
  MapOptions off;
  off.saturation_verdict = false;
  EXPECT_EQ(s.analyze(off).verdict, Verdict::clean);
}

TEST(InspectVerdict, NonFiniteOutranksBandsOutranksNearLimit) {
  Map m(2, 16, 16, 0.1f);
  MapOptions o;
  o.limit = dtype_max(DType::f16);
  o.image_scale = false;
  for (std::int64_t y = 0; y < 16; ++y)
    for (std::int64_t x = 0; x < 16; ++x) m.at(0, y, x) = 61000.0f;  // a whole channel near f16's limit
  EXPECT_EQ(m.analyze(o).verdict, Verdict::near_limit);
  for (std::int64_t x = 0; x < 16; ++x) m.at(1, 8, x) = 5.0f;
  EXPECT_EQ(m.analyze(o).verdict, Verdict::bands);
  m.at(1, 2, 3) = kNaN;
  const MapStats s = m.analyze(o);
  EXPECT_EQ(s.verdict, Verdict::non_finite);
  EXPECT_EQ(s.all.nan, 1);
  EXPECT_EQ(s.channels[1].nan, 1);
  EXPECT_EQ(s.channels[0].nan, 0);
  EXPECT_EQ(s.channels[0].near_limit, 256);
  EXPECT_NE(s.note.find("1 of 512 values are non-finite"), std::string::npos) << s.note;
}

TEST(InspectVerdict, NamesRoundTripAndWorstPicksTheMoreSevere) {
  for (Verdict v : {Verdict::clean, Verdict::slow_start, Verdict::near_limit, Verdict::saturated, Verdict::bands,
                    Verdict::non_finite, Verdict::device_missing}) {
    EXPECT_EQ(parse_verdict(verdict_name(v)), v);
  }
  EXPECT_EQ(verdict_name(Verdict::non_finite), "non-finite");
  EXPECT_EQ(parse_verdict("fine"), std::nullopt);
  EXPECT_EQ(worst(Verdict::bands, Verdict::clean), Verdict::bands);
  EXPECT_EQ(worst(Verdict::saturated, Verdict::non_finite), Verdict::non_finite);
}

TEST(InspectPreview, AppliesTheFactorsToTheUnitVarianceLatent) {
  LatentRgbFactors f;
  f.factors = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 0, 0}};
  f.bias = {0, 0, 0.5f};
  Map lat(4, 2, 3, 0.0f);
  lat.at(0, 0, 0) = 2.0f;   // sigma 1: scaled by 1/sqrt(2) -> 1.414: clipped, not beyond 3
  lat.at(1, 1, 2) = -5.0f;  // -3.54 after scaling: overshoot
  double over = 0, clipped = 0;
  const Preview p = latent_preview(lat.v, 4, 2, 3, f, 1.0, &over, &clipped);
  ASSERT_EQ(p.width, 3);
  ASSERT_EQ(p.height, 2);
  ASSERT_EQ(p.rgb.size(), 18u);
  EXPECT_EQ(p.rgb[0], 255);                  // red of (0,0) clipped at 1
  EXPECT_EQ(p.rgb[2], 191);                  // blue bias 0.5 -> 0.75 * 255
  EXPECT_EQ(p.rgb[(1 * 3 + 2) * 3 + 1], 0);  // green of (1,2) clipped at -1
  EXPECT_EQ(p.rgb[3], 128);                  // red of (0,1): 0 -> 127.5 rounds to 128
  EXPECT_NEAR(over, 1.0 / 18.0, 1e-12);
  EXPECT_NEAR(clipped, 2.0 / 18.0, 1e-12);
  for (const char* fam : {"sd1", "sd2", "sdxl", "nanscope-tiny"}) {
    const auto got = latent_rgb_factors(fam);
    ASSERT_TRUE(got) << fam;
    EXPECT_EQ(got->factors.size(), 4u) << fam;
  }
  EXPECT_FALSE(latent_rgb_factors("sd3"));
}

TEST(InspectStep, BandsAndSaturationAreMeasuredAndNonFiniteValuesJudged) {
  LatentRgbFactors f;
  f.factors = {{1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  Map lat = noise(8, 4, 16, 16, 0.5f);
  for (std::int64_t x = 0; x < 16; ++x) lat.at(0, 2, x) = 5.0f;  // a band, beyond 3 in the preview
  const Map eps = noise(9, 4, 16, 16);
  const double limit = dtype_max(DType::f16);
  const StepStats noisy = analyze_step(lat.v, eps.v, {}, 4, 16, 16, limit, &f, 10.0);
  EXPECT_EQ(noisy.latent.verdict, Verdict::clean);
  EXPECT_FALSE(noisy.noise_uncond.has_value());
  const StepStats last = analyze_step(lat.v, eps.v, eps.v, 4, 16, 16, limit, &f, 0.0);
  EXPECT_TRUE(last.latent.bands.bands());
  EXPECT_EQ(last.latent.bands.band_rows, (std::vector<int>{2}));
  EXPECT_GT(last.latent.saturation, 0.0);
  EXPECT_EQ(last.verdict, Verdict::clean);
  ASSERT_TRUE(last.noise_uncond.has_value());
  EXPECT_EQ(last.preview.width, 16);
  Map flat(4, 16, 16, 4.0f);
  // Bands in a noise prediction are measured, not judged.
  Map banded_eps = eps;
  for (std::int64_t x = 0; x < 16; ++x) banded_eps.at(1, 5, x) = 9.0f;
  const StepStats be = analyze_step(flat.v, banded_eps.v, {}, 4, 16, 16, limit, nullptr, 0.0);
  EXPECT_TRUE(be.noise_cond.bands.bands());
  EXPECT_EQ(be.noise_cond.verdict, Verdict::clean);
  // Near f16's limit in the latent is judged.
  Map hot(4, 16, 16, 60000.0f);
  EXPECT_EQ(analyze_step(hot.v, eps.v, {}, 4, 16, 16, limit, nullptr, 0.0).verdict, Verdict::near_limit);
  // A NaN in the unconditional branch alone makes the step non-finite.
  Map bad = eps;
  bad.at(3, 7, 7) = kNaN;
  const StepStats nan_step = analyze_step(flat.v, eps.v, bad.v, 4, 16, 16, limit, nullptr, 0.0);
  EXPECT_EQ(nan_step.verdict, Verdict::non_finite);
  EXPECT_EQ(nan_step.noise_cond.verdict, Verdict::clean);
  EXPECT_TRUE(nan_step.preview.rgb.empty());
}

TEST(InspectImage, CountsNonFinitePixelsOnce) {
  Map img(3, 8, 8, 0.0f);
  img.at(0, 1, 1) = kNaN;
  img.at(2, 1, 1) = kInf;
  img.at(1, 5, 2) = kNaN;
  const ImageStats s = analyze_image(img.v, 8, 8);
  EXPECT_EQ(s.nonfinite_pixels, 2);
  EXPECT_EQ(s.map.all.nonfinite(), 3);
  EXPECT_EQ(s.map.verdict, Verdict::non_finite);
  EXPECT_TRUE(s.map.mask.any());
}

// A decoder's padding frame: a dark line 2 pixels in from the right edge of a
// clean picture (what the embedded VAE draws) is not a band on an image; the
// same line further in is, and so are R0's lines a latent row in from the top
// and bottom (rows 5 and 58 of a 64-pixel image at a VAE factor of 4).
TEST(InspectImage, LinesInTheDecodersPaddingFrameAreNotBands) {
  Map img = noise(11, 3, 64, 64, 0.02f);
  for (auto& v : img.v) v += 0.3f;
  for (std::int64_t y = 0; y < img.h; ++y)
    for (std::int64_t c = 0; c < img.c; ++c) img.at(c, y, 61) = -0.6f;
  EXPECT_EQ(analyze_image(img.v, 64, 64).map.verdict, Verdict::clean);
  EXPECT_TRUE(img.bands().bands()) << "on a latent-sized map without the image margin the line still counts";
  for (std::int64_t y = 0; y < img.h; ++y)
    for (std::int64_t c = 0; c < img.c; ++c) img.at(c, y, 40) = -0.6f;
  const ImageStats inner = analyze_image(img.v, 64, 64);
  EXPECT_EQ(inner.map.verdict, Verdict::bands);
  EXPECT_EQ(inner.map.bands.band_cols, (std::vector<int>{40}));
  Map r0 = noise(12, 3, 64, 64, 0.02f);
  for (std::int64_t x = 0; x < r0.w; ++x)
    for (std::int64_t c = 0; c < r0.c; ++c) r0.at(c, 5, x) = r0.at(c, 58, x) = 1.0f;
  EXPECT_EQ(analyze_image(r0.v, 64, 64).map.bands.band_rows, (std::vector<int>{5, 58}));
}

}  // namespace
}  // namespace nanscope::inspect
