#include "inspector_panel.hpp"

#include <QComboBox>
#include <QFontMetricsF>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSlider>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLegend>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <cmath>

namespace nanscope::gui {

using namespace QtCharts;

namespace {

const QColor kChannelColors[] = {QColor("#1f77b4"), QColor("#ff7f0e"), QColor("#2ca02c"), QColor("#d62728"),
                                 QColor("#9467bd"), QColor("#8c564b"), QColor("#e377c2"), QColor("#7f7f7f")};

QLineSeries* series(const QString& name, const QColor& color, Qt::PenStyle style = Qt::SolidLine) {
  auto* s = new QLineSeries;
  s->setName(name);
  QPen pen(color);
  pen.setWidthF(2.0);
  pen.setStyle(style);
  s->setPen(pen);
  s->setPointsVisible(true);
  return s;
}

QPixmap scaled(const QImage& img, int box) {
  if (img.isNull()) return {};
  const int factor = std::max(1, box / std::max(img.width(), img.height()));
  return QPixmap::fromImage(
      img.scaled(img.width() * factor, img.height() * factor, Qt::KeepAspectRatio, Qt::FastTransformation));
}

QString count(std::int64_t n) { return QLocale().toString(static_cast<qlonglong>(n)); }

// A linear axis from 0 over [0, hi] in whole-number labels, a step of 1, 2 or 5 times a power of ten, and as many
// labels as a plot of this height holds 1.6 text lines apart: Qt's five fixed labels overlapped in the short
// charts of a 1400x900 window and were drawn as "...". Refitted whenever the plot's size changes.
void fit_whole_axis(QValueAxis* axis, double hi, qreal plot_height) {
  hi = std::isfinite(hi) ? std::clamp(hi, 1.0, 1e12) : 1e12;
  axis->setProperty("wholeAxisHi", hi);
  const qreal line = QFontMetricsF(axis->labelsFont()).height();
  const int most = std::clamp(static_cast<int>(plot_height / (1.6 * line)) + 1, 2, 6);
  constexpr double kMantissas[] = {1, 2, 5};
  double step = 1;
  for (int i = 1; std::ceil(hi / step) + 1 > most; ++i) step = kMantissas[i % 3] * std::pow(10.0, i / 3);
  const double n = std::ceil(hi / step);
  axis->setRange(0, n * step);
  axis->setTickCount(static_cast<int>(n) + 1);
}

void keep_whole_axis_fitted(QChart* chart, QValueAxis* axis) {
  QObject::connect(chart, &QChart::plotAreaChanged, axis, [axis](const QRectF& plot) {
    fit_whole_axis(axis, axis->property("wholeAxisHi").toDouble(), plot.height());
  });
}

}  // namespace

QChartView* InspectorPanel::make_chart(const QString& title, QChart*& chart) {
  chart = new QChart;
  chart->setTitle(title);
  QFont f = chart->titleFont();
  f.setBold(true);
  chart->setTitleFont(f);
  // Beside the plot: the charts are wider than tall, and a legend below took the height the plot needed (in a
  // 1400x900 window the legend was cut off).
  chart->legend()->setAlignment(Qt::AlignRight);
  QFont small = chart->legend()->font();
  small.setPointSizeF(small.pointSizeF() * 0.9);
  chart->legend()->setFont(small);
  chart->setMargins(QMargins(4, 2, 4, 2));
  chart->setBackgroundRoundness(0);
  auto* view = new QChartView(chart);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(170);
  view->setMinimumWidth(260);
  return view;
}

InspectorPanel::InspectorPanel(QWidget* parent)
    : QWidget(parent),
      verdict_(new QLabel),
      apply_fix_(new QPushButton),
      image_(new QComboBox),
      scrubber_(new QSlider(Qt::Horizontal)),
      step_label_(new QLabel),
      preview_(new QLabel),
      preview_caption_(new QLabel),
      mask_(new QLabel) {
  setObjectName("inspectorPanel");
  verdict_->setObjectName("verdict");
  verdict_->setWordWrap(true);
  verdict_->setTextFormat(Qt::RichText);
  verdict_->setMinimumHeight(fontMetrics().lineSpacing() * 2 + 8);
  verdict_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  verdict_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  image_->setVisible(false);
  connect(image_, qOverload<int>(&QComboBox::activated), this, [this](int i) { show_image(i); });

  auto* max_view = make_chart(tr("Largest |value| (log scale)"), max_chart_);
  max_latent_ = series(tr("latent"), QColor("#1f77b4"));
  max_cond_ = series(tr("UNet +"), QColor("#2ca02c"), Qt::DashLine);
  max_uncond_ = series(tr("UNet -"), QColor("#ff7f0e"), Qt::DotLine);
  max_x_ = new QValueAxis;
  max_y_ = new QLogValueAxis;
  max_y_->setLabelFormat("%.2g");
  max_y_->setBase(10);
  max_chart_->addAxis(max_x_, Qt::AlignBottom);
  max_chart_->addAxis(max_y_, Qt::AlignLeft);
  for (auto* s : {max_latent_, max_cond_, max_uncond_}) {
    max_chart_->addSeries(s);
    s->attachAxis(max_x_);
    s->attachAxis(max_y_);
  }

  auto* nf_view = make_chart(tr("Non-finite values (NaN, Inf)"), nonfinite_chart_);
  nf_latent_ = series(tr("latent"), QColor("#d62728"));
  nf_cond_ = series(tr("UNet +"), QColor("#2ca02c"), Qt::DashLine);
  nf_uncond_ = series(tr("UNet -"), QColor("#ff7f0e"), Qt::DotLine);
  nf_x_ = new QValueAxis;
  nf_y_ = new QValueAxis;
  nf_y_->setLabelFormat("%d");
  nonfinite_chart_->addAxis(nf_x_, Qt::AlignBottom);
  nonfinite_chart_->addAxis(nf_y_, Qt::AlignLeft);
  keep_whole_axis_fitted(nonfinite_chart_, nf_y_);
  for (auto* s : {nf_latent_, nf_cond_, nf_uncond_}) {
    nonfinite_chart_->addSeries(s);
    s->attachAxis(nf_x_);
    s->attachAxis(nf_y_);
  }

  // Log scale: the first steps' std is the noise level (4096 on zero-terminal-SNR models), the last ~1.
  auto* std_view = make_chart(tr("Std per latent channel (log scale)"), std_chart_);
  std_x_ = new QValueAxis;
  std_y_ = new QLogValueAxis;
  std_y_->setLabelFormat("%.2g");
  std_y_->setBase(10);
  std_chart_->addAxis(std_x_, Qt::AlignBottom);
  std_chart_->addAxis(std_y_, Qt::AlignLeft);

  auto* band_view = make_chart(tr("Band score (rows, columns)"), band_chart_);
  band_latent_ = series(tr("latent"), QColor("#8e44ad"));
  band_threshold_ = series(tr("threshold"), QColor("#7f8c8d"), Qt::DashLine);
  band_threshold_->setPointsVisible(false);
  band_x_ = new QValueAxis;
  band_y_ = new QValueAxis;
  band_y_->setLabelFormat("%.0f");
  band_chart_->addAxis(band_x_, Qt::AlignBottom);
  band_chart_->addAxis(band_y_, Qt::AlignLeft);
  keep_whole_axis_fitted(band_chart_, band_y_);
  for (auto* s : {band_latent_, band_threshold_}) {
    band_chart_->addSeries(s);
    s->attachAxis(band_x_);
    s->attachAxis(band_y_);
  }
  band_view->setToolTip(
      tr("Largest robust z-score of a latent row or column against its neighbours (report R0's "
         "corrupted lines score far above the threshold)"));
  for (auto* axis : {max_x_, nf_x_, std_x_, band_x_}) {
    axis->setLabelFormat("%d");  // steps, counted from 1
  }

  scrubber_->setObjectName("stepScrubber");
  scrubber_->setEnabled(false);
  scrubber_->setToolTip(tr("Pick a step to see its latent preview and non-finite mask"));
  connect(scrubber_, &QSlider::valueChanged, this, &InspectorPanel::show_step);
  step_label_->setWordWrap(true);
  step_label_->setTextFormat(Qt::RichText);
  step_label_->setMinimumHeight(fontMetrics().lineSpacing() * 4);
  step_label_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  for (QLabel* l : {preview_, mask_}) {
    l->setAlignment(Qt::AlignCenter);
    l->setFixedSize(180, 180);
    l->setFrameShape(QFrame::StyledPanel);
  }
  preview_->setObjectName("latentPreview");
  mask_->setObjectName("nonfiniteMask");
  preview_->setToolTip(tr("The latent after this step, through linear latent-to-RGB factors"));
  mask_->setToolTip(tr("Latent positions where any channel is NaN or Inf (red)"));

  // Below the charts: the step's latent preview and mask, and the scrubber with the step's numbers.
  auto* images = new QGridLayout;
  preview_caption_->setText(tr("<b>Latent preview</b>"));
  preview_caption_->setObjectName("previewCaption");
  images->addWidget(preview_caption_, 0, 0, Qt::AlignHCenter);
  images->addWidget(new QLabel(tr("<b>Non-finite mask and bands</b>")), 0, 1, Qt::AlignHCenter);
  images->addWidget(preview_, 1, 0);
  images->addWidget(mask_, 1, 1);
  auto* step_column = new QVBoxLayout;
  step_column->addWidget(image_);
  step_column->addWidget(scrubber_);
  step_column->addWidget(step_label_);
  step_column->addStretch();
  auto* side = new QWidget;
  auto* side_layout = new QHBoxLayout(side);
  side_layout->setContentsMargins(0, 0, 0, 0);
  side_layout->addLayout(images);
  side_layout->addLayout(step_column, 1);

  auto* charts = new QWidget;
  auto* grid = new QGridLayout(charts);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(4);
  grid->addWidget(max_view, 0, 0);
  grid->addWidget(nf_view, 0, 1);
  grid->addWidget(std_view, 1, 0);
  grid->addWidget(band_view, 1, 1);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(charts);
  split->addWidget(side);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 0);
  split->setChildrenCollapsible(false);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addWidget(verdict_);
  apply_fix_->setObjectName("applyFix");
  apply_fix_->setVisible(false);
  connect(apply_fix_, &QPushButton::clicked, this, [this] {
    const QStringList sets = offered_fix();
    if (sets.isEmpty()) return;
    emit applyFix(sets);
    fix_applied_ = true;
    update_verdict();
  });
  auto* fix_row = new QHBoxLayout;
  fix_row->addWidget(apply_fix_);
  fix_row->addStretch(1);
  layout->addLayout(fix_row);
  // The charts and the step's images scroll where the window is too short for them; the verdict above always shows
  // whole. (Squeezed, the splitter got less than its minimum and its rows overlapped: the lower charts hid the
  // upper ones' step labels in a 1400x900 window.)
  auto* scroll = new QScrollArea;
  scroll->setObjectName("inspectorScroll");
  scroll->setWidget(split);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setMinimumHeight(fontMetrics().lineSpacing() * 6);
  layout->addWidget(scroll, 1);
  clear(1, 20);
  verdict_->setText(tr("Press <b>Run</b>: every step's statistics appear here as the sampler produces them."));
}

