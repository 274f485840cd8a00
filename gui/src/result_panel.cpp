#include "result_panel.hpp"

#include <QAction>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>

namespace nanscope::gui {

ResultPanel::ResultPanel(QAction* save, QAction* copy, QWidget* parent)
    : QWidget(parent), pick_(new QComboBox), view_(new QLabel), info_(new QLabel) {
  setObjectName("resultPanel");
  view_->setObjectName("resultImage");
  view_->setAlignment(Qt::AlignCenter);
  view_->setMinimumSize(192, 192);
  view_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Ignored);
  view_->setText(tr("No image yet"));
  info_->setWordWrap(true);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  pick_->setVisible(false);
  connect(pick_, qOverload<int>(&QComboBox::activated), this, [this] { show_current(); });

  auto* save_button = new QToolButton;
  save_button->setDefaultAction(save);
  auto* copy_button = new QToolButton;
  copy_button->setDefaultAction(copy);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(pick_, 1);
  buttons->addStretch();
  buttons->addWidget(save_button);
  buttons->addWidget(copy_button);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addLayout(buttons);
  layout->addWidget(view_, 1);
  layout->addWidget(info_);
}

void ResultPanel::clear() {
  images_.clear();
  pick_->clear();
  pick_->setVisible(false);
  view_->setPixmap({});
  view_->setText(tr("No image yet"));
  info_->clear();
}

void ResultPanel::add(const ImageView& image) {
  int slot = -1;
  for (int i = 0; i < images_.size(); ++i)
    if (images_[i].report.image == image.report.image) slot = i;
  const QString label = tr("Image %1, seed %2").arg(image.report.image + 1).arg(image.image.config.seed);
  if (slot < 0) {
    images_.push_back(image);
    pick_->addItem(label);
    slot = images_.size() - 1;
  } else {
    images_[slot] = image;
    pick_->setItemText(slot, label);
  }
  pick_->setVisible(images_.size() > 1);
  pick_->setCurrentIndex(slot);
  show_current();
}

bool ResultPanel::has_image() const {
  const ImageView* v = current();
  return v && !v->qimage.isNull();
}

const ImageView* ResultPanel::current() const {
  const int i = pick_->currentIndex();
  return i >= 0 && i < images_.size() ? &images_[i] : nullptr;
}

void ResultPanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  show_current();
}

void ResultPanel::show_current() {
  const ImageView* v = current();
  if (!v) return;
  if (v->qimage.isNull()) {
    view_->setPixmap({});
    view_->setText(tr("No image: %1").arg(QString::fromStdString(v->report.outcome)));
  } else {
    const QSize box = view_->size();
    const QImage& img = v->qimage;
    // Small images grow by whole factors so their pixels stay sharp.
    const int factor = std::max(1, std::min(box.width() / img.width(), box.height() / img.height()));
    QImage shown = factor > 1 ? img.scaled(img.size() * factor, Qt::KeepAspectRatio, Qt::FastTransformation)
                              : img.scaled(box, Qt::KeepAspectRatio, Qt::SmoothTransformation);
    view_->setPixmap(QPixmap::fromImage(shown));
  }
  const auto& r = v->report;
  QString text = tr("%1x%2, seed %3. %4")
                     .arg(v->image.image.width)
                     .arg(v->image.image.height)
                     .arg(v->image.config.seed)
                     .arg(QString::fromStdString(r.outcome));
  if (v->image.nonfinite_pixels > 0) text += tr(" %1 non-finite pixel values.").arg(v->image.nonfinite_pixels);
  if (const auto& checks = r.inspection.image) {
    // The engine's image checks: non-finite pixels, clipped share, bands.
    text += tr("\nImage checks: %1, %2% clipped, band score %3")
                .arg(QString::fromStdString(std::string(inspect::verdict_name(checks->map.verdict))))
                .arg(checks->map.clipped * 100.0, 0, 'f', 1)
                .arg(checks->map.bands.score(), 0, 'f', 1);
    if (!checks->map.note.empty()) text += ": " + QString::fromStdString(checks->map.note);
  }
  info_->setText(text);
}

}  // namespace nanscope::gui
