// The inspector's detectors. The per-step statistics are reduced where the
// maps live (Backend::map_reduce, backend/map_reduce.hpp: on an OpenCL device
// by kernels/inspect.cl, read back as a few KB); this file turns a reduction
// into the value types the front ends draw (band score, mask, verdict and its
// note). Host data (decoded images, tests) goes through the reference
// reduction of the same struct, so both paths share every detector.

#include "inspect/inspect.hpp"

#include "backend/backend.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nanscope::inspect {

namespace {

constexpr std::string_view kVerdictNames[] = {"clean", "slow-start", "near-limit",    "saturated",
                                              "bands", "non-finite", "device-missing"};

double median_of(std::vector<double>& v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
    m = (m + lower) / 2;
  }
  return m;
}

// Band score of each entry of s (one statistic per line): a line is a band
// when it stands out from the lines k = 1..kBandReach away on BOTH sides in
// the same direction (a local peak or dip, at most 2 * kBandReach - 1 lines
// thick); its height min(|s - s[-k]|, |s - s[+k]|) is divided by the typical
// line-to-line change (1.4826 * median |s[i+1] - s[i]|), at least `floor`.
// Monotone transitions (shape edges, gradients) score 0; the first and last
// max(border, kBandReach) lines are not judged (decoders' padding makes border lines
// differ). NaN entries (lines without finite values) score 0.
std::vector<double> peak_z(const std::vector<double>& s, double floor, int border) {
  const int n = static_cast<int>(s.size());
  std::vector<double> z(s.size(), 0.0);
  std::vector<double> steps;
  for (int i = 0; i + 1 < n; ++i) {
    const double d = s[static_cast<std::size_t>(i + 1)] - s[static_cast<std::size_t>(i)];
    if (std::isfinite(d)) steps.push_back(std::fabs(d));
  }
  if (steps.empty()) return z;
  const double scale = std::max({1.4826 * median_of(steps), floor, 1e-12});
  for (int r = std::max(border, kBandReach); r + std::max(border, kBandReach) < n; ++r) {
    const double v = s[static_cast<std::size_t>(r)];
    double best = 0;
    for (int k = 1; k <= kBandReach; ++k) {
      const double a = v - s[static_cast<std::size_t>(r - k)], b = v - s[static_cast<std::size_t>(r + k)];
      if (std::isfinite(a) && std::isfinite(b) && a * b > 0)
        best = std::max(best, std::min(std::fabs(a), std::fabs(b)));
    }
    z[static_cast<std::size_t>(r)] = best / scale;
  }
  return z;
}

// z over lines of one orientation from their moments (channel major, `lines`
// per channel): max over channels and the two statistics.
std::vector<float> score_lines(const std::vector<float>& mean, const std::vector<float>& sd, std::int64_t channels,
                               std::int64_t lines, double min_deviation, int border) {
  std::vector<float> z_out(static_cast<std::size_t>(lines), 0.0f);
  const double floor = min_deviation / kBandThreshold;
  for (std::int64_t c = 0; c < channels; ++c) {
    for (const auto* stat : {&mean, &sd}) {
      const auto first = stat->begin() + c * lines;
      const std::vector<double> s(first, first + lines);
      const auto z = peak_z(s, floor, border);
      for (std::size_t l = 0; l < z.size(); ++l) z_out[l] = std::max(z_out[l], static_cast<float>(z[l]));
    }
  }
  return z_out;
}

Stats channel_stats(const ChannelReduction& c) {
  Stats s;
  s.count = c.count;
  s.nan = c.nan;
  s.pos_inf = c.pos_inf;
  s.neg_inf = c.neg_inf;
  s.near_limit = c.near_limit;
  if (c.finite > 0) {
    s.min = c.min;
    s.max = c.max;
    s.mean = c.mean;
    s.std = std::sqrt(std::max(0.0, c.m2 / static_cast<double>(c.finite)));
    s.max_abs = std::max(std::fabs(c.min), std::fabs(c.max));
  }
  s.near_limit_share = s.count > 0 ? static_cast<double>(s.near_limit) / static_cast<double>(s.count) : 0;
  return s;
}