void InspectorPanel::clear(int images, int steps) {
  steps_ = std::max(1, steps);
  images_ = QVector<ImageSteps>(std::max(1, images));
  failure_.clear();
  failure_fix_.clear();
  note_.clear();
  run_verdict_.clear();
  run_summary_.clear();
  shown_ = 0;
  image_->clear();
  for (int i = 0; i < images_.size(); ++i) image_->addItem(tr("Image %1").arg(i + 1));
  image_->setVisible(images_.size() > 1);
  rebuild_series();
  show_step(-1);
  fix_applied_ = false;
  apply_fix_->setVisible(false);
  verdict_->setText(tr("Starting..."));
}

void InspectorPanel::rebuild_series() {
  for (auto* s : {max_latent_, max_cond_, max_uncond_, nf_latent_, nf_cond_, nf_uncond_, band_latent_, band_threshold_})
    s->clear();
  band_hi_ = inspect::kBandThreshold * 1.5;
  fit_whole_axis(band_y_, band_hi_, band_chart_->plotArea().height());
  band_threshold_->append(1, inspect::kBandThreshold);
  band_threshold_->append(std::max(2, steps_), inspect::kBandThreshold);
  for (auto* s : std_series_) {
    std_chart_->removeSeries(s);
    delete s;
  }
  std_series_.clear();
  max_lo_ = 1e30;
  max_hi_ = 0;
  nf_hi_ = 1;
  std_lo_ = 1e30;
  std_hi_ = 0;
  for (auto* axis : {max_x_, nf_x_, std_x_, band_x_}) {
    axis->setRange(1, std::max(2, steps_));
    // Whole steps, at most about six labels.
    axis->setTickType(QValueAxis::TicksDynamic);
    axis->setTickAnchor(1);
    axis->setTickInterval(std::max(1, (steps_ + 4) / 5));
  }
  max_y_->setRange(0.1, 10);
  fit_whole_axis(nf_y_, 4, nonfinite_chart_->plotArea().height());
  std_y_->setRange(0.1, 10);
  const auto& steps = images_[shown_].steps;
  for (int i = 0; i < steps.size(); ++i) append_points(steps[i], i + 1);
  scrubber_->setRange(0, std::max(0, static_cast<int>(steps.size()) - 1));
  scrubber_->setEnabled(!steps.isEmpty());
}

// A log axis over whole decades around [lo, hi] (at least one decade).
static void set_decades(QLogValueAxis* axis, double lo, double hi) {
  const double a = std::pow(10.0, std::floor(std::log10(lo)));
  const double b = std::pow(10.0, std::ceil(std::log10(hi * 1.01)));
  axis->setRange(a, std::max(b, a * 10));
}

void InspectorPanel::append_points(const StepView& s, int position) {
  const auto& r = s.report;
  if (r.latent.count == 0) return;  // no statistics at this step (inspect.stats_every): nothing to plot
  const double x = position;
  auto log_point = [&](QLineSeries* series, const pipeline::TensorSummary& t) {
    if (t.count == 0 || t.nonfinite() == t.count) return;  // nothing finite to plot
    const double v = std::max(t.max_abs, 1e-6);
    series->append(x, v);
    max_lo_ = std::min(max_lo_, v);
    max_hi_ = std::max(max_hi_, v);
  };
  log_point(max_latent_, r.latent);
  log_point(max_cond_, r.noise_cond);
  log_point(max_uncond_, r.noise_uncond);
  if (max_hi_ > 0) set_decades(max_y_, max_lo_, max_hi_);
  nf_latent_->append(x, static_cast<double>(r.latent.nonfinite()));
  nf_cond_->append(x, static_cast<double>(r.noise_cond.nonfinite()));
  if (r.noise_uncond.count > 0) nf_uncond_->append(x, static_cast<double>(r.noise_uncond.nonfinite()));
  nf_hi_ = std::max({nf_hi_, static_cast<double>(r.latent.nonfinite()), static_cast<double>(r.noise_cond.nonfinite()),
                     static_cast<double>(r.noise_uncond.nonfinite())});
  // Whole counts: never a 0..1 axis with repeated labels.
  fit_whole_axis(nf_y_, std::max(4.0, nf_hi_ * 1.1), nonfinite_chart_->plotArea().height());

  band_latent_->append(x, s.band_score);
  if (s.band_score > band_hi_) {
    band_hi_ = s.band_score * 1.1;
    fit_whole_axis(band_y_, band_hi_, band_chart_->plotArea().height());
  }

  while (std_series_.size() < s.channel_std.size()) {
    const int c = static_cast<int>(std_series_.size());
    auto* series_c = series(tr("ch %1").arg(c), kChannelColors[c % 8]);
    std_chart_->addSeries(series_c);
    series_c->attachAxis(std_x_);
    series_c->attachAxis(std_y_);
    std_series_.push_back(series_c);
  }
  const bool any_finite = r.latent.count > r.latent.nonfinite();
  for (int c = 0; any_finite && c < s.channel_std.size(); ++c) {  // nothing finite: no spread to plot
    const double v = std::max(s.channel_std[c], 1e-6);
    std_series_[c]->append(x, v);
    std_lo_ = std::min(std_lo_, v);
    std_hi_ = std::max(std_hi_, v);
  }
  if (std_hi_ > 0) set_decades(std_y_, std_lo_, std_hi_);
}

