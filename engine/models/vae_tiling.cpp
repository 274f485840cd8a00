#include "models/vae_tiling.hpp"

#include <algorithm>
#include <functional>

#include "core/error.hpp"
#include "core/log.hpp"
#include "ops/ops.hpp"

namespace nanscope::models {

namespace {

// The weight of output row (or column) i of a tile n long whose neighbours
// overlap it by `ramp` outputs before (lo) and after (hi): rising linearly
// from the tile's edge across the overlap, 1 elsewhere; sides at the image's
// edge keep full weight.
double feather(std::int64_t i, std::int64_t n, double ramp, bool lo, bool hi) {
  double w = 1.0;
  if (ramp <= 0) return w;
  if (lo) w = std::min(w, (static_cast<double>(i) + 0.5) / ramp);
  if (hi) w = std::min(w, (static_cast<double>(n - i) - 0.5) / ramp);
  return w;
}

// Runs `fn` on each tile of x (NCHW) and blends the outputs, whose sides are
// `num / den` times the input's.
Tensor run_tiled(const OpContext& ctx, const Tensor& x, std::int64_t tile, std::int64_t overlap, std::int64_t num,
                 std::int64_t den, const char* what, const std::function<Tensor(const Tensor&)>& fn) {
  const std::int64_t h = x.dim(2), w = x.dim(3);
  const auto ys = tile_starts(h, tile, overlap), xs = tile_starts(w, tile, overlap);
  if (ys.size() == 1 && xs.size() == 1) return fn(x);
  Backend& be = ctx.be();
  const std::int64_t oh = h * num / den, ow = w * num / den;
  std::vector<double> acc, weight(static_cast<std::size_t>(oh * ow), 0.0);
  std::int64_t batch = 0, channels = 0;
  const double ramp = static_cast<double>(overlap * num / den);
  log::debug("{}: {}x{} tiles of {} (overlap {}) over [{}x{}]", what, ys.size(), xs.size(), tile, overlap, h, w);
  for (const std::int64_t y0 : ys) {
    for (const std::int64_t x0 : xs) {
      const std::int64_t th = std::min(tile, h - y0), tw = std::min(tile, w - x0);
      const Tensor part = ops::slice(ctx, ops::slice(ctx, x, 2, y0, y0 + th), 3, x0, x0 + tw);
      const Tensor out = fn(part);
      const HostTensor host = be.download(out).converted(DType::f32);
      const std::vector<float> v = host.to_f32();
      if (acc.empty()) {
        batch = out.dim(0);
        channels = out.dim(1);
        acc.assign(static_cast<std::size_t>(batch * channels * oh * ow), 0.0);
      }
      const std::int64_t ph = out.dim(2), pw = out.dim(3);
      const std::int64_t oy = y0 * num / den, ox = x0 * num / den;
      for (std::int64_t r = 0; r < ph; ++r) {
        const double wy = feather(r, ph, ramp, y0 > 0, y0 + th < h);
        for (std::int64_t c = 0; c < pw; ++c) {
          const double wt = wy * feather(c, pw, ramp, x0 > 0, x0 + tw < w);
          const std::size_t pix = static_cast<std::size_t>((oy + r) * ow + ox + c);
          weight[pix] += wt;
          for (std::int64_t b = 0; b < batch; ++b) {
            for (std::int64_t ch = 0; ch < channels; ++ch) {
              const std::size_t plane = static_cast<std::size_t>((b * channels + ch) * oh * ow);
              acc[plane + pix] += wt * v[static_cast<std::size_t>(((b * channels + ch) * ph + r) * pw + c)];
            }
          }
        }
      }
    }
  }
  std::vector<float> blended(acc.size());
  const std::size_t plane = static_cast<std::size_t>(oh * ow);
  for (std::size_t i = 0; i < acc.size(); ++i) blended[i] = static_cast<float>(acc[i] / weight[i % plane]);
  return be.upload(HostTensor::from_f32({batch, channels, oh, ow}, blended, x.dtype()));
}

}  // namespace

VaeTiles vae_tiles(int tile_px, int overlap_px, std::int64_t factor) {
  VaeTiles t;
  t.tile = std::max<std::int64_t>(1, tile_px / factor);
  t.overlap = std::clamp<std::int64_t>(overlap_px / factor, 0, (t.tile - 1) / 2);
  return t;
}

std::vector<std::int64_t> tile_starts(std::int64_t size, std::int64_t tile, std::int64_t overlap) {
  if (tile <= 0 || tile >= size) return {0};
  const std::int64_t step = std::max<std::int64_t>(1, tile - overlap);
  std::vector<std::int64_t> out;
  for (std::int64_t s = 0;; s += step) {
    if (s + tile >= size) {
      out.push_back(size - tile);
      break;
    }
    out.push_back(s);
  }
  return out;
}

Tensor decode_tiled(const Vae& vae, const OpContext& ctx, const Tensor& latents, VaeTiles tiles) {
  if (!tiles.enabled() || latents.rank() != 4) return vae.decode(ctx, latents);
  const std::int64_t f = vae.config().downscale();
  return run_tiled(ctx, latents, tiles.tile, tiles.overlap, f, 1, "VAE decode",
                   [&](const Tensor& t) { return vae.decode(ctx, t); });
}

Tensor encode_tiled(const Vae& vae, const OpContext& ctx, const Tensor& image, VaeTiles tiles) {
  if (!tiles.enabled() || image.rank() != 4) return vae.encode(ctx, image);
  const std::int64_t f = vae.config().downscale();
  if (image.dim(2) % f != 0 || image.dim(3) % f != 0) {
    throw OpError(op_message(ctx, "VAE_ENCODE", {{"image", &image}},
                             "tiled encode needs sides that are multiples of " + std::to_string(f)));
  }
  return run_tiled(ctx, image, tiles.tile * f, tiles.overlap * f, 1, f, "VAE encode",
                   [&](const Tensor& t) { return vae.encode(ctx, t); });
}

}  // namespace nanscope::models