NonFiniteMask mask_of(const MapReduction& r) {
  NonFiniteMask m;
  m.rows = r.mask_rows;
  m.cols = r.mask_cols;
  m.share.resize(r.mask_bad.size());
  for (int cy = 0; cy < m.rows; ++cy) {
    const std::int64_t ph = std::min(r.cell_h, r.height - cy * r.cell_h);
    for (int cx = 0; cx < m.cols; ++cx) {
      const std::int64_t pw = std::min(r.cell_w, r.width - cx * r.cell_w);
      const auto i = static_cast<std::size_t>(cy * m.cols + cx);
      const double total = static_cast<double>(r.channels * ph * pw);
      m.share[i] = total > 0 ? static_cast<float>(static_cast<double>(r.mask_bad[i]) / total) : 0.0f;
    }
  }
  return m;
}

BandScore bands_of(const MapReduction& r, double min_deviation, int border) {
  BandScore b;
  b.row_z = score_lines(r.row_mean, r.row_std, r.channels, r.height, min_deviation, border);
  b.col_z = score_lines(r.col_mean, r.col_std, r.channels, r.width, min_deviation, border);
  auto summarise = [](const std::vector<float>& z, double& score, int& worst_i, std::vector<int>& bands) {
    for (std::size_t i = 0; i < z.size(); ++i) {
      if (z[i] > score) {
        score = z[i];
        worst_i = static_cast<int>(i);
      }
      if (z[i] >= kBandThreshold) bands.push_back(static_cast<int>(i));
    }
  };
  summarise(b.row_z, b.row_score, b.worst_row, b.band_rows);
  summarise(b.col_z, b.col_score, b.worst_col, b.band_cols);
  // Many peaking lines are a pattern (stripes, texture), not isolated bands.
  auto pattern = [](const std::vector<int>& lines, std::size_t n) {
    return lines.size() > std::max<std::size_t>(kBandMaxLines, n / 8);
  };
  b.pattern = pattern(b.band_rows, b.row_z.size()) || pattern(b.band_cols, b.col_z.size());
  return b;
}

double near_threshold(double limit) { return limit > 0 ? kNearLimitFraction * limit : 0.0; }

MapReduction host_reduction(std::span<const float> values, std::int64_t channels, std::int64_t height,
                            std::int64_t width, double limit, int mask_cells = kMaskCells) {
  return reduce_map(values.data(), channels, height, width, near_threshold(limit), kOvershoot, mask_cells);
}

}  // namespace

std::string_view verdict_name(Verdict v) { return kVerdictNames[static_cast<std::size_t>(v)]; }

std::optional<Verdict> parse_verdict(std::string_view s) {
  for (std::size_t i = 0; i < std::size(kVerdictNames); ++i)
    if (kVerdictNames[i] == s) return static_cast<Verdict>(i);
  return std::nullopt;
}

Verdict worst(Verdict a, Verdict b) { return static_cast<int>(a) >= static_cast<int>(b) ? a : b; }

void Stats::merge(const Stats& o) {
  const std::int64_t n1 = count - nonfinite(), n2 = o.count - o.nonfinite();
  if (n2 > 0) {
    if (n1 == 0) {
      min = o.min;
      max = o.max;
      mean = o.mean;
      std = o.std;
    } else {
      const double n = static_cast<double>(n1 + n2);
      const double m = (mean * static_cast<double>(n1) + o.mean * static_cast<double>(n2)) / n;
      const double v1 = std * std + (mean - m) * (mean - m), v2 = o.std * o.std + (o.mean - m) * (o.mean - m);
      std = std::sqrt((v1 * static_cast<double>(n1) + v2 * static_cast<double>(n2)) / n);
      mean = m;
      min = std::min(min, o.min);
      max = std::max(max, o.max);
    }
    max_abs = std::max(max_abs, o.max_abs);
  }
  count += o.count;
  nan += o.nan;
  pos_inf += o.pos_inf;
  neg_inf += o.neg_inf;
  near_limit += o.near_limit;
  near_limit_share = count > 0 ? static_cast<double>(near_limit) / static_cast<double>(count) : 0;
}

