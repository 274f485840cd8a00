// VAE tiling (models/vae_tiling.hpp) and the memory plan's advice that offers
// it (pipeline/memory_plan.hpp): tiled decode and encode against the whole
// ones on the embedded model, and a device whose largest allocation is capped
// (BackendOptions::max_alloc_limit_bytes, `--max-alloc-limit`) so that the
// whole decode does not fit and the plan must find the tile that does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "backend/device.hpp"
#include "io/png.hpp"
#include "models/vae_tiling.hpp"
#include "pipeline/memory_plan.hpp"
#include "pipeline/session.hpp"
#include "support/backends.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;

TEST(VaeTiling, TileStartsCoverTheAxisAndOverlapByTheOverlap) {
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(models::tile_starts(32, 64, 8), V{0}) << "one tile when the tile covers the axis";
  EXPECT_EQ(models::tile_starts(32, 32, 8), V{0});
  EXPECT_EQ(models::tile_starts(32, 16, 4), (V{0, 12, 16})) << "the last tile moves back to end at the edge";
  EXPECT_EQ(models::tile_starts(40, 16, 4), (V{0, 12, 24})) << "exact fit: 24 + 16 = 40";
  EXPECT_EQ(models::tile_starts(10, 4, 0), (V{0, 4, 6}));
  const auto t = models::vae_tiles(512, 64, 8);
  EXPECT_EQ(t.tile, 64);
  EXPECT_EQ(t.overlap, 8);
  EXPECT_EQ(models::vae_tiles(64, 64, 8).overlap, 3) << "the overlap stays below half a tile";
}

// A smooth picture with edges (discs and a gradient) in [-1, 1], [1, 3, n, n].
HostTensor test_image(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(3 * n * n));
  for (std::int64_t c = 0; c < 3; ++c) {
    for (std::int64_t y = 0; y < n; ++y) {
      for (std::int64_t x = 0; x < n; ++x) {
        const double u = static_cast<double>(x) / n, w = static_cast<double>(y) / n;
        double p = 0.6 * (u - 0.5) + 0.3 * std::sin(6.0 * w + static_cast<double>(c));
        if ((u - 0.3) * (u - 0.3) + (w - 0.35) * (w - 0.35) < 0.04) p = c == 0 ? 0.9 : -0.7;
        if ((u - 0.7) * (u - 0.7) + (w - 0.7) * (w - 0.7) < 0.02) p = c == 2 ? 0.8 : -0.2;
        v[static_cast<std::size_t>((c * n + y) * n + x)] = static_cast<float>(p);
      }
    }
  }
  return HostTensor::from_f32({1, 3, n, n}, v);
}

struct Diff {
  double rms = 0, max_abs = 0;
};
Diff diff(const HostTensor& a, const HostTensor& b) {
  const auto x = a.to_f32(), y = b.to_f32();
  EXPECT_EQ(x.size(), y.size());
  Diff d;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = std::abs(static_cast<double>(x[i]) - y[i]);
    d.rms += e * e;
    d.max_abs = std::max(d.max_abs, e);
  }
  d.rms = std::sqrt(d.rms / static_cast<double>(x.size()));
  return d;
}

Backend& tiling_backend() {
  const auto& cl = test::opencl_backends();
  return cl.empty() ? test::reference_backend() : *cl.front();
}

