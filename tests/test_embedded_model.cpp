// The embedded default model (resources/models/nanscope-tiny), loaded through
// the same code path as any diffusers folder:
// - semantic: fixed prompts and seeds, f32, the model's own sampler, 20 steps;
//   the requested colours and shapes are recognised by a small classifier
//   written here (the same rules as tools/tiny_sd/export_eval.py);
// - fidelity: the engine's image equals diffusers' StableDiffusionPipeline on
//   the same folder from the same initial latent;
// - the two VAEs: equal in f32; vae/ overflows in f16, vae-fp16-fix/ does not.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <set>

#include "backend/device.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "pipeline/session.hpp"
#include "support/compare.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;

// The canonical colours of the training data (tools/train_tiny_sd.py, COLOURS).
struct Colour {
  const char* name;
  std::array<float, 3> rgb;
};
constexpr std::array<Colour, 8> kColours{{{"red", {255, 0, 0}},
                                          {"green", {0, 160, 0}},
                                          {"blue", {0, 0, 255}},
                                          {"yellow", {255, 255, 0}},
                                          {"orange", {255, 140, 0}},
                                          {"purple", {128, 0, 160}},
                                          {"white", {255, 255, 255}},
                                          {"black", {0, 0, 0}}}};

int nearest_colour(const std::array<float, 3>& rgb) {
  int best = 0;
  float best_d = 1e30f;
  for (int i = 0; i < 8; ++i) {
    float d = 0;
    for (int c = 0; c < 3; ++c) d += (rgb[c] - kColours[i].rgb[c]) * (rgb[c] - kColours[i].rgb[c]);
    if (d < best_d) best_d = d, best = i;
  }
  return best;
}

std::array<float, 3> pixel(const io::RgbImage& img, int x, int y) {
  const auto* p = &img.pixels[static_cast<std::size_t>((y * img.width + x) * 3)];
  return {static_cast<float>(p[0]), static_cast<float>(p[1]), static_cast<float>(p[2])};
}

std::array<float, 3> median_rgb(std::vector<std::array<float, 3>> v) {
  std::array<float, 3> m{};
  for (int c = 0; c < 3; ++c) {
    std::vector<float> ch;
    for (const auto& p : v) ch.push_back(p[static_cast<std::size_t>(c)]);
    std::nth_element(ch.begin(), ch.begin() + static_cast<std::ptrdiff_t>(ch.size() / 2), ch.end());
    m[static_cast<std::size_t>(c)] = ch[ch.size() / 2];
  }
  return m;
}

struct Spec {
  std::string kind;  // circle, square, triangle, stripes
  int fg, bg;
  std::string orient;  // stripes only
};

struct Verdict {
  bool fg_ok = false, bg_ok = false, shape_ok = false;
};

// The rules of tools/tiny_sd/export_eval.py (check_shape / check_stripes),
// ported so the engine is judged exactly as the training evaluation judged
// diffusers' images.
// Shapes: background = nearest colour of the median of a 2-pixel border;
// rough foreground = pixels more than 60 RGB units from it; foreground colour =
// their median; mask = pixels nearer the foreground colour than the
// background's, opened with a 3x3 square. Triangle if >= 62% of the mask lies
// in the lower half of its bounding box (an apex-up triangle: 75%), else square
// if the four corner patches (20% of the box side) are more than half filled,
// else circle. Stripes: the two most common colours (the second >= 15% of the
// image) and the direction in which rows or columns vary more.
std::vector<std::uint8_t> open3(const std::vector<std::uint8_t>& m, int w, int h) {
  auto at = [&](const std::vector<std::uint8_t>& a, int x, int y, std::uint8_t fill) {
    return x < 0 || y < 0 || x >= w || y >= h ? fill : a[static_cast<std::size_t>(y * w + x)];
  };
  std::vector<std::uint8_t> eroded(m.size()), out(m.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      std::uint8_t e = 1;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) e &= at(m, x + dx, y + dy, 1);
      eroded[static_cast<std::size_t>(y * w + x)] = e;
    }
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      std::uint8_t d = 0;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) d |= at(eroded, x + dx, y + dy, 0);
      out[static_cast<std::size_t>(y * w + x)] = d;
    }
  return out;
}

