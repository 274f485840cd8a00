#include "pipeline/img2img.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "core/error.hpp"

namespace nanscope::pipeline {

namespace fs = std::filesystem;

PartialSchedule img2img_schedule(int steps, double strength, const std::string& strength_key) {
  const int init_timestep = std::min(static_cast<int>(steps * strength), steps);
  const int start = std::max(steps - init_timestep, 0);
  if (start >= steps) {
    throw ConfigError("key \"" + strength_key + "\": " + std::to_string(strength) + " with " + std::to_string(steps) +
                      " steps runs no step (int(steps * strength) = 0); raise it to at least " +
                      std::to_string(1.0 / steps).substr(0, 6) + " or use more steps");
  }
  return {steps, start};
}

PartialSchedule hires_schedule(int steps, double denoise) {
  // A1111: steps = int(requested_steps / min(denoising_strength, 0.999)); t_enc = requested_steps - 1;
  // the k-diffusion samplers then run sigmas[steps - t_enc - 1:], i.e. the last requested_steps steps.
  const int total = static_cast<int>(steps / std::min(denoise, 0.999));
  if (denoise <= 0 || total < steps) {
    throw ConfigError("key \"hires.denoise\": " + std::to_string(denoise) + " must be above 0");
  }
  return {total, total - steps};
}

HiresTarget hires_target(int width, int height, double scale, int resize_x, int resize_y, int f) {
  // modules/processing.py, calculate_target_resolution (Python's // on non-negative ints is integer division).
  HiresTarget t;
  if (resize_x == 0 && resize_y == 0) {
    t.upscale_w = static_cast<int>(width * scale);
    t.upscale_h = static_cast<int>(height * scale);
  } else if (resize_y == 0) {
    t.upscale_w = resize_x;
    t.upscale_h = static_cast<int>(static_cast<std::int64_t>(resize_x) * height / width);
  } else if (resize_x == 0) {
    t.upscale_w = static_cast<int>(static_cast<std::int64_t>(resize_y) * width / height);
    t.upscale_h = resize_y;
  } else {
    const double src_ratio = static_cast<double>(width) / height;
    const double dst_ratio = static_cast<double>(resize_x) / resize_y;
    if (src_ratio < dst_ratio) {
      t.upscale_w = resize_x;
      t.upscale_h = static_cast<int>(static_cast<std::int64_t>(resize_x) * height / width);
    } else {
      t.upscale_w = static_cast<int>(static_cast<std::int64_t>(resize_y) * width / height);
      t.upscale_h = resize_y;
    }
    // Both differences are >= 0: the upscaled size covers the target.
    t.truncate_x = (t.upscale_w - resize_x) / f;
    t.truncate_y = (t.upscale_h - resize_y) / f;
  }
  t.width = (t.upscale_w / f - t.truncate_x) * f;
  t.height = (t.upscale_h / f - t.truncate_y) * f;
  return t;
}

std::vector<float> truncate_latent(std::span<const float> latent, const Shape& shape, int truncate_x, int truncate_y) {
  const std::int64_t c = shape[1], h = shape[2], w = shape[3];
  const std::int64_t y0 = truncate_y / 2, x0 = truncate_x / 2;
  const std::int64_t oh = h - truncate_y, ow = w - truncate_x;
  if (oh <= 0 || ow <= 0 || truncate_x < 0 || truncate_y < 0) {
    throw ConfigError("hires fix: cutting " + std::to_string(truncate_x) + " columns and " +
                      std::to_string(truncate_y) + " rows from a " + std::to_string(w) + "x" + std::to_string(h) +
                      " latent leaves nothing; set hires.width and hires.height closer to the first pass's aspect");
  }
  std::vector<float> out(static_cast<std::size_t>(c * oh * ow));
  for (std::int64_t ch = 0; ch < c; ++ch)
    for (std::int64_t y = 0; y < oh; ++y)
      std::copy_n(latent.data() + (ch * h + y0 + y) * w + x0, ow, out.data() + (ch * oh + y) * ow);
  return out;
}

// ---------------------------------------------------------------- Lanczos (Pillow's Resample.c)

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= std::numbers::pi;
  return std::sin(x) / x;
}

