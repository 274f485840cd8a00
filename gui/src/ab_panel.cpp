#include "ab_panel.hpp"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLegend>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace nanscope::gui {

using namespace QtCharts;

namespace {
QPixmap big(const QImage& img, int box) {
  if (img.isNull()) return {};
  const int factor = std::max(1, box / std::max(img.width(), img.height()));
  return QPixmap::fromImage(img.scaled(img.size() * factor, Qt::KeepAspectRatio, Qt::FastTransformation));
}
}  // namespace

AbPanel::AbPanel(QWidget* parent)
    : QWidget(parent),
      changes_(new QLineEdit),
      compare_(new QPushButton(tr("Compare"))),
      summary_(new QLabel),
      image_a_(new QLabel),
      image_b_(new QLabel),
      chart_(new QChart),
      series_(new QLineSeries),
      threshold_(new QLineSeries),
      x_(new QValueAxis),
      y_(new QLogValueAxis) {
  setObjectName("abPanel");
  changes_->setObjectName("abChanges");
  changes_->setPlaceholderText(tr("side B = these settings changed, e.g. unet.dtype=f32; or device=reference"));
  changes_->setToolTip(tr("key=value settings separated by ';' (the same keys as nanscope-cli --set)"));
  compare_->setObjectName("abCompare");
  compare_->setToolTip(tr("Run the current settings (A) and the changed ones (B) with the same seed"));
  connect(compare_, &QPushButton::clicked, this, [this] {
    try {
      emit compareRequested(b_changes());
    } catch (const std::exception& e) {
      summary_->setText(tr("<span style='color:#c0392b'>%1</span>").arg(QString::fromUtf8(e.what()).toHtmlEscaped()));
    }
  });
  connect(changes_, &QLineEdit::returnPressed, compare_, &QPushButton::click);
  summary_->setWordWrap(true);
  summary_->setTextFormat(Qt::RichText);
  summary_->setText(tr("Compare the current settings with a variant: same seed, per-step divergence."));
  for (QLabel* l : {image_a_, image_b_}) {
    l->setFixedSize(132, 132);
    l->setAlignment(Qt::AlignCenter);
    l->setFrameShape(QFrame::StyledPanel);
  }

  chart_->setTitle(tr("Relative L2 divergence of the latents, B against A"));
  chart_->legend()->setAlignment(Qt::AlignRight);
  chart_->setMargins(QMargins(2, 2, 2, 2));
  chart_->setBackgroundRoundness(0);
  series_->setName(tr("latent"));
  series_->setPointsVisible(true);
  QPen pen(QColor("#c0392b"));
  pen.setWidthF(2);
  series_->setPen(pen);
  threshold_->setName(tr("threshold"));
  QPen dashed(QColor("#7f8c8d"));
  dashed.setStyle(Qt::DashLine);
  threshold_->setPen(dashed);
  x_->setLabelFormat("%d");
  y_->setLabelFormat("%.0e");
  y_->setRange(1e-8, 1);
  chart_->addAxis(x_, Qt::AlignBottom);
  chart_->addAxis(y_, Qt::AlignLeft);
  for (auto* s : {series_, threshold_}) {
    chart_->addSeries(s);
    s->attachAxis(x_);
    s->attachAxis(y_);
  }
  auto* view = new QChartView(chart_);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumSize(360, 160);

  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("B changes:")));
  top->addWidget(changes_, 1);
  top->addWidget(compare_);
  auto* images = new QGridLayout;
  images->addWidget(new QLabel(tr("<b>A</b>")), 0, 0, Qt::AlignHCenter);
  images->addWidget(new QLabel(tr("<b>B</b>")), 0, 1, Qt::AlignHCenter);
  images->addWidget(image_a_, 1, 0);
  images->addWidget(image_b_, 1, 1);
  auto* right = new QVBoxLayout;
  right->addLayout(images);
  right->addStretch();
  auto* body = new QHBoxLayout;
  body->addWidget(view, 1);
  body->addLayout(right);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addLayout(top);
  layout->addWidget(summary_);
  layout->addLayout(body, 1);
}

QStringList AbPanel::b_changes() const {
  QStringList out;
  for (const QString& part : changes_->text().split(';', Qt::SkipEmptyParts)) {
    const QString p = part.trimmed();
    if (p.isEmpty()) continue;
    if (!p.contains('=')) throw ConfigError("B changes: expected key=value, found '" + p.toStdString() + "'");
    out << p;
  }
  if (out.isEmpty()) throw ConfigError("B changes: name at least one setting to change, e.g. unet.dtype=f32");
  return out;
}

void AbPanel::set_busy(bool busy) {
  compare_->setEnabled(!busy);
  changes_->setEnabled(!busy);
}

void AbPanel::show_result(const AbView& r) {
  series_->clear();
  threshold_->clear();
  if (!r.error.isEmpty()) {
    summary_->setText(tr("<span style='color:#c0392b'><b>A/B failed:</b> %1</span>").arg(r.error.toHtmlEscaped()));
    return;
  }
  double lo = 1, hi = 1e-8;
  for (int i = 0; i < r.rel_l2.size(); ++i) {
    const double v = r.rel_l2[i];
    const double shown = std::isfinite(v) ? std::max(v, 1e-12) : 1e3;  // one side non-finite: off the top
    series_->append(i + 1, shown);
    lo = std::min(lo, shown);
    hi = std::max(hi, shown);
  }
  const int n = std::max(2, static_cast<int>(r.rel_l2.size()));
  threshold_->append(1, r.threshold);
  threshold_->append(n, r.threshold);
  x_->setRange(1, n);
  x_->setTickType(QValueAxis::TicksDynamic);
  x_->setTickAnchor(1);
  x_->setTickInterval(std::max(1, (n + 4) / 5));
  lo = std::min(lo, r.threshold);
  hi = std::max(hi, r.threshold);
  y_->setRange(std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi * 1.01))));
  image_a_->setPixmap(big(r.image_a, 128));
  image_b_->setPixmap(big(r.image_b, 128));
  QString text = tr("B = A with %1. ").arg(changes_->text().toHtmlEscaped());
  text +=
      r.first_divergent_step > 0
          ? tr("<b>B parts from A at step %1</b> (relative L2 above %2).").arg(r.first_divergent_step).arg(r.threshold)
          : tr("<b>B stays within %1 of A at every step.</b>").arg(r.threshold);
  text += tr(" Images: relative L2 %1, largest channel difference %2 of 255.")
              .arg(r.image_rel_l2, 0, 'g', 3)
              .arg(r.image_max_diff);
  text += tr("<br>A: %1. B: %2.").arg(r.summary_a.toHtmlEscaped(), r.summary_b.toHtmlEscaped());
  summary_->setText(text);
}

int AbPanel::points() const { return series_->count(); }

void AbPanel::set_changes(const QStringList& changes) { changes_->setText(changes.join("; ")); }

}  // namespace nanscope::gui
