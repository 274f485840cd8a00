#pragma once
// The probe window (Run > Probe Device..., Run > f16 Safety...): starts the
// device probe or the f16-safety probe on the engine thread, shows its
// progress with Cancel, then the result as a sortable table, worst first:
// per op its verdict against the reference device (coloured), or per module
// its largest |x| and headroom to the f16 and bf16 limits, with the
// per-module overrides that keep an f16 run finite and "Apply these
// overrides", which writes them into the current config as "Apply this fix"
// does for retry-layer-f32.

#include <QDialog>
#include <QStringList>

#include "config/run_config.hpp"
#include "probe_types.hpp"

class QLabel;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace nanscope::gui {

class EngineController;

class ProbeDialog : public QDialog {
  Q_OBJECT
 public:
  enum class Mode { device, f16_safety };
  ProbeDialog(EngineController* controller, QWidget* parent = nullptr);

  // Queues the probe of `config` on the engine thread; false when one is going.
  bool start(Mode mode, const RunConfig& config);
  bool busy() const { return busy_; }
  Mode mode() const { return mode_; }
  QTableWidget* table() const { return table_; }
  QPushButton* apply_button() const { return apply_; }
  QPushButton* cancel_button() const { return cancel_; }
  QProgressBar* progress() const { return progress_; }
  QString summary() const;
  QStringList overrides() const { return overrides_; }

 signals:
  void requestProbe(const nanscope::RunConfig& config);
  void requestF16Safety(const nanscope::RunConfig& config);
  // "Apply these overrides": `PATTERN.dtype=f32` settings for the current config.
  void applyOverrides(const QStringList& sets);
  // The result (or the error) is shown.
  void finishedProbe(bool ok);

 private:
  void show_probe(const ProbeResult& r);
  void show_f16(const F16Result& r);
  void set_busy(bool on);

  EngineController* controller_;
  Mode mode_ = Mode::device;
  bool busy_ = false;
  QStringList overrides_;
  QLabel* summary_;
  QProgressBar* progress_;
  QPushButton* cancel_;
  QTableWidget* table_;
  QLabel* overrides_label_;
  QPushButton* apply_;
};

}  // namespace nanscope::gui