// The embedded VAE (factor 4) on a 128x128 picture: its latent is 32x32, decoded whole and in 2x2 tiles of
// 20 latent pixels overlapping by 8 (tiles of 80 image pixels at 0 and 48; the seam zone is rows and
// columns 48..79, blended across 32 pixels).
//
// Tolerances (images in [-1, 1], f32). A tiled decode is not the whole decode: each tile's group norms see
// only that tile's statistics, its mid-block attention only that tile's positions, and its convolutions
// zero padding at its edge (ComfyUI's and A1111's tiled VAEs differ from the whole decode the same way; the
// embedded VAE, trained on 64x64 images with attention over the whole latent and only 16-64 channels, more
// than SD's). Measured here: RMS 0.20 against the whole decode, spread over whole tiles (a shift of each
// tile's colours), not concentrated at the seams. So the test bounds the overall change loosely (RMS < 0.3)
// and the seam tightly, in two ways: the seam zone may not be worse than the rest of the image (measured
// RMS 0.16 there, 0.22 away; limit 1.25x), and the extra step between the rows and columns where a tile
// begins or ends, beyond the whole decode's own step there, must be less than half of what tiles butted
// together without the blend (overlap 0) give: measured 0.018 blended, 0.156 butted.
TEST(VaeTiling, TiledDecodeAndEncodeMatchTheWholeOnesOnTheEmbeddedModel) {
  fs::path dir;
  try {
    dir = pipeline::embedded_model_dir();
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  Backend& be = tiling_backend();
  const auto vae = models::Vae::load(dir / "vae", be, DType::f32, /*with_encoder=*/true);
  ASSERT_EQ(vae.config().downscale(), 4);
  OpContext ctx;
  ctx.backend = &be;
  ctx.precision = Precision{DType::f32, Accumulate::f32, SoftmaxPrecision::f32};
  const std::int64_t n = 128;
  const Tensor image = be.upload(test_image(n));
  const Tensor latent = vae.encode(ctx, image);
  ASSERT_EQ(latent.shape(), (Shape{1, 4, 32, 32}));
  ASSERT_EQ(models::tile_starts(32, 20, 8), (std::vector<std::int64_t>{0, 12}));

  const HostTensor whole = be.download(vae.decode(ctx, latent)).converted(DType::f32);
  const HostTensor tiled =
      be.download(models::decode_tiled(vae, ctx, latent, models::VaeTiles{20, 8})).converted(DType::f32);
  ASSERT_EQ(tiled.shape, whole.shape);
  const Diff d = diff(whole, tiled);
  // RMS against the whole decode inside the seam zone (rows or columns 48..79) and away from it.
  auto zone_rms = [&](const HostTensor& t, bool seam) {
    const auto a = whole.to_f32(), b = t.to_f32();
    double s = 0;
    std::size_t count = 0;
    for (std::int64_t c = 0; c < 3; ++c) {
      for (std::int64_t y = 0; y < n; ++y) {
        for (std::int64_t x = 0; x < n; ++x) {
          const bool in_seam = (y >= 48 && y < 80) || (x >= 48 && x < 80);
          if (in_seam != seam) continue;
          const std::size_t i = static_cast<std::size_t>((c * n + y) * n + x);
          s += (a[i] - b[i]) * (a[i] - b[i]);
          ++count;
        }
      }
    }
    return std::sqrt(s / static_cast<double>(count));
  };
  // The seam itself: the step between neighbouring rows (and columns) where a tile's output begins or
  // ends (48|49 and 78|79... at 47/48 and 79/80), beyond the whole decode's own step there. A seam is a step
  // the whole decode does not have.
  auto edge_step = [&](const HostTensor& t) {
    const auto a = whole.to_f32(), b = t.to_f32();
    double s = 0;
    std::size_t count = 0;
    auto at = [&](const std::vector<float>& v, std::int64_t c, std::int64_t y, std::int64_t x) {
      return static_cast<double>(v[static_cast<std::size_t>((c * n + y) * n + x)]);
    };
    for (std::int64_t c = 0; c < 3; ++c) {
      for (const std::int64_t e : {47, 79}) {
        for (std::int64_t k = 0; k < n; ++k) {
          const double rows = (at(b, c, e + 1, k) - at(b, c, e, k)) - (at(a, c, e + 1, k) - at(a, c, e, k));
          const double cols = (at(b, c, k, e + 1) - at(b, c, k, e)) - (at(a, c, k, e + 1) - at(a, c, k, e));
          s += rows * rows + cols * cols;
          count += 2;
        }
      }
    }
    return std::sqrt(s / static_cast<double>(count));
  };
  const HostTensor hard =
      be.download(models::decode_tiled(vae, ctx, latent, models::VaeTiles{20, 0})).converted(DType::f32);
  const double seam = zone_rms(tiled, true), away = zone_rms(tiled, false);
  const double step = edge_step(tiled), hard_step = edge_step(hard);
  std::printf(
      "tiled decode vs whole: rms %.4f max %.4f; seam zone rms %.4f, away %.4f; extra step at tile edges: blended "
      "%.4f, hard-edged %.4f\n",
      d.rms, d.max_abs, seam, away, step, hard_step);
  EXPECT_LT(d.rms, 0.3);
  EXPECT_LT(seam, 1.25 * away) << "the seam zone is worse than the rest: a visible seam";
  EXPECT_LT(step, 0.5 * hard_step) << "the blend must take out most of the step of tiles butted together";

  // Encode in tiles (the same tiles, 4x larger in image pixels); the same causes, in latent units (latents
  // span about +-3 here): measured RMS 0.08, limit 0.2.
  const HostTensor lat_whole = be.download(latent).converted(DType::f32);
  const HostTensor lat_tiled =
      be.download(models::encode_tiled(vae, ctx, image, models::VaeTiles{20, 8})).converted(DType::f32);
  ASSERT_EQ(lat_tiled.shape, lat_whole.shape);
  const Diff e = diff(lat_whole, lat_tiled);
  std::printf("tiled encode vs whole: rms %.4f max %.4f\n", e.rms, e.max_abs);
  EXPECT_LT(e.rms, 0.2);

  // A tile as large as the latent is the whole decode, bit for bit.
  const HostTensor one =
      be.download(models::decode_tiled(vae, ctx, latent, models::VaeTiles{32, 4})).converted(DType::f32);
  EXPECT_EQ(diff(whole, one).max_abs, 0.0);
}

// The memory check's advice: with the largest allocation capped below the
// whole decode's largest buffer, the plan refuses the size and proposes VAE
// tiling with the largest tile that fits, computed by planning it.
TEST(VaeTiling, MemoryPlanProposesTheLargestTileThatFitsACappedDevice) {
  fs::path dir;
  try {
    dir = pipeline::embedded_model_dir();
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  const int size = 256;
  auto plan_on = [&](std::uint64_t max_alloc, const RunConfig& config) {
    BackendOptions o;
    o.max_alloc_limit_bytes = max_alloc;
    pipeline::Session session(o);
    RunConfig c = config;
    c.device = "reference";  // the plan allocates nothing; the reference device has no kernels to build
    pipeline::SdModel& m = session.model(c);
    Backend& be = session.backend(c.device);
    pipeline::PlanRequest r;
    r.model = &m;
    r.unet.backend = r.vae.backend = &be;
    r.width = r.height = size;
    r.cfg = true;
    r.resident_bytes = be.allocated_bytes();
    if (c.vae_tiling != "off") r.vae_tiles = models::vae_tiles(c.vae_tile_size, c.vae_tile_overlap, 4);
    r.tile_overlap_px = c.vae_tile_overlap;
    return pipeline::plan_memory(r);
  };
  const RunConfig base;
  const pipeline::MemoryPlan real = plan_on(0, base);
  ASSERT_TRUE(real.fits()) << real.refusal;
  EXPECT_TRUE(real.fix.empty()) << "with the real limits there is nothing to fix";
  ASSERT_EQ(real.largest.component, "vae")
      << "at 256x256 the decoder holds the largest buffer: " << real.largest.describe();

  // A device whose largest buffer is 60% of that: the whole decode cannot run there.
  const std::uint64_t cap = real.largest.bytes * 6 / 10;
  const pipeline::MemoryPlan refused = plan_on(cap, base);
  ASSERT_FALSE(refused.fits());
  EXPECT_NE(refused.refusal.find("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), std::string::npos) << refused.refusal;
  ASSERT_GE(refused.fix.size(), 2u) << "tiling makes it fit, so it is proposed: " << refused.refusal;
  EXPECT_EQ(refused.fix[0], "vae.tiling=on");
  EXPECT_EQ(refused.fix[1].rfind("vae.tile_size=", 0), 0u);
  EXPECT_NE(refused.refusal.find(refused.fix_note), std::string::npos) << "the message says it";

  // The proposal, applied as a user would (the settings' own parsing), fits; a tile 8 latent pixels larger does not.
  RunConfig fixed = base;
  for (const auto& a : refused.fix) fixed.set(a);
  fixed.validate();
  const pipeline::MemoryPlan after = plan_on(cap, fixed);
  EXPECT_TRUE(after.fits()) << after.refusal;
  EXPECT_LE(after.largest.bytes, cap);
  RunConfig larger = fixed;
  larger.set("vae.tile_size", std::to_string(fixed.vae_tile_size + 8 * 4));
  if (larger.vae_tile_size < size) {
    EXPECT_FALSE(plan_on(cap, larger).fits()) << "the proposed tile is the largest that fits";
  }

  // A cap below what the UNet needs (its largest buffer here is 4 MiB): tiling the decode cannot help, and
  // nothing is proposed.
  const pipeline::MemoryPlan hopeless = plan_on(3 << 20, base);
  ASSERT_FALSE(hopeless.fits());
  EXPECT_TRUE(hopeless.fix.empty()) << hopeless.refusal;
}

// img2img encodes its init image whole (VAE tiling tiles the decode only): the
// memory plan includes the VAE encoder, so a size whose encode does not fit
// the device is refused before any work, naming the encoder's buffer, and no
// decode tiling is offered for it. The same size without an init image fits
// with the decode tiled (the plan without the encoder, as before, would have
// let the run start and fail in the encode).
TEST(VaeTiling, MemoryPlanRefusesAnInitImageEncodeThatDoesNotFit) {
  fs::path dir;
  try {
    dir = pipeline::embedded_model_dir();
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  const int size = 256;
  RunConfig tiled;
  tiled.device = "reference";
  tiled.set("vae.tiling", "on");
  tiled.set("vae.tile_size", "64");
  auto plan_on = [&](std::uint64_t max_alloc, bool encode) {
    BackendOptions o;
    o.max_alloc_limit_bytes = max_alloc;
    pipeline::Session session(o);
    pipeline::SdModel& m = session.model(tiled);
    Backend& be = session.backend(tiled.device);
    pipeline::PlanRequest r;
    r.model = &m;
    r.unet.backend = r.vae.backend = &be;
    r.width = r.height = size;
    r.cfg = true;
    if (encode) {
      r.encoder = &session.encoder_vae(tiled);
      r.encode_width = r.encode_height = size;
    }
    r.resident_bytes = be.allocated_bytes();
    r.vae_tiles = models::vae_tiles(tiled.vae_tile_size, tiled.vae_tile_overlap, 4);
    r.tile_overlap_px = tiled.vae_tile_overlap;
    return pipeline::plan_memory(r);
  };
  const pipeline::MemoryPlan whole = plan_on(0, true);
  ASSERT_TRUE(whole.fits()) << whole.refusal;
  ASSERT_EQ(whole.largest.component, "vae encoder")
      << "with the decode in 64-pixel tiles the encoder holds the largest buffer: " << whole.largest.describe();
  // A device whose largest buffer is just below the encoder's.
  const std::uint64_t cap = whole.largest.bytes - 1;
  const pipeline::MemoryPlan txt2img = plan_on(cap, false);
  EXPECT_TRUE(txt2img.fits()) << txt2img.refusal;
  const pipeline::MemoryPlan refused = plan_on(cap, true);
  ASSERT_FALSE(refused.fits());
  for (const char* want : {"vae encoder", "CL_DEVICE_MAX_MEM_ALLOC_SIZE", "VAE tiling tiles the decode only"})
    EXPECT_NE(refused.refusal.find(want), std::string::npos) << want << " not in: " << refused.refusal;
  EXPECT_TRUE(refused.fix.empty()) << "decode tiling cannot help the encode: " << refused.refusal;

  // End to end: img2img at that size on that device is refused before any work, naming the encoder.
  test::TempDir tmp;
  const io::RgbImage init{size, size, std::vector<std::uint8_t>(static_cast<std::size_t>(size * size * 3), 90)};
  io::write_png(tmp / "init.png", init);
  RunConfig c = tiled;
  c.steps = 1;
  c.width = c.height = size;
  c.set("init_image", (tmp / "init.png").string());
  BackendOptions o;
  o.max_alloc_limit_bytes = cap;
  pipeline::Session session(o);
  try {
    session.generate(c);
    FAIL() << "the init image's encode cannot fit";
  } catch (const pipeline::MemoryPlanError& e) {
    EXPECT_NE(std::string(e.what()).find("vae encoder"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanscope
