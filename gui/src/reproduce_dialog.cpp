#include "reproduce_dialog.hpp"

#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>
#include <algorithm>
#include <filesystem>

#include "core/error.hpp"
#include "io/file_hash.hpp"

namespace nanscope::gui {

ReproduceDialog::ReproduceDialog(ForeignGeneration generation, const QString& image_name, const QString& models_dir,
                                 QWidget* parent)
    : QDialog(parent), generation_(std::move(generation)) {
  setObjectName("reproduceDialog");
  setWindowTitle(tr("Reproduce %1").arg(image_name));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(
      tr("<b>%1</b> was made by %2. NaNscope reads its settings, finds its files in your models "
         "folder, and says what it cannot reproduce before anything runs.")
          .arg(image_name.toHtmlEscaped(), QString::fromStdString(std::string(foreign_tool_name(generation_.tool)))));
  intro->setWordWrap(true);
  layout->addWidget(intro);

  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel(tr("Models folder:")));
  dir_edit_ = new QLineEdit(models_dir);
  dir_edit_->setObjectName("reproduceModelsDir");
  dir_edit_->setPlaceholderText(tr("the folder holding your checkpoints, VAEs and LoRAs (searched recursively)"));
  row->addWidget(dir_edit_, 1);
  auto* choose = new QPushButton(tr("Choose..."));
  choose->setObjectName("reproduceChooseFolder");
  row->addWidget(choose);
  layout->addLayout(row);
  connect(choose, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Models folder"), dir_edit_->text());
    if (!d.isEmpty()) set_models_dir(d);
  });
  connect(dir_edit_, &QLineEdit::editingFinished, this, [this] { replan(); });

  text_ = new QPlainTextEdit;
  text_->setObjectName("reproducePlan");
  text_->setReadOnly(true);
  text_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  text_->setLineWrapMode(QPlainTextEdit::WidgetWidth);
  layout->addWidget(text_, 3);
  auto* missing_label =
      new QLabel(tr("<b>Cannot be reproduced</b> (the run leaves these out or does them differently):"));
  layout->addWidget(missing_label);
  missing_ = new QPlainTextEdit;
  missing_->setObjectName("reproduceNotReproducible");
  missing_->setReadOnly(true);
  missing_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  layout->addWidget(missing_, 2);
  auto* status_row = new QHBoxLayout;
  status_ = new QLabel;
  status_->setObjectName("reproduceStatus");
  status_->setWordWrap(true);
  status_row->addWidget(status_, 1);
  progress_ = new QProgressBar;
  progress_->setObjectName("reproduceProgress");
  progress_->setTextVisible(false);
  progress_->setMaximumWidth(200);
  progress_->hide();
  status_row->addWidget(progress_);
  stop_ = new QPushButton(tr("Stop"));
  stop_->setObjectName("reproduceStop");
  stop_->setToolTip(tr("Stop searching the folder; the files hashed so far are remembered"));
  stop_->hide();
  connect(stop_, &QPushButton::clicked, this, [this] { stop_search(); });
  status_row->addWidget(stop_);
  layout->addLayout(status_row);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel);
  apply_ = buttons->addButton(tr("Apply"), QDialogButtonBox::AcceptRole);
  apply_->setObjectName("reproduceApply");
  apply_->setToolTip(tr("Put these settings into the panels; Run then runs them under the inspector"));
  connect(apply_, &QPushButton::clicked, this, [this] { apply(); });
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(buttons);
  resize(860, 720);
  replan();
}

ReproduceDialog::~ReproduceDialog() { join_worker(); }

void ReproduceDialog::set_models_dir(const QString& dir) {
  dir_edit_->setText(dir);
  replan();
}

QString ReproduceDialog::models_dir() const { return dir_edit_->text().trimmed(); }
QString ReproduceDialog::plan_text() const { return text_->toPlainText() + "\n" + missing_->toPlainText(); }
bool ReproduceDialog::can_apply() const { return !searching() && plan_ && plan_->runnable(); }

// Cancels the running search and waits for its thread: it checks the flag
// before each file and every MiB it hashes, so this takes milliseconds.
void ReproduceDialog::join_worker() {
  if (cancel_) cancel_->store(true);
  if (worker_.joinable()) worker_.join();
}