void InspectorPanel::add_step(const StepView& s) {
  const int img = s.report.image;
  if (img < 0) return;
  if (img >= images_.size()) {
    images_.resize(img + 1);
    while (image_->count() < images_.size()) image_->addItem(tr("Image %1").arg(image_->count() + 1));
    image_->setVisible(true);
  }
  // A hires run's axis holds both passes (the run's start set it); a single pass is as long as its steps.
  const int position = images_[img].steps.size() + 1;
  const int wanted = s.report.passes > 1 ? std::max(steps_, position) : s.report.steps;
  if (wanted > 0 && wanted != steps_) {
    steps_ = wanted;
    rebuild_series();
  }
  images_[img].steps.push_back(s);
  if (img != shown_) {
    // Follow the image being sampled.
    shown_ = img;
    image_->setCurrentIndex(img);
    rebuild_series();
  } else {
    append_points(s, position);
    const bool at_end = scrubber_->value() == scrubber_->maximum();
    scrubber_->setRange(0, images_[img].steps.size() - 1);
    scrubber_->setEnabled(true);
    if (at_end) scrubber_->setValue(scrubber_->maximum());
  }
  if (scrubber_->value() == scrubber_->maximum()) show_step(scrubber_->value());
  update_verdict();
}

void InspectorPanel::add_image(const ImageView& v) {
  const int img = v.report.image;
  if (img < 0) return;
  if (img >= images_.size()) images_.resize(img + 1);
  images_[img].has_report = true;
  images_[img].report = v.report;
  images_[img].nonfinite_pixels = v.image.nonfinite_pixels;
  update_verdict();
}