float rgb_distance(const std::array<float, 3>& a, const std::array<float, 3>& b) {
  float d = 0;
  for (int c = 0; c < 3; ++c) d += (a[c] - b[c]) * (a[c] - b[c]);
  return std::sqrt(d);
}

Verdict classify(const io::RgbImage& img, const Spec& spec) {
  Verdict v;
  const int w = img.width, h = img.height;
  if (spec.kind == "stripes") {
    std::array<int, 8> counts{};
    std::vector<int> cls(static_cast<std::size_t>(w * h));
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) ++counts[static_cast<std::size_t>(cls[y * w + x] = nearest_colour(pixel(img, x, y)))];
    std::array<int, 8> order{0, 1, 2, 3, 4, 5, 6, 7};
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return counts[a] > counts[b]; });
    const std::set<int> top{order[0], order[1]};
    v.fg_ok = top.count(spec.fg) > 0;
    v.bg_ok = top.count(spec.bg) > 0;
    if (counts[order[1]] >= 0.15 * w * h) {
      std::vector<double> rows(static_cast<std::size_t>(h)), cols(static_cast<std::size_t>(w));
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const double on = cls[y * w + x] == order[0];
          rows[y] += on / w;
          cols[x] += on / h;
        }
      auto var = [](const std::vector<double>& a) {
        double m = 0, s = 0;
        for (double x : a) m += x;
        m /= a.size();
        for (double x : a) s += (x - m) * (x - m);
        return s / a.size();
      };
      v.shape_ok = (var(rows) > var(cols) ? "horizontal" : "vertical") == spec.orient;
    }
    return v;
  }
  std::vector<std::array<float, 3>> border;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (y < 2 || y >= h - 2 || x < 2 || x >= w - 2) border.push_back(pixel(img, x, y));
  const auto bg_rgb = median_rgb(border);
  v.bg_ok = nearest_colour(bg_rgb) == spec.bg;
  std::vector<std::array<float, 3>> rough;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (rgb_distance(pixel(img, x, y), bg_rgb) > 60.0f) rough.push_back(pixel(img, x, y));
  if (rough.size() < 12) return v;
  const auto fg_rgb = median_rgb(rough);
  v.fg_ok = nearest_colour(fg_rgb) == spec.fg;
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(w * h));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const auto p = pixel(img, x, y);
      mask[static_cast<std::size_t>(y * w + x)] = rgb_distance(p, fg_rgb) < rgb_distance(p, bg_rgb);
    }
  mask = open3(mask, w, h);
  int x0 = w, x1 = -1, y0 = h, y1 = -1, total = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (mask[static_cast<std::size_t>(y * w + x)]) {
        ++total;
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
  if (total < 12) return v;
  const int bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  auto in_box = [&](int x, int y) { return mask[static_cast<std::size_t>((y0 + y) * w + x0 + x)] != 0; };
  double lower = 0;
  for (int y = bh / 2; y < bh; ++y)
    for (int x = 0; x < bw; ++x) lower += in_box(x, y);
  if (bh % 2)
    for (int x = 0; x < bw; ++x) lower += 0.5 * in_box(x, bh / 2);
  const double lower_frac = lower / total;
  const int ch = std::max(1, static_cast<int>(std::lround(0.2 * bh))),
            cw = std::max(1, static_cast<int>(std::lround(0.2 * bw)));
  auto patch_mean = [&](int px, int py) {
    double s = 0;
    for (int y = py; y < py + ch; ++y)
      for (int x = px; x < px + cw; ++x) s += in_box(x, y);
    return s / (ch * cw);
  };
  const double corners =
      (patch_mean(0, 0) + patch_mean(bw - cw, 0) + patch_mean(0, bh - ch) + patch_mean(bw - cw, bh - ch)) / 4.0;
  const std::string shape = lower_frac >= 0.62 ? "triangle" : corners > 0.5 ? "square" : "circle";
  v.shape_ok = shape == spec.kind;
  return v;
}

fs::path model_dir() { return pipeline::embedded_model_dir(); }

// Until the trained weights are committed (tools/train_tiny_sd.py), these tests
// have nothing to check; once resources/models/nanscope-tiny exists they run.
#define REQUIRE_EMBEDDED_MODEL()                                           \
  do {                                                                     \
    try {                                                                  \
      (void)pipeline::embedded_model_dir();                                \
    } catch (const FileError& e) {                                         \
      GTEST_SKIP() << "the embedded model is not there yet: " << e.what(); \
    }                                                                      \
  } while (0)

