#include "kernel_cache_dialog.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include "engine_controller.hpp"

namespace nanscope::gui {

namespace {

QString when(std::int64_t seconds) {
  return seconds > 0 ? QDateTime::fromSecsSinceEpoch(seconds).toString("yyyy-MM-dd hh:mm") : QString("-");
}

QString size_text(std::uint64_t bytes) {
  return bytes >= (1u << 20) ? QString("%1 MiB").arg(static_cast<double>(bytes) / (1 << 20), 0, 'f', 1)
                             : QString("%1 KiB").arg(static_cast<double>(bytes) / 1024.0, 0, 'f', 1);
}

enum Column { kDevice, kDriver, kProgram, kOptions, kSize, kBuildMs, kBuilt, kLastUse, kCheck, kColumns };

}  // namespace

KernelCacheDialog::KernelCacheDialog(EngineController* controller, QWidget* parent) : QDialog(parent) {
  setObjectName("kernelCacheDialog");
  setWindowTitle(tr("Kernel Cache"));
  device_ = new QComboBox(this);
  device_->setObjectName("kernelCacheDevice");
  device_->addItem(tr("All devices"), QString());
  dir_ = new QLabel(this);
  dir_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  table_ = new QTableWidget(0, kColumns, this);
  table_->setObjectName("kernelCacheTable");
  table_->setHorizontalHeaderLabels({tr("Device"), tr("Driver"), tr("Program"), tr("Options"), tr("Size"),
                                     tr("Build ms"), tr("Built"), tr("Last use"), tr("Check")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  message_ = new QLabel(this);
  message_->setObjectName("kernelCacheMessage");
  message_->setWordWrap(true);
  remove_corrupt_ = new QCheckBox(tr("Remove corrupt entries"), this);
  remove_corrupt_->setObjectName("kernelCacheRemoveCorrupt");
  refresh_ = new QPushButton(tr("Refresh"), this);
  verify_ = new QPushButton(tr("Verify"), this);
  verify_->setObjectName("kernelCacheVerify");
  verify_->setToolTip(tr("Re-read every entry and check its header and payload checksum"));
  clear_ = new QPushButton(tr("Clear"), this);
  clear_->setObjectName("kernelCacheClear");
  clear_->setToolTip(tr("Remove the entries of the selected device (or all); runs rebuild what they need"));
  auto* close = new QDialogButtonBox(QDialogButtonBox::Close, this);
  connect(close, &QDialogButtonBox::rejected, this, &QDialog::reject);

  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("Device:"), this));
  top->addWidget(device_, 1);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(refresh_);
  buttons->addWidget(verify_);
  buttons->addWidget(remove_corrupt_);
  buttons->addStretch(1);
  buttons->addWidget(clear_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(dir_);
  layout->addWidget(table_, 1);
  layout->addWidget(message_);
  layout->addLayout(buttons);
  layout->addWidget(close);
  resize(1000, 480);

  connect(this, &KernelCacheDialog::requested, controller, &EngineController::kernelCache);
  connect(controller, &EngineController::kernelCacheReady, this, &KernelCacheDialog::show_view);
  connect(refresh_, &QPushButton::clicked, this, [this] { request(static_cast<int>(CacheAction::list)); });
  connect(device_, qOverload<int>(&QComboBox::activated), this,
          [this] { request(static_cast<int>(CacheAction::list)); });
  connect(verify_, &QPushButton::clicked, this, [this] {
    request(static_cast<int>(remove_corrupt_->isChecked() ? CacheAction::verify_remove : CacheAction::verify));
  });
  connect(clear_, &QPushButton::clicked, this, [this] {
    const QString what = device_->currentData().toString().isEmpty()
                             ? tr("every cached kernel program")
                             : tr("the programs cached for %1").arg(device_->currentText());
    if (QMessageBox::question(this, tr("Clear the kernel cache"),
                              tr("Remove %1? The next runs build them again (seconds per program).").arg(what)) ==
        QMessageBox::Yes) {
      request(static_cast<int>(CacheAction::clear));
    }
  });
}

void KernelCacheDialog::showEvent(QShowEvent* e) {
  QDialog::showEvent(e);
  request(static_cast<int>(CacheAction::list));
}

void KernelCacheDialog::request(int action) {
  busy_ = true;
  for (QPushButton* b : {refresh_, verify_, clear_}) b->setEnabled(false);
  message_->setText(action == static_cast<int>(CacheAction::list) ? tr("Reading the cache ...")
                    : action == static_cast<int>(CacheAction::clear)
                        ? tr("Clearing ...")
                        : tr("Verifying (waits for a run in progress to finish) ..."));
  emit requested(action, device_->currentData().toString());
}

void KernelCacheDialog::show_view(const KernelCacheView& v) {
  busy_ = false;
  for (QPushButton* b : {refresh_, verify_, clear_}) b->setEnabled(true);
  // The device list, keeping the selection.
  const QString selected = v.device;
  device_->clear();
  device_->addItem(tr("All devices"), QString());
  for (int i = 0; i < v.device_ids.size(); ++i) device_->addItem(v.device_labels[i], v.device_ids[i]);
  device_->setCurrentIndex(std::max(0, device_->findData(selected)));
  dir_->setText(v.dir.isEmpty() ? tr("The kernel cache is off.") : tr("Folder: %1").arg(v.dir));

  table_->setSortingEnabled(false);
  table_->setRowCount(static_cast<int>(v.entries.size()));
  std::uint64_t bytes = 0;
  int bad = 0;
  for (int r = 0; r < table_->rowCount(); ++r) {
    const auto& e = v.entries[static_cast<std::size_t>(r)];
    bytes += e.bytes;
    auto set = [&](int c, const QString& text, const QString& tip = {}) {
      auto* item = new QTableWidgetItem(text);
      if (!tip.isEmpty()) item->setToolTip(tip);
      table_->setItem(r, c, item);
    };
    const QString unknown = tr("(no metadata)");
    set(kDevice, e.has_metadata ? QString::fromStdString(e.device) : unknown,
        e.has_metadata ? QString::fromStdString(e.platform + " " + e.platform_version)
                       : tr("Written before NaNscope recorded metadata; it still loads, and gets metadata when a "
                            "run loads it"));
    set(kDriver, QString::fromStdString(e.driver));
    set(kProgram, e.has_metadata ? QString::fromStdString(e.program) : QString::fromStdString(e.key.substr(0, 16)),
        QString::fromStdString(e.path));
    set(kOptions, QString::fromStdString(e.options), QString::fromStdString(e.options));
    set(kSize, size_text(e.bytes));
    set(kBuildMs, e.build_ms ? QString::number(*e.build_ms, 'f', 0) : QString("-"));
    set(kBuilt, when(e.built_at.value_or(0)));
    set(kLastUse, when(e.last_used));
    const QString check = !v.verified ? QString() : e.problem.empty() ? tr("ok") : QString::fromStdString(e.problem);
    set(kCheck, check);
    if (v.verified && !e.problem.empty()) {
      ++bad;
      for (int c = 0; c < kColumns; ++c) table_->item(r, c)->setForeground(QColor(200, 0, 0));
    }
  }
  table_->setSortingEnabled(true);
  table_->resizeColumnsToContents();
  table_->setColumnWidth(kOptions, std::min(table_->columnWidth(kOptions), 320));
  QString text = v.error.isEmpty() ? v.message : tr("Error: %1").arg(v.error);
  if (!text.isEmpty()) text += "  ";
  text += tr("%1 programs, %2.").arg(v.entries.size()).arg(size_text(bytes));
  message_->setText(text);
  emit updated();
}

}  // namespace nanscope::gui
