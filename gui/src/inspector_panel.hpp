#pragma once
// The live inspector: per-step plots (max |x|, non-finite counts, std per
// latent channel), the latent preview and non-finite mask of any step through
// a scrubber, and the verdict in plain words. It only draws what the engine
// thread sends (StepView, ImageView).

#include <QVector>
#include <QWidget>

#include "engine_types.hpp"

class QComboBox;
class QLabel;
class QPushButton;
class QSlider;

namespace QtCharts {
class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;
class QLogValueAxis;
}  // namespace QtCharts

namespace nanscope::gui {

class InspectorPanel : public QWidget {
  Q_OBJECT
 public:
  explicit InspectorPanel(QWidget* parent = nullptr);

  void clear(int images, int steps);
  void add_step(const StepView& step);
  void add_image(const ImageView& image);
  // `fix`: settings that make the failed run work (the memory plan's VAE
  // tiling, as "vae.tiling=on" assignments), offered by the Apply button.
  void set_failure(const QString& error, const QStringList& fix = {});
  // Facts a scenario run adds (R1's stress variant, R4's build times), shown under the verdict.
  void set_note(const QString& note);
  // A verdict about the whole run that no single image carries (R4: slow-start).
  void set_run_verdict(const QString& verdict, const QString& summary);

  // For tests and the verdict: what the panel holds.
  int steps_received(int image) const;
  const StepView* step_view(int image, int index) const;  // null when not received
  QString preview_caption() const;
  QString step_caption() const;  // the shown step's caption (pass, step, timings, statistics)
  int points_plotted() const;    // points in the max |x| latent series of the shown image
  QString verdict() const;
  // The fix the retry-layer-f32 NaN policy found for the shown image, as
  // "PATTERN.dtype=f32" settings (empty when it found none); the "Apply this
  // fix" button offers it and emits applyFix.
  QStringList offered_fix() const;

 signals:
  void applyFix(const QStringList& sets);

 private:
  struct ImageSteps {
    QVector<StepView> steps;
    bool has_report = false;
    pipeline::RunReport report;
    std::int64_t nonfinite_pixels = 0;
  };
  void show_image(int image);
  void show_step(int index);
  void rebuild_series();
  // x: the step's position in the image's run (1-based; both passes of a hires run in a row).
  void append_points(const StepView& s, int x);
  void update_verdict();
  void update_fix_button();  // "Apply this fix" for offered_fix()
  QtCharts::QChartView* make_chart(const QString& title, QtCharts::QChart*& chart);

  int steps_ = 0;
  int shown_ = 0;
  QVector<ImageSteps> images_;
  QString failure_, note_, run_verdict_, run_summary_;
  QStringList failure_fix_;   // set_failure()'s fix
  bool fix_applied_ = false;  // "Apply this fix" was pressed for the shown run

  QLabel* verdict_;
  QPushButton* apply_fix_;
  QComboBox* image_;
  QtCharts::QChart* max_chart_ = nullptr;
  QtCharts::QChart* nonfinite_chart_ = nullptr;
  QtCharts::QChart* std_chart_ = nullptr;
  QtCharts::QChart* band_chart_ = nullptr;
  QtCharts::QLineSeries* band_latent_;
  QtCharts::QLineSeries* band_threshold_;
  QtCharts::QValueAxis* band_x_;
  QtCharts::QValueAxis* band_y_;
  double band_hi_ = 1;
  QtCharts::QLineSeries* max_latent_;
  QtCharts::QLineSeries* max_cond_;
  QtCharts::QLineSeries* max_uncond_;
  QtCharts::QLineSeries* nf_latent_;
  QtCharts::QLineSeries* nf_cond_;
  QtCharts::QLineSeries* nf_uncond_;
  QVector<QtCharts::QLineSeries*> std_series_;
  QtCharts::QValueAxis* max_x_;
  QtCharts::QLogValueAxis* max_y_;
  QtCharts::QValueAxis* nf_x_;
  QtCharts::QValueAxis* nf_y_;
  QtCharts::QValueAxis* std_x_;
  QtCharts::QLogValueAxis* std_y_;
  double max_lo_ = 1, max_hi_ = 1, nf_hi_ = 1, std_lo_ = 1, std_hi_ = 1;

  QSlider* scrubber_;
  QLabel* step_label_;
  QLabel* preview_;
  QLabel* preview_caption_;
  QLabel* mask_;
};

}  // namespace nanscope::gui
