#include "lora_list.hpp"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QTableWidget>
#include <QVBoxLayout>

#include "config/settings.hpp"
#include "settings_panel.hpp"

namespace nanscope::gui {

namespace {
QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<int>(s.size())); }
}  // namespace

LoraList::LoraList(QWidget* parent)
    : QWidget(parent), table_(new QTableWidget(0, 3)), mode_(new QComboBox), dir_(new QLineEdit) {
  setObjectName("loraList");
  for (const char* key : {"lora", "lora.mode", "lora_dir"}) mark_shown(key);

  table_->setObjectName("loraTable");
  table_->setHorizontalHeaderLabels({tr("Weight"), tr("UNet"), tr("LoRA file")});
  table_->horizontalHeaderItem(0)->setToolTip(tr("The text encoder's weight, and the UNet's unless set apart"));
  table_->horizontalHeaderItem(1)->setToolTip(
      tr("The UNet's weight (A1111's <lora:NAME:TE:UNET>); it follows Weight until changed"));
  // The weights first: they stay in view when the panel is narrower than the file names.
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::Stretch);
  table_->verticalHeader()->hide();
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setMinimumHeight(fontMetrics().lineSpacing() * 3 + 12);
  table_->setMaximumHeight(fontMetrics().lineSpacing() * 6 + 12);
  table_->setToolTip(setting_tooltip(setting("lora")));

  auto* add = new QPushButton(tr("Add LoRA..."));
  add->setObjectName("loraAdd");
  auto* remove = new QPushButton(tr("Remove"));
  remove->setObjectName("loraRemove");
  connect(add, &QPushButton::clicked, this, [this] {
    const QStringList files =
        QFileDialog::getOpenFileNames(this, tr("Choose LoRA files"), dir_->text(), tr("LoRA files (*.safetensors)"));
    for (const QString& f : files) add_file(f);
    if (!files.isEmpty()) emit changed();
  });
  connect(remove, &QPushButton::clicked, this, [this] {
    const int row = table_->currentRow();
    if (row < 0) return;
    table_->removeRow(row);
    emit changed();
  });

  mode_->setObjectName("loraMode");
  mode_->addItem(tr("merged"), "merge");
  mode_->addItem(tr("unmerged (<module>.lora)"), "unmerged");
  mode_->setToolTip(setting_tooltip(setting("lora.mode")));
  connect(mode_, qOverload<int>(&QComboBox::activated), this, [this] { emit changed(); });

  dir_->setObjectName("loraDir");
  dir_->setPlaceholderText(tr("for <lora:NAME:WEIGHT>"));
  dir_->setToolTip(setting_tooltip(setting("lora_dir")));
  connect(dir_, &QLineEdit::editingFinished, this, [this] { emit changed(); });
  auto* browse = new QPushButton(tr("Folder..."));
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Choose the LoRA folder"), dir_->text());
    if (d.isEmpty()) return;
    dir_->setText(d);
    emit changed();
  });

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(add);
  buttons->addWidget(remove);
  buttons->addStretch(1);
  auto* dir_row = new QHBoxLayout;
  dir_row->addWidget(dir_, 1);
  dir_row->addWidget(browse);
  auto* form = new QFormLayout;
  form->addRow(tr("Apply:"), mode_);
  form->addRow(tr("LoRA folder:"), dir_row);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(table_);
  layout->addLayout(buttons);
  layout->addLayout(form);
}

void LoraList::add_file(const QString& path, double weight, std::optional<double> unet_weight) {
  const int row = table_->rowCount();
  table_->insertRow(row);
  auto* item = new QTableWidgetItem(QFileInfo(path).fileName());
  item->setData(Qt::UserRole, path);
  item->setToolTip(path);
  table_->setItem(row, 2, item);
  auto spin = [](const char* name, double value) {
    auto* w = new QDoubleSpinBox;
    w->setObjectName(name);
    w->setRange(-100, 100);  // the lora setting's range (config/lora_list.hpp)
    w->setDecimals(2);
    w->setSingleStep(0.05);
    w->setValue(value);
    return w;
  };
  auto* w = spin("loraWeight", weight);
  auto* u = spin("loraUnetWeight", unet_weight.value_or(weight));
  connect(w, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this, w, u](double v) {
    // The UNet's weight follows until it is set apart (A1111: unet defaults to te).
    if (u->value() == w->property("previous").toDouble()) {
      const QSignalBlocker b(u);
      u->setValue(v);
    }
    w->setProperty("previous", v);
    emit changed();
  });
  w->setProperty("previous", weight);
  connect(u, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] { emit changed(); });
  table_->setCellWidget(row, 0, w);
  table_->setCellWidget(row, 1, u);
}

void LoraList::load(const RunConfig& c) {
  table_->setRowCount(0);
  for (const auto& l : c.loras) add_file(qs(l.path), l.weight, l.unet_weight);
  mode_->setCurrentIndex(c.lora_unmerged ? 1 : 0);
  dir_->setText(qs(c.lora_dir));
}

void LoraList::store(RunConfig& c) const {
  c.loras.clear();
  for (int r = 0; r < table_->rowCount(); ++r) {
    const auto* w = qobject_cast<const QDoubleSpinBox*>(table_->cellWidget(r, 0));
    const auto* u = qobject_cast<const QDoubleSpinBox*>(table_->cellWidget(r, 1));
    LoraRef l{.path = table_->item(r, 2)->data(Qt::UserRole).toString().toStdString(),
              .weight = w ? w->value() : 1.0,
              .unet_weight = std::nullopt};
    if (u && u->value() != l.weight) l.unet_weight = u->value();
    c.loras.push_back(std::move(l));
  }
  c.lora_unmerged = mode_->currentData().toString() == "unmerged";
  c.lora_dir = dir_->text().toStdString();
}

}  // namespace nanscope::gui