Stats compute_stats(std::span<const float> values, double limit) {
  Stats s;
  s.count = static_cast<std::int64_t>(values.size());
  const double near = limit > 0 ? kNearLimitFraction * limit : std::numeric_limits<double>::infinity();
  double sum = 0, sq = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  std::int64_t n = 0;
  for (float f : values) {
    if (std::isnan(f)) {
      ++s.nan;
      continue;
    }
    if (std::isinf(f)) {
      ++(f > 0 ? s.pos_inf : s.neg_inf);
      continue;
    }
    const double v = f;
    sum += v;
    sq += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    if (std::fabs(v) >= near) ++s.near_limit;
    ++n;
  }
  if (n > 0) {
    s.min = lo;
    s.max = hi;
    s.mean = sum / static_cast<double>(n);
    s.std = std::sqrt(std::max(0.0, sq / static_cast<double>(n) - s.mean * s.mean));
    s.max_abs = std::max(std::fabs(lo), std::fabs(hi));
  }
  s.near_limit_share = s.count > 0 ? static_cast<double>(s.near_limit) / static_cast<double>(s.count) : 0;
  return s;
}

bool NonFiniteMask::any() const {
  return std::any_of(share.begin(), share.end(), [](float v) { return v > 0; });
}

NonFiniteMask nonfinite_mask(std::span<const float> values, std::int64_t channels, std::int64_t height,
                             std::int64_t width, int max_cells) {
  if (height <= 0 || width <= 0 || channels <= 0) return {};
  return mask_of(host_reduction(values, channels, height, width, 0, max_cells));
}

BandScore band_score(std::span<const float> values, std::int64_t channels, std::int64_t height, std::int64_t width,
                     double min_deviation, int border) {
  return bands_of(host_reduction(values, channels, height, width, 0), min_deviation, border);
}

std::optional<LatentRgbFactors> latent_rgb_factors(std::string_view family) {
  LatentRgbFactors f;
  f.family = std::string(family);
  if (family == "sd1" || family == "sd2") {
    // The SD 1.x/2.x VAE (same latent space); ComfyUI's latent_formats.SD15.
    f.factors = {{0.3512f, 0.2297f, 0.3227f},
                 {0.3250f, 0.4974f, 0.2350f},
                 {-0.2829f, 0.1762f, 0.2721f},
                 {-0.2120f, -0.2616f, -0.7177f}};
    return f;
  }
  if (family == "sdxl") {
    // ComfyUI's latent_formats.SDXL.
    f.factors = {{0.3651f, 0.4232f, 0.4341f},
                 {-0.2533f, -0.0042f, 0.1068f},
                 {0.1076f, 0.1111f, -0.0362f},
                 {-0.3165f, -0.2492f, -0.2188f}};
    f.bias = {0.1084f, -0.0175f, -0.0011f};
    return f;
  }
  if (family == "nanscope-tiny") {
#include "inspect/latent_rgb_tiny.inc"
    return f;
  }
  return std::nullopt;
}

namespace {

Preview preview_of(const PreviewReduction& r, double* overshoot, double* clipped) {
  const auto n = static_cast<double>(r.finite);
  if (overshoot) *overshoot = r.finite ? static_cast<double>(r.over) / n : 0;
  if (clipped) *clipped = r.finite ? static_cast<double>(r.clipped) / n : 0;
  return Preview{r.width, r.height, r.rgb};
}

LatentPreviewArgs preview_args(const Tensor& x, std::int64_t index, const LatentRgbFactors& factors, double sigma) {
  std::vector<float> flat;
  for (const auto& row : factors.factors) flat.insert(flat.end(), row.begin(), row.end());
  return LatentPreviewArgs{x, index, std::move(flat), factors.bias, 1.0 / std::sqrt(1.0 + sigma * sigma), kOvershoot};
}

}  // namespace

Preview latent_preview(std::span<const float> latent, std::int64_t channels, std::int64_t height, std::int64_t width,
                       const LatentRgbFactors& factors, double sigma, double* overshoot, double* clipped) {
  const Tensor none;
  const LatentPreviewArgs a = preview_args(none, 0, factors, sigma);
  return preview_of(reduce_preview(latent.data(), channels, height, width, a), overshoot, clipped);
}