double lanczos(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0; }

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis.
struct Coeffs {
  int ksize = 0;
  std::vector<int> bounds;  // xmin, count per output
  std::vector<std::int32_t> k;
};

Coeffs precompute(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 3.0 * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<std::size_t>(out_size) * 2);
  c.k.assign(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(c.ksize), 0);
  std::vector<double> kk(static_cast<std::size_t>(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      kk[static_cast<std::size_t>(x)] = lanczos((x + xmin - center + 0.5) * ss);
      ww += kk[static_cast<std::size_t>(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      double v = kk[static_cast<std::size_t>(x)];
      if (ww != 0.0) v /= ww;
      const double scaled = v * (1 << kPrecisionBits);
      c.k[static_cast<std::size_t>(xx) * static_cast<std::size_t>(c.ksize) + static_cast<std::size_t>(x)] =
          static_cast<std::int32_t>(v < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    c.bounds[static_cast<std::size_t>(xx) * 2] = xmin;
    c.bounds[static_cast<std::size_t>(xx) * 2 + 1] = xmax;
  }
  return c;
}

std::uint8_t clip8(std::int32_t v) { return static_cast<std::uint8_t>(std::clamp(v >> kPrecisionBits, 0, 255)); }

// One pass along x (horizontal) or y (vertical) of a w x h RGB image.
io::RgbImage resample_axis(const io::RgbImage& in, int out_size, bool horizontal) {
  const Coeffs c = precompute(horizontal ? in.width : in.height, out_size);
  io::RgbImage out;
  out.width = horizontal ? out_size : in.width;
  out.height = horizontal ? in.height : out_size;
  out.pixels.resize(static_cast<std::size_t>(out.width) * static_cast<std::size_t>(out.height) * 3);
  auto at = [&](int x, int y, int ch) {
    return static_cast<std::int32_t>(
        in.pixels[(static_cast<std::size_t>(y) * static_cast<std::size_t>(in.width) + static_cast<std::size_t>(x)) * 3 +
                  static_cast<std::size_t>(ch)]);
  };
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      const int o = horizontal ? x : y;
      const int lo = c.bounds[static_cast<std::size_t>(o) * 2];
      const int count = c.bounds[static_cast<std::size_t>(o) * 2 + 1];
      const std::int32_t* k = &c.k[static_cast<std::size_t>(o) * static_cast<std::size_t>(c.ksize)];
      for (int ch = 0; ch < 3; ++ch) {
        std::int32_t ss = 1 << (kPrecisionBits - 1);
        for (int i = 0; i < count; ++i) ss += (horizontal ? at(lo + i, y, ch) : at(x, lo + i, ch)) * k[i];
        out.pixels[(static_cast<std::size_t>(y) * static_cast<std::size_t>(out.width) + static_cast<std::size_t>(x)) *
                       3 +
                   static_cast<std::size_t>(ch)] = clip8(ss);
      }
    }
  }
  return out;
}

}  // namespace

io::RgbImage resize_lanczos(const io::RgbImage& image, int width, int height) {
  if (width < 1 || height < 1 || image.width < 1 || image.height < 1) {
    throw Error("resize_lanczos: " + std::to_string(image.width) + "x" + std::to_string(image.height) + " -> " +
                std::to_string(width) + "x" + std::to_string(height) + ": sizes must be positive");
  }
  io::RgbImage out = image;
  // Pillow (13, measured against it) runs the horizontal pass first, except when the height shrinks while the
  // width grows: then the vertical one (the shrinking pass first). The order changes the 8-bit intermediate.
  if (height < image.height && width > image.width) {
    out = resample_axis(out, height, false);
    return resample_axis(out, width, true);
  }
  if (width != image.width) out = resample_axis(out, width, true);
  if (height != image.height) out = resample_axis(out, height, false);
  return out;
}

HostTensor rgb_to_tensor(const io::RgbImage& image) {
  const std::int64_t plane = static_cast<std::int64_t>(image.width) * image.height;
  std::vector<float> v(static_cast<std::size_t>(plane * 3));
  for (std::int64_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) {
      // diffusers: np.array(image).astype(np.float32) / 255.0, then 2.0 * image - 1.0 (torch, float32).
      const float x = static_cast<float>(image.pixels[static_cast<std::size_t>(i * 3 + c)]) / 255.0f;
      v[static_cast<std::size_t>(c * plane + i)] = 2.0f * x - 1.0f;
    }
  }
  return HostTensor::from_f32({1, 3, image.height, image.width}, std::move(v));
}