void ReproduceDialog::stop_search() {
  if (!searching()) return;
  stop_->setEnabled(false);
  status_->setText(tr("Stopping the search..."));
  if (cancel_) cancel_->store(true);
}

void ReproduceDialog::reject() {
  join_worker();
  QDialog::reject();
}

void ReproduceDialog::replan() {
  join_worker();
  ++search_;  // what the old search still posts is dropped
  plan_.reset();
  missing_->clear();
  const QString dir = models_dir();
  if (dir.isEmpty()) {
    text_->setPlainText(tr("Choose the models folder to find the checkpoint, VAE and LoRAs this image names."));
    status_->setText({});
    apply_->setEnabled(false);
    emit planned();
    return;
  }
  search_done_ = false;
  looked_up_ = total_ = 0;
  text_->setPlainText(tr("Searching %1 for the files this image names...").arg(dir));
  status_->setText(tr("Searching %1...").arg(dir));
  progress_->setRange(0, 0);  // busy until the first file count arrives
  progress_->show();
  stop_->setEnabled(true);
  stop_->show();
  apply_->setEnabled(false);
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  // The worker gets copies of what it reads; it reaches the dialog only through
  // queued calls, which the destructor's join_worker() lets finish first.
  worker_ = std::thread([this, id = search_, generation = generation_, folder = dir.toStdString(), cancel = cancel_] {
    auto plan = std::make_shared<std::optional<studies::ReproducePlan>>();
    QString error;
    bool cancelled = false;
    try {
      io::FileHashCache cache(io::FileHashCache::default_path());
      studies::PlanProgress progress;
      progress.cancel = cancel.get();
      progress.on_file = [this, id](int done, int total, const std::filesystem::path& file) {
        const QString name = QString::fromStdString(file.filename().string());
        QMetaObject::invokeMethod(
            this, [this, id, done, total, name] { on_progress(id, done, total, name); }, Qt::QueuedConnection);
      };
      *plan = studies::plan_reproduction(generation, folder, cache, &progress);
    } catch (const Cancelled&) {
      cancelled = true;
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
    QMetaObject::invokeMethod(
        this, [this, id, plan, error, cancelled] { on_finished(id, plan, error, cancelled); }, Qt::QueuedConnection);
  });
}

void ReproduceDialog::on_progress(int search, int done, int total, const QString& file) {
  if (search != search_ || search_done_) return;
  looked_up_ = done;
  total_ = total;
  progress_->setRange(0, std::max(total, 1));
  progress_->setValue(done);
  if (!file.isEmpty() && !cancel_->load()) {
    status_->setText(tr("Hashing %1 of %2 files: %3").arg(done + 1).arg(total).arg(file));
  }
  emit searchProgress(done, total);
}

void ReproduceDialog::on_finished(int search, const std::shared_ptr<std::optional<studies::ReproducePlan>>& plan,
                                  const QString& error, bool cancelled) {
  if (search != search_) return;
  if (worker_.joinable()) worker_.join();  // it has posted this as its last act
  search_done_ = true;
  progress_->hide();
  stop_->hide();
  if (cancelled) {
    text_->setPlainText(
        tr("The search of %1 was stopped. Choose the folder again (or press Enter in the field) to search it; "
           "the files hashed so far are remembered and not hashed again.")
            .arg(models_dir()));
    status_->setText(tr("Search stopped after %1 of %2 files.").arg(looked_up_).arg(total_));
  } else if (!error.isEmpty()) {
    text_->setPlainText(error);
    status_->setText(tr("Cannot search this folder."));
  } else if (*plan) {
    plan_ = std::move(**plan);
    text_->setPlainText(QString::fromStdString(studies::describe_run(*plan_)));
    missing_->setPlainText(QString::fromStdString(studies::describe_not_reproducible(*plan_)));
    status_->setText(
        plan_->runnable()
            ? tr("%n setting(s) cannot be reproduced.", "", static_cast<int>(plan_->not_reproducible.size()))
            : tr("The checkpoint was not found in this folder: choose the folder that holds it."));
  }
  apply_->setEnabled(can_apply());
  emit planned();
}

bool ReproduceDialog::apply() {
  if (!can_apply()) return false;
  emit applied(plan_->config, models_dir());
  accept();
  return true;
}

}  // namespace nanscope::gui