void InspectorPanel::set_run_verdict(const QString& verdict, const QString& summary) {
  run_verdict_ = verdict;
  run_summary_ = summary;
  update_verdict();
}

void InspectorPanel::set_note(const QString& note) {
  note_ = note;
  update_verdict();
}

void InspectorPanel::set_failure(const QString& error, const QStringList& fix) {
  failure_ = error;
  failure_fix_ = fix;
  update_verdict();
}

void InspectorPanel::show_image(int image) {
  if (image < 0 || image >= images_.size()) return;
  shown_ = image;
  rebuild_series();
  scrubber_->setValue(scrubber_->maximum());
  show_step(scrubber_->value());
  update_verdict();
}

void InspectorPanel::show_step(int index) {
  const auto& steps = images_.value(shown_).steps;
  if (index < 0 || index >= steps.size()) {
    preview_->setPixmap({});
    mask_->setPixmap({});
    preview_->setText(tr("no step yet"));
    mask_->setText(tr("no step yet"));
    step_label_->setText(QString());
    return;
  }
  const StepView& s = steps[index];
  const int box = std::max(128, std::min(preview_->width(), preview_->height()) - 4);
  // A full decode (inspect.decode_every) when this step has one, else the cheap latent preview.
  const bool full = !s.decoded.isNull();
  preview_->setPixmap(scaled(full ? s.decoded : s.preview, box));
  preview_caption_->setText(full ? tr("<b>Full decode (x0 at this step)</b>") : tr("<b>Latent preview</b>"));
  preview_->setToolTip(full ? tr("The sampler's prediction of the final latent at this step, decoded by the run's VAE")
                            : tr("The latent after this step, through linear latent-to-RGB factors"));
  mask_->setPixmap(scaled(s.nonfinite_mask, box));
  const auto& r = s.report;
  // Samplers with two model calls per step (heun, dpmpp_sde) show the step and the call.
  const QString which = r.sampler_steps != r.steps
                            ? tr("Step %1 of %2, model call %3 of %4")
                                  .arg(r.sampler_step + 1)
                                  .arg(r.sampler_steps)
                                  .arg(r.call_in_step + 1)
                                  .arg(r.sampler_step + 1 == r.sampler_steps ? 1 : 2)  // the last step: one Euler call
                            : tr("Step %1 of %2").arg(r.index + 1).arg(r.steps);
  QString text = (r.passes > 1 ? tr("<b>Pass %1 of %2 (%3)</b>, ")
                                     .arg(r.pass)
                                     .arg(r.passes)
                                     .arg(r.pass == 1 ? tr("base size") : tr("hires fix"))
                               : QString()) +
                 tr("<b>%1</b> &nbsp; t = %2, sigma = %3, %4 s, ")
                     .arg(which)
                     .arg(static_cast<double>(r.timestep), 0, 'f', 1)
                     .arg(static_cast<double>(r.sigma), 0, 'g', 4)
                     .arg(r.seconds, 0, 'f', 3);
  if (r.latent.count > 0) {
    text += tr("inspector %1 ms, %2 KB read back")
                .arg(r.inspect_seconds * 1e3, 0, 'f', 2)
                .arg(static_cast<double>(r.inspect_bytes) / 1024.0, 0, 'f', 1);
  }
  if (r.decode_seconds > 0) text += tr(", full decode %1 ms").arg(r.decode_seconds * 1e3, 0, 'f', 1);
  text += QStringLiteral("<br>");
  if (r.latent.count == 0) {
    step_label_->setText(text + tr("no statistics at this step (step statistics are taken every few steps: "
                                   "Inspector settings)"));
    return;
  }
  text += tr("latent: max |x| %1, mean %2, std %3<br>")
              .arg(r.latent.max_abs, 0, 'g', 4)
              .arg(r.latent.mean, 0, 'g', 3)
              .arg(r.latent.std, 0, 'g', 4);
  if (r.latent.nonfinite() > 0)
    text += tr("<span style='color:#c0392b'>%1 NaN, %2 +Inf, %3 -Inf in the latent (%4 of %5 positions)</span>")
                .arg(count(r.latent.nan), count(r.latent.pos_inf), count(r.latent.neg_inf), count(s.nonfinite_pixels))
                .arg(s.preview.width() * s.preview.height());
  else
    text += tr("every latent value is finite");
  text += tr("<br>band score %1").arg(s.band_score, 0, 'f', 1);
  if (s.verdict != inspect::Verdict::clean)
    text += tr("<br><span style='color:#c0392b'><b>%1</b>: %2</span>")
                .arg(QString::fromStdString(std::string(inspect::verdict_name(s.verdict))), s.note.toHtmlEscaped());
  step_label_->setText(text);
}