HostTensor load_init_image(const fs::path& path, int width, int height, std::string* note) {
  io::RgbImage image = io::read_png(path).image;
  if (image.width != width || image.height != height) {
    const std::string what = "init_image " + path.string() + " is " + std::to_string(image.width) + "x" +
                             std::to_string(image.height) + "; resized to the run's " + std::to_string(width) + "x" +
                             std::to_string(height) + " with Lanczos (as diffusers' image processor does)";
    if (note) *note = what;
    image = resize_lanczos(image, width, height);
  }
  return rgb_to_tensor(image);
}

std::vector<float> sample_posterior(std::span<const float> moments, std::int64_t channels, std::span<const float> eps,
                                    float scaling, float shift) {
  const std::size_t n = eps.size();
  if (moments.size() != 2 * n || n % static_cast<std::size_t>(channels) != 0) {
    throw Error("sample_posterior: " + std::to_string(moments.size()) + " moments for " + std::to_string(n) +
                " latent values; expected twice as many");
  }
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float mean = moments[i];
    const float logvar = std::clamp(moments[n + i], -30.0f, 20.0f);
    const float stddev = std::exp(0.5f * logvar);
    const float x = mean + stddev * eps[i];
    out[i] = scaling * (x - shift);
  }
  return out;
}

std::vector<float> interpolate_latent(std::span<const float> latent, const Shape& shape, std::int64_t out_h,
                                      std::int64_t out_w, HiresUpscaler mode) {
  if (mode == HiresUpscaler::lanczos) throw ConfigError("interpolate_latent: lanczos resizes images, not latents");
  const std::int64_t c = shape[1], h = shape[2], w = shape[3];
  std::vector<float> out(static_cast<std::size_t>(c * out_h * out_w));
  // torch's nearest_idx / nearest_exact_idx and compute_source_index_and_lambda, scale = in / out in float.
  auto nearest = [mode](std::int64_t o, std::int64_t in, std::int64_t outn) -> std::int64_t {
    const float scale = static_cast<float>(in) / static_cast<float>(outn);
    if (mode == HiresUpscaler::latent_nearest) {
      if (outn == in) return o;
      if (outn == 2 * in) return o >> 1;
      return std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
    }
    return std::min(static_cast<std::int64_t>(std::floor((static_cast<float>(o) + 0.5f) * scale)), in - 1);
  };
  struct Lerp {
    std::int64_t i0, i1;
    float l0, l1;
  };
  auto lerp = [](std::int64_t o, std::int64_t in, std::int64_t outn) -> Lerp {
    if (in == outn) return {o, o, 1.0f, 0.0f};
    const float scale = static_cast<float>(in) / static_cast<float>(outn);
    const float real = std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
    const auto i0 = static_cast<std::int64_t>(real);
    const float l1 = std::min(std::max(real - static_cast<float>(i0), 0.0f), 1.0f);
    return {i0, i0 + (i0 < in - 1 ? 1 : 0), 1.0f - l1, l1};
  };
  for (std::int64_t ch = 0; ch < c; ++ch) {
    const float* src = latent.data() + ch * h * w;
    float* dst = out.data() + ch * out_h * out_w;
    for (std::int64_t y = 0; y < out_h; ++y) {
      for (std::int64_t x = 0; x < out_w; ++x) {
        float v = 0;
        if (mode == HiresUpscaler::latent) {
          const Lerp ly = lerp(y, h, out_h), lx = lerp(x, w, out_w);
          const float t0 = src[ly.i0 * w + lx.i0] * lx.l0 + src[ly.i0 * w + lx.i1] * lx.l1;
          const float t1 = src[ly.i1 * w + lx.i0] * lx.l0 + src[ly.i1 * w + lx.i1] * lx.l1;
          v = t0 * ly.l0 + t1 * ly.l1;
        } else {
          v = src[nearest(y, h, out_h) * w + nearest(x, w, out_w)];
        }
        dst[y * out_w + x] = v;
      }
    }
  }
  return out;
}

}  // namespace nanscope::pipeline
