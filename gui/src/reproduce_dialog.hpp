#pragma once
// The dialog an image from another tool (A1111 / SD.Next / Forge, ComfyUI)
// opens: the models folder to search (chosen here, remembered by the main
// window), what will run as settings, the files found and how, and
// everything that cannot be reproduced (studies/reproduce.hpp writes the
// text; this only shows it). "Apply" hands the plan's RunConfig to the
// panels, so Run runs it; it is disabled until the checkpoint is found.

#include <QDialog>
#include <QString>
#include <optional>

#include "config/foreign_generation.hpp"
#include "studies/reproduce.hpp"

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;

namespace nanscope::gui {

class ReproduceDialog : public QDialog {
  Q_OBJECT

 public:
  ReproduceDialog(ForeignGeneration generation, const QString& image_name, const QString& models_dir,
                  QWidget* parent = nullptr);

  // Searches `dir` and shows the new plan (hashing what the cache lacks).
  void set_models_dir(const QString& dir);
  QString models_dir() const;
  const std::optional<studies::ReproducePlan>& plan() const { return plan_; }
  QString plan_text() const;
  bool can_apply() const;
  // Accepts the dialog when the plan can run; false otherwise.
  bool apply();

 signals:
  void applied(const nanscope::RunConfig& config, const QString& models_dir);

 private:
  void replan();

  ForeignGeneration generation_;
  std::optional<studies::ReproducePlan> plan_;
  QLineEdit* dir_edit_ = nullptr;
  QPlainTextEdit* text_ = nullptr;
  QPlainTextEdit* missing_ = nullptr;
  QLabel* status_ = nullptr;
  QPushButton* apply_ = nullptr;
};

}  // namespace nanscope::gui