void InspectorPanel::update_verdict() {
  if (!failure_.isEmpty()) {
    verdict_->setText(tr("<span style='color:#c0392b'><b>The run failed:</b></span> %1").arg(failure_.toHtmlEscaped()));
    verdict_->setToolTip(note_);
    update_fix_button();  // a refused size may come with its fix (VAE tiling)
    return;
  }
  const ImageSteps& im = images_.value(shown_);
  QStringList parts;
  int first_bad = -1;
  const StepView* bad = nullptr;
  double peak = 0;
  for (const auto& s : im.steps) {
    peak = std::max(peak, s.report.latent.max_abs);
    if (first_bad < 0 && (s.report.latent.nonfinite() > 0 || s.report.noise_cond.nonfinite() > 0 ||
                          s.report.noise_uncond.nonfinite() > 0)) {
      first_bad = s.report.index;
      bad = &s;
    }
  }
  const QString prefix = images_.size() > 1 ? tr("Image %1: ").arg(shown_ + 1) : QString();
  if (bad) {
    const auto& r = bad->report;
    QStringList where;
    if (r.noise_cond.nonfinite() > 0) where << tr("the prompt branch (%1 values)").arg(count(r.noise_cond.nonfinite()));
    if (r.noise_uncond.nonfinite() > 0)
      where << tr("the negative branch (%1 values)").arg(count(r.noise_uncond.nonfinite()));
    QString text =
        tr("<span style='color:#c0392b'><b>%1Values went non-finite at %2step %3 of %4.</b></span> ")
            .arg(prefix)
            .arg(r.passes > 1
                     ? tr("pass %1 (%2), ").arg(r.pass).arg(r.pass == 1 ? tr("base size") : tr("the hires fix"))
                     : QString())
            .arg(first_bad + 1)
            .arg(r.steps);
    if (!where.isEmpty())
      text += tr("The UNet's output held NaN/Inf in %1, so the UNet is where it started; "
                 "try f32 accumulation or an f32 override for its attention layers. ")
                  .arg(where.join(tr(" and ")));
    else
      text += tr("The sampler step itself produced them (%1 NaN, %2 Inf). ")
                  .arg(count(r.latent.nan), count(r.latent.pos_inf + r.latent.neg_inf));
    parts << text;
  } else if (!im.steps.isEmpty()) {
    parts << tr("<span style='color:#1e8449'><b>%1Sampling is clean so far:</b></span> %2 of %3 steps, every "
                "value finite, largest |latent| %4.")
                 .arg(prefix)
                 .arg(im.steps.size())
                 .arg(steps_)
                 .arg(peak, 0, 'g', 4);
  }
  if (im.has_report && !im.report.inspection.summary.empty()) {
    // The engine's inspector has the last word: verdict, origin op, emulation label.
    const auto& ri = im.report.inspection;
    parts.clear();
    const bool clean = ri.verdict == inspect::Verdict::clean;
    QString text =
        tr("<span style='color:%1'><b>%2Verdict: %3.</b></span> %4")
            .arg(clean ? "#1e8449" : "#c0392b", prefix,
                 QString::fromStdString(std::string(inspect::verdict_name(ri.verdict))),
                 ri.summary == inspect::verdict_name(ri.verdict) ? QString()
                                                                 : QString::fromStdString(ri.summary).toHtmlEscaped());
    if (!ri.origin.empty() && ri.summary.find(ri.origin) == std::string::npos)
      text += tr("<br><b>Started at:</b> %1 (%2)")
                  .arg(QString::fromStdString(ri.origin).toHtmlEscaped(), QString::fromStdString(ri.origin_op));
    if (ri.emulation)
      text += tr("<br><span style='color:#b9770e'><b>%1</b></span>")
                  .arg(QString::fromStdString(ri.emulation_note).toHtmlEscaped());
    parts << text;
  }
  if (im.has_report) {
    const auto& rep = im.report;
    const bool bad_pixels = im.nonfinite_pixels > 0;
    const QString color = rep.cancelled ? "#b9770e" : (bad_pixels || rep.stopped) ? "#c0392b" : "#1e8449";
    parts << tr("<span style='color:%1'><b>Decode:</b> %2.</span>")
                 .arg(color, QString::fromStdString(rep.outcome).toHtmlEscaped());
  }
  // The run's verdict on top, unless it is this image's own, already said below.
  const bool same_as_image = im.has_report && QString::fromStdString(im.report.inspection.summary) == run_summary_;
  if (!run_verdict_.isEmpty() && run_verdict_ != "clean" && !same_as_image)
    parts.prepend(tr("<span style='color:#b9770e'><b>Run verdict: %1.</b> %2</span><br>")
                      .arg(run_verdict_.toHtmlEscaped(), run_summary_.toHtmlEscaped()));
  if (parts.isEmpty()) parts << (note_.isEmpty() ? tr("Waiting for the first step...") : note_.toHtmlEscaped());
  verdict_->setText(parts.join(' '));
  update_fix_button();
  // Scenario facts (R1's stress variant, R4's build times) sit in the tooltip and the log.
  verdict_->setToolTip(note_);
}