TEST(EmbeddedModel, FolderIsComplete) {
  REQUIRE_EMBEDDED_MODEL();
  const fs::path m = model_dir();
  for (const char* f : {"model_index.json", "tokenizer/vocab.json", "tokenizer/merges.txt", "text_encoder/config.json",
                        "unet/config.json", "vae/config.json", "vae-fp16-fix/config.json",
                        "scheduler/scheduler_config.json", "README.md"}) {
    EXPECT_TRUE(fs::exists(m / f)) << (m / f);
  }
  std::uintmax_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(m))
    if (e.is_regular_file()) total += e.file_size();
  EXPECT_LT(total, 30u << 20) << "the shipped model must stay under 30 MB";
}

// Prompts in the caption grammar, with what they ask for.
std::vector<std::pair<std::string, Spec>> semantic_prompts() {
  const char* shapes[] = {"circle", "square", "triangle"};
  std::vector<std::pair<std::string, Spec>> out;
  for (int i = 0; i < 18; ++i) {
    const int fg = (i * 3) % 8;
    const int bg = (fg + 1 + (i * 5) % 7) % 8;
    const std::string shape = shapes[i % 3];
    const std::string fgn = kColours[fg].name, bgn = kColours[bg].name;
    const std::string p = i % 2 == 0 ? "a large " + fgn + " " + shape + " on a " + bgn + " background"
                                     : "a " + bgn + " background with a large " + fgn + " " + shape;
    out.push_back({p, {shape, fg, bg, ""}});
  }
  for (int i = 0; i < 6; ++i) {
    const int a = (i * 3 + 1) % 8, b = (a + 2 + i) % 8;
    const std::string o = i % 2 == 0 ? "horizontal" : "vertical";
    out.push_back(
        {std::string(kColours[a].name) + " and " + kColours[b].name + " " + o + " stripes", {"stripes", a, b, o}});
  }
  return out;
}

// Thresholds set once from the shipped model (its README has the training
// evaluation: 100 diffusers images, foreground and background colour 100%,
// shape 61%). On these 48 images (24 prompts x 2 seeds, large shapes and
// stripes) the engine measured both colours right 98% and the shape right 71%
// (misses: squares drawn with rounded corners, stripes whose direction is
// mixed). The thresholds are the product's targets, 80% and 60%, a margin of
// 18 and 11 points (8 and 5 images) below what was measured.
constexpr double kColourThreshold = 0.80;  // both colours right
constexpr double kShapeThreshold = 0.60;

TEST(EmbeddedModel, DrawsTheRequestedColoursAndShapes) {
  REQUIRE_EMBEDDED_MODEL();
  pipeline::Session session;
  // The inspector's verdict on each of these ordinary pictures: anything but clean is a false alarm.
  struct Verdicts final : pipeline::RunObserver {
    std::vector<std::string> flagged;
    void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
      if (r.inspection.verdict != inspect::Verdict::clean)
        flagged.push_back(img.config.prompt + ": " + r.inspection.summary);
    }
  } verdicts;
  int colour_ok = 0, shape_ok = 0, n = 0;
  for (const std::uint64_t seed : {7, 8}) {
    for (const auto& [prompt, spec] : semantic_prompts()) {
      RunConfig cfg;
      cfg.prompt = prompt;
      cfg.seed = seed;
      cfg.steps = 20;
      const auto images = session.generate(cfg, &verdicts);
      ASSERT_EQ(images.size(), 1u);
      const Verdict v = classify(images[0].image, spec);
      colour_ok += v.fg_ok && v.bg_ok;
      shape_ok += v.shape_ok;
      ++n;
      std::printf("  seed %d %-60s colours %s shape %s\n", static_cast<int>(seed), prompt.c_str(),
                  v.fg_ok && v.bg_ok ? "ok" : "NO", v.shape_ok ? "ok" : "NO");
    }
  }
  const double colour_rate = static_cast<double>(colour_ok) / n, shape_rate = static_cast<double>(shape_ok) / n;
  std::printf("colours right %.0f%%, shapes right %.0f%% of %d prompts\n", 100 * colour_rate, 100 * shape_rate, n);
  EXPECT_GE(colour_rate, kColourThreshold);
  EXPECT_GE(shape_rate, kShapeThreshold);
  std::printf("inspector: %zu of %d clean pictures flagged\n", verdicts.flagged.size(), n);
  for (const auto& f : verdicts.flagged) ADD_FAILURE() << "false alarm: " << f;
}

