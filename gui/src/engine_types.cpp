#include "engine_types.hpp"

#include <algorithm>
#include <cmath>

namespace nanscope::gui {

namespace {

// Linear latent -> RGB factors for 4-channel SD latents (the ones A1111 and
// ComfyUI use for their cheap previews). Other channel counts show channels 0-2.
constexpr float kSdFactors[4][3] = {{0.3512F, 0.2297F, 0.3227F},
                                    {0.3250F, 0.4974F, 0.2350F},
                                    {-0.2829F, 0.1762F, 0.2721F},
                                    {-0.2120F, -0.2616F, -0.7177F}};

std::uint8_t to_byte(float v) {
  if (!std::isfinite(v)) return 0;
  return static_cast<std::uint8_t>(std::clamp((v + 1.0F) * 127.5F, 0.0F, 255.0F));
}

// Without the engine's inspector statistics: derived from the latent values here.
StepView make_step_view_raw(const pipeline::StepReport& report) {
  StepView view;
  view.report = report;
  view.report.latent_values.clear();
  view.report.latent_values.shrink_to_fit();
  const Shape& s = report.latent_shape;
  if (s.size() != 4 || report.latent_values.empty()) return view;
  const auto channels = static_cast<int>(s[1]);
  const auto h = static_cast<int>(s[2]);
  const auto w = static_cast<int>(s[3]);
  const std::size_t plane = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  if (report.latent_values.size() < plane * static_cast<std::size_t>(channels)) return view;
  const float* v = report.latent_values.data();

  view.channel_std.resize(channels);
  view.channel_max_abs.resize(channels);
  for (int c = 0; c < channels; ++c) {
    double sum = 0, sq = 0, max_abs = 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < plane; ++i) {
      const double x = v[static_cast<std::size_t>(c) * plane + i];
      if (!std::isfinite(x)) continue;
      sum += x;
      sq += x * x;
      max_abs = std::max(max_abs, std::fabs(x));
      ++n;
    }
    const double mean = n ? sum / static_cast<double>(n) : 0.0;
    view.channel_std[c] = n ? std::sqrt(std::max(0.0, sq / static_cast<double>(n) - mean * mean)) : 0.0;
    view.channel_max_abs[c] = max_abs;
  }

  view.preview = QImage(w, h, QImage::Format_RGB888);
  view.nonfinite_mask = QImage(w, h, QImage::Format_RGB888);
  for (int y = 0; y < h; ++y) {
    uchar* prow = view.preview.scanLine(y);
    uchar* mrow = view.nonfinite_mask.scanLine(y);
    for (int x = 0; x < w; ++x) {
      const std::size_t i = static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x);
      float rgb[3] = {0, 0, 0};
      bool bad = false;
      for (int c = 0; c < channels; ++c) {
        const float val = v[static_cast<std::size_t>(c) * plane + i];
        if (!std::isfinite(val)) bad = true;
        if (channels == 4) {
          for (int k = 0; k < 3; ++k) rgb[k] += val * kSdFactors[c][k];
        } else if (c < 3) {
          rgb[c] = val;
        }
      }
      if (channels < 3)
        for (int k = channels; k < 3; ++k) rgb[k] = rgb[0];
      for (int k = 0; k < 3; ++k) prow[3 * x + k] = to_byte(rgb[k]);
      if (bad) ++view.nonfinite_pixels;
      mrow[3 * x + 0] = bad ? 230 : 40;
      mrow[3 * x + 1] = bad ? 30 : 40;
      mrow[3 * x + 2] = bad ? 30 : 48;
    }
  }
  return view;
}

}  // namespace

QImage to_qimage(const inspect::Preview& p) {
  if (p.width <= 0 || p.height <= 0 || p.rgb.size() < static_cast<std::size_t>(p.width) * p.height * 3) return {};
  QImage img(p.width, p.height, QImage::Format_RGB888);
  const std::size_t row = static_cast<std::size_t>(p.width) * 3;
  for (int y = 0; y < p.height; ++y)
    std::copy_n(p.rgb.data() + static_cast<std::size_t>(y) * row, row, img.scanLine(y));
  return img;
}