MapStats analyze_reduction(const MapReduction& r, const MapOptions& options) {
  MapStats m;
  m.channels.reserve(r.per_channel.size());
  for (std::size_t c = 0; c < r.per_channel.size(); ++c) {
    m.channels.push_back(channel_stats(r.per_channel[c]));
    if (c == 0) {
      m.all = m.channels.back();
    } else {
      m.all.merge(m.channels.back());
    }
  }
  m.mask = mask_of(r);
  m.bands = bands_of(r, options.band_min_deviation, options.band_border);
  if (options.image_scale) {
    std::int64_t over = 0, clip = 0, n = 0;
    for (const auto& c : r.per_channel) {
      over += c.over;
      clip += c.clipped;
      n += c.finite;
    }
    m.saturation = n ? static_cast<double>(over) / static_cast<double>(n) : 0;
    m.clipped = n ? static_cast<double>(clip) / static_cast<double>(n) : 0;
  }
  if (options.saturation) m.saturation = *options.saturation;

  auto pct = [](double share) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f%%", share * 100.0);
    return std::string(buf);
  };
  if (m.all.nonfinite() > 0) {
    m.verdict = Verdict::non_finite;
    m.note = std::to_string(m.all.nonfinite()) + " of " + std::to_string(m.all.count) + " values are non-finite (NaN " +
             std::to_string(m.all.nan) + ", +Inf " + std::to_string(m.all.pos_inf) + ", -Inf " +
             std::to_string(m.all.neg_inf) + ")";
  } else if (options.band_verdict && m.bands.bands()) {
    m.verdict = Verdict::bands;
    const bool rows = m.bands.row_score >= m.bands.col_score;
    const auto& lines = rows ? m.bands.band_rows : m.bands.band_cols;
    std::string where;
    for (std::size_t i = 0; i < lines.size() && i < 8; ++i) where += (i ? ", " : "") + std::to_string(lines[i]);
    if (lines.size() > 8) where += ", ...";
    char z[32];
    std::snprintf(z, sizeof z, "%.1f", m.bands.score());
    m.note = std::string(rows ? "rows " : "columns ") + where + " stand out from their neighbours (band score " + z +
             ", threshold " + std::to_string(static_cast<int>(kBandThreshold)) + ")";
  } else if (options.saturation_verdict && m.saturation >= kSaturatedShare) {
    m.verdict = Verdict::saturated;
    m.note = pct(m.saturation) + " of the values are beyond +-" + std::to_string(kOvershoot).substr(0, 3) +
             " on the -1..1 image scale (over-saturated)";
  } else if (m.all.near_limit > 0) {
    m.verdict = Verdict::near_limit;
    m.note = std::to_string(m.all.near_limit) + " values are within 10% of the dtype's largest finite value (max |x| " +
             std::to_string(m.all.max_abs) + ")";
  } else {
    m.verdict = Verdict::clean;
    m.note = "clean";
  }
  return m;
}

MapStats analyze_map(std::span<const float> values, std::int64_t channels, std::int64_t height, std::int64_t width,
                     const MapOptions& options) {
  return analyze_reduction(host_reduction(values, channels, height, width, options.limit), options);
}

