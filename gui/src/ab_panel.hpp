#pragma once
// A/B: the panels' config (side A) against the same config with a few
// settings changed (side B): the same seed run twice, the per-step relative L2
// divergence of the latents, and both images. `device=reference` as the
// change compares against the ground-truth device.

#include <QWidget>

#include "engine_types.hpp"

class QLabel;
class QLineEdit;
class QPushButton;

namespace QtCharts {
class QChart;
class QLineSeries;
class QLogValueAxis;
class QValueAxis;
}  // namespace QtCharts

namespace nanscope::gui {

class AbPanel : public QWidget {
  Q_OBJECT
 public:
  explicit AbPanel(QWidget* parent = nullptr);

  // The B side's changes as key=value assignments; throws ConfigError naming a bad one.
  QStringList b_changes() const;
  void set_busy(bool busy);
  void set_changes(const QStringList& changes);
  void show_result(const AbView& result);
  int points() const;

 signals:
  void compareRequested(const QStringList& b_changes);

 private:
  QLineEdit* changes_;
  QPushButton* compare_;
  QLabel* summary_;
  QLabel* image_a_;
  QLabel* image_b_;
  QtCharts::QChart* chart_;
  QtCharts::QLineSeries* series_;
  QtCharts::QLineSeries* threshold_;
  QtCharts::QValueAxis* x_;
  QtCharts::QLogValueAxis* y_;
};

}  // namespace nanscope::gui
