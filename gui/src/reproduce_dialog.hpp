#pragma once
// The dialog an image from another tool (A1111 / SD.Next / Forge, ComfyUI)
// opens: the models folder to search (chosen here, remembered by the main
// window), what will run as settings, the files found and how, and
// everything that cannot be reproduced (studies/reproduce.hpp writes the
// text; this only shows it). "Apply" hands the plan's RunConfig to the
// panels, so Run runs it; it is disabled until the checkpoint is found.
//
// The search (which may hash a folder of multi-GB files) runs on a worker
// thread of its own, not the engine thread, which may be busy with a run: the
// dialog shows "Hashing 3 of 40 files", stays responsive, and Stop (or
// closing the dialog) cancels the search within 1 MiB of hashing; the hashes
// finished by then stay in the cache.

#include <QDialog>
#include <QString>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "config/foreign_generation.hpp"
#include "studies/reproduce.hpp"

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;

namespace nanscope::gui {

class ReproduceDialog : public QDialog {
  Q_OBJECT

 public:
  ReproduceDialog(ForeignGeneration generation, const QString& image_name, const QString& models_dir,
                  QWidget* parent = nullptr);
  ~ReproduceDialog() override;

  // Searches `dir` on the worker thread (hashing what the cache lacks) and
  // returns at once; planned() says when the new plan is shown.
  void set_models_dir(const QString& dir);
  bool searching() const { return worker_.joinable() && !search_done_; }
  // Stops the search (the Stop button): planned() follows with no plan.
  void stop_search();
  QPushButton* stop_button() const { return stop_; }
  void reject() override;
  QString models_dir() const;
  const std::optional<studies::ReproducePlan>& plan() const { return plan_; }
  QString plan_text() const;
  bool can_apply() const;
  // Accepts the dialog when the plan can run; false otherwise.
  bool apply();

 signals:
  void applied(const nanscope::RunConfig& config, const QString& models_dir);
  // The search looked up `done` of the folder's `total` files so far.
  void searchProgress(int done, int total);
  // The search finished, failed or was stopped: plan() and plan_text() show its result.
  void planned();

 private:
  void replan();
  void join_worker();
  void on_progress(int search, int done, int total, const QString& file);
  void on_finished(int search, const std::shared_ptr<std::optional<studies::ReproducePlan>>& plan, const QString& error,
                   bool cancelled);

  ForeignGeneration generation_;
  std::optional<studies::ReproducePlan> plan_;
  QLineEdit* dir_edit_ = nullptr;
  QPlainTextEdit* text_ = nullptr;
  QPlainTextEdit* missing_ = nullptr;
  QLabel* status_ = nullptr;
  QPushButton* apply_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* stop_ = nullptr;
  std::thread worker_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  int search_ = 0;           // the current search; results of older ones are dropped
  bool search_done_ = true;  // GUI thread: the current search's result arrived
  int looked_up_ = 0, total_ = 0;
};

}  // namespace nanscope::gui
