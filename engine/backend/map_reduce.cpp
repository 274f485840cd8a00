#include "backend/map_reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nanscope {

namespace {

// Mean and std of the finite values of one line (two passes, double).
void line_moments(const float* base, std::int64_t n, std::int64_t stride, float& mean_out, float& std_out) {
  double sum = 0;
  std::int64_t k = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = base[i * stride];
    if (!std::isfinite(v)) continue;
    sum += v;
    ++k;
  }
  if (k == 0) {
    mean_out = std_out = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const double mean = sum / static_cast<double>(k);
  double m2 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = base[i * stride];
    if (std::isfinite(v)) m2 += (v - mean) * (v - mean);
  }
  mean_out = static_cast<float>(mean);
  std_out = static_cast<float>(std::sqrt(m2 / static_cast<double>(k)));
}

}  // namespace

bool MapReduction::any_nonfinite() const {
  for (const auto& c : per_channel)
    if (c.nan + c.pos_inf + c.neg_inf > 0) return true;
  return false;
}

std::size_t MapReduction::bytes() const {
  return sizeof(float) * (row_mean.size() + row_std.size() + col_mean.size() + col_std.size()) +
         per_channel.size() * (4 * sizeof(float) + 8 * sizeof(std::uint32_t)) +
         (any_nonfinite() ? mask_bad.size() * sizeof(std::uint32_t) : 0);
}

void mask_grid(std::int64_t height, std::int64_t width, int cells, MapReduction& r) {
  cells = std::max(cells, 1);
  r.cell_h = std::max<std::int64_t>(1, (height + cells - 1) / cells);
  r.cell_w = std::max<std::int64_t>(1, (width + cells - 1) / cells);
  r.mask_rows = height > 0 ? static_cast<int>((height + r.cell_h - 1) / r.cell_h) : 0;
  r.mask_cols = width > 0 ? static_cast<int>((width + r.cell_w - 1) / r.cell_w) : 0;
}

MapReduction reduce_map(const float* values, std::int64_t channels, std::int64_t height, std::int64_t width,
                        double near_limit, double overshoot, int mask_cells) {
  MapReduction r;
  r.channels = channels;
  r.height = height;
  r.width = width;
  mask_grid(height, width, mask_cells, r);
  r.mask_bad.assign(static_cast<std::size_t>(r.mask_rows * r.mask_cols), 0);
  r.row_mean.resize(static_cast<std::size_t>(channels * height));
  r.row_std.resize(r.row_mean.size());
  r.col_mean.resize(static_cast<std::size_t>(channels * width));
  r.col_std.resize(r.col_mean.size());
  const double near = near_limit > 0 ? near_limit : std::numeric_limits<double>::infinity();
  const std::int64_t plane = height * width;
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* p = values + c * plane;
    ChannelReduction ch;
    ch.count = plane;
    double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::int64_t y = 0; y < height; ++y) {
      for (std::int64_t x = 0; x < width; ++x) {
        const float f = p[y * width + x];
        if (std::isnan(f) || std::isinf(f)) {
          ++(std::isnan(f) ? ch.nan : (f > 0 ? ch.pos_inf : ch.neg_inf));
          ++r.mask_bad[static_cast<std::size_t>((y / r.cell_h) * r.mask_cols + x / r.cell_w)];
          continue;
        }
        const double v = f, a = std::fabs(v);
        ++ch.finite;
        sum += v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        if (a >= near) ++ch.near_limit;
        if (a > overshoot) ++ch.over;
        if (a > 1.0) ++ch.clipped;
      }
    }
    if (ch.finite > 0) {
      ch.mean = sum / static_cast<double>(ch.finite);
      for (std::int64_t i = 0; i < plane; ++i) {
        const float f = p[i];
        if (std::isfinite(f)) ch.m2 += (f - ch.mean) * (f - ch.mean);
      }
      ch.min = lo;
      ch.max = hi;
    }
    r.per_channel.push_back(ch);
    for (std::int64_t y = 0; y < height; ++y) {
      const auto i = static_cast<std::size_t>(c * height + y);
      line_moments(p + y * width, width, 1, r.row_mean[i], r.row_std[i]);
    }
    for (std::int64_t x = 0; x < width; ++x) {
      const auto i = static_cast<std::size_t>(c * width + x);
      line_moments(p + x, height, width, r.col_mean[i], r.col_std[i]);
    }
  }
  return r;
}

PreviewReduction reduce_preview(const float* latent, std::int64_t channels, std::int64_t height, std::int64_t width,
                                const LatentPreviewArgs& args) {
  PreviewReduction p;
  p.width = static_cast<int>(width);
  p.height = static_cast<int>(height);
  const std::int64_t plane = width * height;
  p.rgb.assign(static_cast<std::size_t>(plane * 3), 0);
  const std::int64_t used = std::min<std::int64_t>(channels, static_cast<std::int64_t>(args.factors.size() / 3));
  for (std::int64_t i = 0; i < plane; ++i) {
    for (int k = 0; k < 3; ++k) {
      double v = args.bias[static_cast<std::size_t>(k)];
      for (std::int64_t c = 0; c < used; ++c)
        v +=
            static_cast<double>(args.factors[static_cast<std::size_t>(c * 3 + k)]) * latent[c * plane + i] * args.scale;
      std::uint8_t byte = 0;
      if (std::isfinite(v)) {
        ++p.finite;
        if (std::fabs(v) > args.overshoot) ++p.over;
        if (std::fabs(v) > 1.0) ++p.clipped;
        byte = static_cast<std::uint8_t>(std::lround(std::clamp((v + 1.0) / 2.0, 0.0, 1.0) * 255.0));
      }
      p.rgb[static_cast<std::size_t>(i * 3 + k)] = byte;
    }
  }
  return p;
}

}  // namespace nanscope