namespace {

// The step's verdicts from its reductions (both analyze_step forms).
StepStats assemble_step(const MapReduction& latent, const PreviewReduction* preview, const MapReduction& cond,
                        const MapReduction* uncond, double sigma_after) {
  StepStats s;
  s.sigma_after = sigma_after;
  MapOptions lo;
  lo.image_scale = false;
  // The linear preview is only a sketch (the embedded model's fit leaves 0.34
  // rms error), so its overshoot is reported but never decides the verdict:
  // saturation is judged on the decoded image.
  lo.saturation_verdict = false;
  // Latent bands are measured, not judged: on the embedded model's 16x16
  // latents a clean 4-step run can score 8 at its last step; bands are judged
  // on the decoded image, where R0's lines are.
  lo.band_verdict = false;
  lo.band_min_deviation = 0.5 * std::sqrt(1.0 + sigma_after * sigma_after);
  double clipped = 0;
  if (preview) {
    double over = 0;
    s.preview = preview_of(*preview, &over, &clipped);
    lo.saturation = over;
  }
  s.latent = analyze_reduction(latent, lo);
  if (preview) s.latent.clipped = clipped;
  MapOptions no;
  no.image_scale = false;
  no.saturation_verdict = false;
  no.band_verdict = false;
  s.noise_cond = analyze_reduction(cond, no);
  s.verdict = worst(s.latent.verdict, s.noise_cond.verdict);
  if (uncond) {
    s.noise_uncond = analyze_reduction(*uncond, no);
    s.verdict = worst(s.verdict, s.noise_uncond->verdict);
  }
  return s;
}

}  // namespace

StepStats analyze_step(std::span<const float> latent, std::span<const float> noise_cond,
                       std::span<const float> noise_uncond, std::int64_t channels, std::int64_t height,
                       std::int64_t width, double limit, const LatentRgbFactors* factors, double sigma_after) {
  const MapReduction lat = host_reduction(latent, channels, height, width, limit);
  const MapReduction cond = host_reduction(noise_cond, channels, height, width, limit);
  std::optional<MapReduction> uncond;
  if (!noise_uncond.empty()) uncond = host_reduction(noise_uncond, channels, height, width, limit);
  std::optional<PreviewReduction> preview;
  if (factors) {
    const Tensor none;
    preview = reduce_preview(latent.data(), channels, height, width, preview_args(none, 0, *factors, sigma_after));
  }
  return assemble_step(lat, preview ? &*preview : nullptr, cond, uncond ? &*uncond : nullptr, sigma_after);
}

StepStats analyze_step(Backend& be, const Tensor& latent, const Tensor& noise, int cond_index, int uncond_index,
                       double limit, const LatentRgbFactors* factors, double sigma_after, std::size_t* read_back) {
  std::vector<MapReduceArgs> args{{latent, 0, near_threshold(limit), kOvershoot, kMaskCells},
                                  {noise, cond_index, near_threshold(limit), kOvershoot, kMaskCells}};
  if (uncond_index >= 0) args.push_back({noise, uncond_index, near_threshold(limit), kOvershoot, kMaskCells});
  std::optional<LatentPreviewArgs> preview_request;
  if (factors) preview_request.emplace(preview_args(latent, 0, *factors, sigma_after));
  const StepReductions r = be.reduce_step(args, preview_request ? &*preview_request : nullptr);
  const std::vector<MapReduction>& maps = r.maps;
  const MapReduction* uncond = uncond_index >= 0 ? &maps[2] : nullptr;
  const PreviewReduction* preview = r.preview ? &*r.preview : nullptr;
  if (read_back) {
    // The preview comes back as its pixels, each with a byte of counts.
    *read_back = maps[0].bytes() + maps[1].bytes() + (uncond ? uncond->bytes() : 0) +
                 (preview ? preview->rgb.size() / 3 * 4 : 0);
  }
  return assemble_step(maps[0], preview, maps[1], uncond, sigma_after);
}

ImageStats analyze_image(std::span<const float> chw, std::int64_t height, std::int64_t width) {
  ImageStats s;
  const std::int64_t channels = height * width > 0 ? static_cast<std::int64_t>(chw.size()) / (height * width) : 0;
  MapOptions o;
  o.limit = 0;  // the image is compared with its range, not with a dtype's
  o.band_border = kImageBandBorder;
  s.map = analyze_map(chw, channels, height, width, o);
  const std::int64_t plane = height * width;
  for (std::int64_t i = 0; i < plane; ++i) {
    for (std::int64_t c = 0; c < channels; ++c) {
      if (!std::isfinite(chw[static_cast<std::size_t>(c * plane + i)])) {
        ++s.nonfinite_pixels;
        break;
      }
    }
  }
  return s;
}

std::string OpRecord::full_path() const {
  if (component.empty()) return path;
  if (path.empty()) return component;
  return component + "." + path;
}

}  // namespace nanscope::inspect
