#pragma once
// Tools > Kernel Cache...: the kernel cache's inventory (report R4) as a
// table (device, driver, program, options, size, build time, built, last use,
// check), with Verify and Clear. Every request goes to the engine thread
// (EngineController::kernelCache) and the table is redrawn from its answer.

#include <QDialog>

#include "engine_types.hpp"

class QCheckBox;
class QComboBox;
class QLabel;
class QPushButton;
class QTableWidget;

namespace nanscope::gui {

class EngineController;

class KernelCacheDialog : public QDialog {
  Q_OBJECT
 public:
  KernelCacheDialog(EngineController* controller, QWidget* parent = nullptr);

  // Sends a request for the selected device (no confirmation: the buttons ask first).
  void request(int action);
  QTableWidget* table() const { return table_; }
  QLabel* message() const { return message_; }
  QComboBox* device_filter() const { return device_; }

 signals:
  void requested(int action, const QString& device_id);
  // After a view arrived and was drawn (tests wait on it).
  void updated();

 public slots:
  void show_view(const nanscope::gui::KernelCacheView& view);

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  QComboBox* device_;
  QTableWidget* table_;
  QLabel* message_;
  QLabel* dir_;
  QCheckBox* remove_corrupt_;
  QPushButton *refresh_, *verify_, *clear_;
  bool busy_ = false;
};

}  // namespace nanscope::gui
