#include "reproduce_dialog.hpp"

#include <QApplication>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>

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
  status_ = new QLabel;
  status_->setObjectName("reproduceStatus");
  status_->setWordWrap(true);
  layout->addWidget(status_);

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

void ReproduceDialog::set_models_dir(const QString& dir) {
  dir_edit_->setText(dir);
  replan();
}

QString ReproduceDialog::models_dir() const { return dir_edit_->text().trimmed(); }
QString ReproduceDialog::plan_text() const { return text_->toPlainText() + "\n" + missing_->toPlainText(); }
bool ReproduceDialog::can_apply() const { return plan_ && plan_->runnable(); }

void ReproduceDialog::replan() {
  plan_.reset();
  missing_->clear();
  const QString dir = models_dir();
  if (dir.isEmpty()) {
    text_->setPlainText(tr("Choose the models folder to find the checkpoint, VAE and LoRAs this image names."));
    status_->setText({});
  } else {
    QApplication::setOverrideCursor(Qt::WaitCursor);
    try {
      io::FileHashCache cache(io::FileHashCache::default_path());
      plan_ = studies::plan_reproduction(generation_, dir.toStdString(), cache);
      text_->setPlainText(QString::fromStdString(studies::describe_run(*plan_)));
      missing_->setPlainText(QString::fromStdString(studies::describe_not_reproducible(*plan_)));
      status_->setText(
          plan_->runnable()
              ? tr("%n setting(s) cannot be reproduced.", "", static_cast<int>(plan_->not_reproducible.size()))
              : tr("The checkpoint was not found in this folder: choose the folder that holds it."));
    } catch (const Error& e) {
      text_->setPlainText(QString::fromUtf8(e.what()));
      status_->setText(tr("Cannot search this folder."));
    }
    QApplication::restoreOverrideCursor();
  }
  apply_->setEnabled(can_apply());
}

bool ReproduceDialog::apply() {
  if (!can_apply()) return false;
  emit applied(plan_->config, models_dir());
  accept();
  return true;
}

}  // namespace nanscope::gui