TEST(EmbeddedModel, MatchesDiffusersFromTheSameLatent) {
  REQUIRE_EMBEDDED_MODEL();
  NANSCOPE_REQUIRE_PYTHON();
  struct Capture final : pipeline::RunObserver {
    std::vector<float> noise;
    Shape shape;
    void on_initial_noise(int, const Shape& s, std::span<const float> v) override {
      noise.assign(v.begin(), v.end());
      shape = s;
    }
  } cap;
  pipeline::Session session;
  RunConfig cfg;
  cfg.prompt = "a large yellow circle on a purple background";
  cfg.seed = 3;
  cfg.steps = 20;
  cfg.set("noise", "torch-cpu");
  const auto images = session.generate(cfg, &cap);
  ASSERT_EQ(images.size(), 1u);
  test::TempDir io_dir;
  io::write_safetensors(io_dir / "in.safetensors", {{"noise", HostTensor::from_f32(cap.shape, cap.noise)}});
  test::run_oracle("pipeline_oracle.py",
                   {"run", model_dir().string(), (io_dir / "in.safetensors").string(),
                    (io_dir / "out.safetensors").string(), cfg.prompt, "", "20", "7.0", "euler", "3"});
  const auto out = io::SafetensorsFile::open(io_dir / "out.safetensors");
  EXPECT_TRUE(test::tensors_close(HostTensor::from_f32(images[0].latent_shape, images[0].latent),
                                  out.read("latent", DType::f32), {1e-6, 1e-3}));
  const HostTensor want = out.read("image", DType::f32);
  const auto& img = images[0].image;
  int worst = 0;
  const int plane = img.width * img.height;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < plane; ++i)
      worst = std::max(worst, std::abs(static_cast<int>(std::nearbyint(want.get(c * plane + i) * 255.0f)) -
                                       img.pixels[static_cast<std::size_t>(i * 3 + c)]));
  EXPECT_LE(worst, 3);
}

TEST(EmbeddedModel, VaeVariantsAgreeInF32AndOnlyVaeOverflowsInF16) {
  REQUIRE_EMBEDDED_MODEL();
  pipeline::Session session;
  RunConfig cfg;
  cfg.prompt = "a large red square on a blue background";
  cfg.steps = 8;
  const auto base = session.generate(cfg);
  ASSERT_EQ(base.size(), 1u);
  const fs::path vae = model_dir() / "vae", fix = model_dir() / "vae-fp16-fix";
  const auto f32_vae = session.redecode(cfg, base[0], vae, DType::f32);
  const auto f32_fix = session.redecode(cfg, base[0], fix, DType::f32);
  int worst = 0;
  for (std::size_t i = 0; i < f32_vae.image.pixels.size(); ++i)
    worst = std::max(worst, std::abs(f32_vae.image.pixels[i] - f32_fix.image.pixels[i]));
  EXPECT_LE(worst, 1);
  const auto f16_vae = session.redecode(cfg, base[0], vae, DType::f16);
  const auto f16_fix = session.redecode(cfg, base[0], fix, DType::f16);
  EXPECT_GT(f16_vae.nonfinite_pixels, 0) << "vae/ must overflow in f16 (report R2)";
  EXPECT_EQ(f16_fix.nonfinite_pixels, 0) << "vae-fp16-fix/ must decode in f16";
}

TEST(EmbeddedModel, ASizeTheModelCannotTakeNamesTheNearestThatFit) {
  REQUIRE_EMBEDDED_MODEL();
  pipeline::Session session;
  RunConfig cfg;
  cfg.steps = 2;
  cfg.width = cfg.height = 520;  // a multiple of 8, but the VAE divides by 4 and the UNet by 4
  try {
    session.generate(cfg);
    FAIL() << "520x520 cannot run on the embedded model";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("520x520"), std::string::npos) << msg;
    EXPECT_NE(msg.find("multiples of 16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("512 or 528"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace nanscope