QString InspectorPanel::step_caption() const { return step_label_->text(); }

int InspectorPanel::steps_received(int image) const { return images_.value(image).steps.size(); }
const StepView* InspectorPanel::step_view(int image, int index) const {
  if (image < 0 || image >= images_.size()) return nullptr;
  const auto& steps = images_[image].steps;
  if (index < 0 || index >= steps.size()) return nullptr;
  return &steps[index];
}
QString InspectorPanel::preview_caption() const { return preview_caption_->text(); }
int InspectorPanel::points_plotted() const { return max_latent_->count(); }
QString InspectorPanel::verdict() const { return verdict_->text(); }

void InspectorPanel::update_fix_button() {
  const QStringList fix = offered_fix();
  apply_fix_->setVisible(!fix.isEmpty());
  apply_fix_->setEnabled(!fix_applied_);
  if (!fix.isEmpty() && !failure_fix_.isEmpty()) {
    // The memory plan's fix for a size that does not fit (VAE tiling).
    apply_fix_->setText(fix_applied_ ? tr("Fix applied: %1").arg(fix.join(' '))
                                     : tr("Apply this fix: %1").arg(fix.join(' ')));
    apply_fix_->setToolTip(tr("Writes these settings into the current settings (More settings); Run tries again"));
  } else if (!fix.isEmpty() && fix_applied_) {
    apply_fix_->setText(tr("Fix applied: the Precision panel lists the overrides"));
  } else if (!fix.isEmpty()) {
    apply_fix_->setText(fix.size() == 1 ? tr("Apply this fix: compute 1 module in f32")
                                        : tr("Apply this fix: compute %1 modules in f32").arg(fix.size()));
    apply_fix_->setToolTip(tr("Writes these per-module overrides into the current settings (Precision panel); "
                              "Save preset keeps them:\n%1")
                               .arg(fix.join('\n')));
  }
}

QStringList InspectorPanel::offered_fix() const {
  QStringList sets;
  if (!failure_.isEmpty()) return failure_fix_;
  const ImageSteps& im = images_.value(shown_);
  if (!im.has_report || !im.report.layer_retry.clean) return sets;
  for (const auto& u : im.report.layer_retry.upcast) sets << QString::fromStdString(u + ".dtype=f32");
  return sets;
}

}  // namespace nanscope::gui