StepView make_step_view(const pipeline::StepReport& report) {
  StepView view = make_step_view_raw(report);
  const inspect::StepStats& st = report.stats;
  view.verdict = st.verdict;
  view.note = QString::fromStdString(st.latent.note);
  view.band_score = st.latent.bands.score();
  if (!st.latent.channels.empty()) {
    view.channel_std.clear();
    view.channel_max_abs.clear();
    for (const auto& c : st.latent.channels) {
      view.channel_std.push_back(c.std);
      view.channel_max_abs.push_back(c.max_abs);
    }
  }
  // The engine's preview uses factors fitted for the model family.
  if (QImage img = to_qimage(st.preview); !img.isNull()) view.preview = img;
  view.decoded = to_qimage(st.decoded);
  // Heatmap over the latent grid: red by the share of non-finite values per
  // mask cell; rows and columns the band detector flagged in amber.
  const auto& mask = st.latent.mask;
  const Shape& s = report.latent_shape;
  if (s.size() == 4 && mask.rows > 0 && mask.cols > 0 &&
      mask.share.size() == static_cast<std::size_t>(mask.rows) * static_cast<std::size_t>(mask.cols)) {
    const int h = static_cast<int>(s[2]), w = static_cast<int>(s[3]);
    QImage heat(w, h, QImage::Format_RGB888);
    std::vector<bool> band_row(static_cast<std::size_t>(h), false), band_col(static_cast<std::size_t>(w), false);
    for (int r : st.latent.bands.band_rows)
      if (r >= 0 && r < h) band_row[static_cast<std::size_t>(r)] = true;
    for (int c : st.latent.bands.band_cols)
      if (c >= 0 && c < w) band_col[static_cast<std::size_t>(c)] = true;
    const int cell_h = (h + mask.rows - 1) / mask.rows, cell_w = (w + mask.cols - 1) / mask.cols;
    for (int y = 0; y < h; ++y) {
      uchar* line = heat.scanLine(y);
      for (int x = 0; x < w; ++x) {
        const float share = mask.at(std::min(y / cell_h, mask.rows - 1), std::min(x / cell_w, mask.cols - 1));
        int r = 40, g = 40, b = 48;
        if (band_row[static_cast<std::size_t>(y)] || band_col[static_cast<std::size_t>(x)]) r = 230, g = 160, b = 20;
        if (share > 0) {
          r = static_cast<int>(120 + 135 * share);
          g = 30;
          b = 30;
        }
        line[3 * x] = static_cast<uchar>(r);
        line[3 * x + 1] = static_cast<uchar>(g);
        line[3 * x + 2] = static_cast<uchar>(b);
      }
    }
    view.nonfinite_mask = heat;
  }
  return view;
}

QImage to_qimage(const io::RgbImage& image) {
  if (image.pixels.empty() || image.width <= 0 || image.height <= 0) return {};
  QImage out(image.width, image.height, QImage::Format_RGB888);
  const std::size_t row = static_cast<std::size_t>(image.width) * 3;
  for (int y = 0; y < image.height; ++y)
    std::copy_n(image.pixels.data() + static_cast<std::size_t>(y) * row, row, out.scanLine(y));
  return out;
}

void register_metatypes() {
  qRegisterMetaType<nanscope::RunConfig>("nanscope::RunConfig");
  qRegisterMetaType<nanscope::DeviceList>("nanscope::DeviceList");
  qRegisterMetaType<StepView>("nanscope::gui::StepView");
  qRegisterMetaType<ImageView>("nanscope::gui::ImageView");
  qRegisterMetaType<KernelStats>("nanscope::gui::KernelStats");
  qRegisterMetaType<RunFinished>("nanscope::gui::RunFinished");
  qRegisterMetaType<AbView>("nanscope::gui::AbView");
  qRegisterMetaType<KernelCacheView>("nanscope::gui::KernelCacheView");
}

}  // namespace nanscope::gui
