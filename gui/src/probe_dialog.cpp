#include "probe_dialog.hpp"

#include <QBrush>
#include <QColor>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <iterator>

#include "engine_controller.hpp"

namespace nanscope::gui {

void register_probe_types() {
  qRegisterMetaType<ProbeResult>("nanscope::gui::ProbeResult");
  qRegisterMetaType<F16Result>("nanscope::gui::F16Result");
}

namespace {

// Sorts by a number (Qt::UserRole), shows text.
class Item final : public QTableWidgetItem {
 public:
  Item(const QString& text, double key) : QTableWidgetItem(text) {
    setData(Qt::UserRole, key);
    setFlags(flags() & ~Qt::ItemIsEditable);
  }
  bool operator<(const QTableWidgetItem& other) const override {
    const QVariant a = data(Qt::UserRole), b = other.data(Qt::UserRole);
    if (a.isValid() && b.isValid()) return a.toDouble() < b.toDouble();
    return QTableWidgetItem::operator<(other);
  }
};

Item* text_item(const QString& s) {
  auto* i = new Item(s, 0);
  i->setData(Qt::UserRole, QVariant());
  return i;
}

QString num(double v) {
  if (std::isinf(v)) return QStringLiteral("inf");
  return QString::number(v, 'g', 3);
}

double sort_key(double v) { return std::isfinite(v) ? v : 1e308; }

const QColor kAgrees(214, 240, 214), kDiffers(255, 222, 170), kNonFinite(255, 190, 190);

}  // namespace

ProbeDialog::ProbeDialog(EngineController* controller, QWidget* parent)
    : QDialog(parent),
      controller_(controller),
      summary_(new QLabel),
      progress_(new QProgressBar),
      cancel_(new QPushButton(tr("Cancel"))),
      table_(new QTableWidget),
      overrides_label_(new QLabel),
      apply_(new QPushButton(tr("Apply these overrides"))) {
  register_probe_types();
  setObjectName("probeDialog");
  resize(1200, 640);
  summary_->setObjectName("probeSummary");
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  progress_->setObjectName("probeProgress");
  cancel_->setObjectName("probeCancel");
  table_->setObjectName("probeTable");
  table_->setSortingEnabled(true);
  table_->setAlternatingRowColors(false);
  table_->verticalHeader()->setVisible(false);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->horizontalHeader()->setStretchLastSection(true);
  overrides_label_->setObjectName("probeOverrides");
  overrides_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  overrides_label_->setVisible(false);
  apply_->setObjectName("probeApply");
  apply_->setVisible(false);
  apply_->setToolTip(
      tr("Write these per-module overrides into the current settings (the Precision panel lists "
         "them; Save preset keeps them)"));

  auto* top = new QHBoxLayout;
  top->addWidget(progress_, 1);
  top->addWidget(cancel_);
  auto* fix = new QHBoxLayout;
  fix->addWidget(overrides_label_, 1);
  fix->addWidget(apply_);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(summary_);
  layout->addLayout(top);
  layout->addWidget(table_, 1);
  layout->addLayout(fix);

  connect(cancel_, &QPushButton::clicked, this, [this] {
    controller_->cancel();
    summary_->setText(tr("Cancelling after the current op..."));
  });
  connect(apply_, &QPushButton::clicked, this, [this] {
    emit applyOverrides(overrides_);
    apply_->setEnabled(false);
    apply_->setText(tr("Applied"));
  });
  connect(this, &ProbeDialog::requestProbe, controller_, &EngineController::probeDevice);
  connect(this, &ProbeDialog::requestF16Safety, controller_, &EngineController::checkF16Safety);
  connect(controller_, &EngineController::probeProgress, this, [this](int done, int total, const QString& last) {
    if (!busy_) return;
    progress_->setRange(0, total);
    progress_->setValue(done);
    progress_->setFormat(tr("%v of %m ops"));
    summary_->setText(tr("Probing: %1 of %2 distinct ops (last: %3)").arg(done).arg(total).arg(last));
  });
  connect(controller_, &EngineController::probeFinished, this, [this](const ProbeResult& r) { show_probe(r); });
  connect(controller_, &EngineController::f16SafetyFinished, this, [this](const F16Result& r) { show_f16(r); });
  set_busy(false);
}

QString ProbeDialog::summary() const { return summary_->text(); }

void ProbeDialog::set_busy(bool on) {
  busy_ = on;
  cancel_->setEnabled(on);
  cancel_->setVisible(on);
  progress_->setVisible(on);
}

bool ProbeDialog::start(Mode mode, const RunConfig& config) {
  if (busy_) return false;
  mode_ = mode;
  overrides_.clear();
  table_->clear();
  table_->setRowCount(0);
  overrides_label_->setVisible(false);
  apply_->setVisible(false);
  apply_->setEnabled(true);
  apply_->setText(tr("Apply these overrides"));
  progress_->setRange(0, 0);  // busy until the op count is known
  progress_->setFormat(QString());
  set_busy(true);
  controller_->note_request();
  if (mode == Mode::device) {
    setWindowTitle(tr("Device probe"));
    summary_->setText(tr("Recording the model's ops, then each distinct op on the device and on the reference..."));
    emit requestProbe(config);
  } else {
    setWindowTitle(tr("f16 safety"));
    summary_->setText(tr("One UNet call and one VAE decode in f32, every module's largest |x|..."));
    emit requestF16Safety(config);
  }
  return true;
}

void ProbeDialog::show_probe(const ProbeResult& r) {
  if (!busy_ || mode_ != Mode::device) return;
  set_busy(false);
  if (!r.error.isEmpty()) {
    summary_->setText(tr("The device probe failed: %1").arg(r.error));
    emit finishedProbe(false);
    return;
  }
  const auto& rep = r.report;
  QString head = QString::fromStdString(rep.summary);
  if (!rep.emulation.empty()) head += "\n" + QString::fromStdString(rep.emulation);
  summary_->setText(head);
  const QStringList headers = {tr("#"),       tr("Verdict"),    tr("Op"),      tr("Modules"),
                               tr("Calls"),   tr("Precision"),  tr("Max rel"), tr("NMSE"),
                               tr("Max ulp"), tr("Non-finite"), tr("Shapes")};
  table_->setSortingEnabled(false);
  table_->setColumnCount(static_cast<int>(headers.size()));
  table_->setHorizontalHeaderLabels(headers);
  table_->setRowCount(static_cast<int>(rep.rows.size()));
  for (int i = 0; i < static_cast<int>(rep.rows.size()); ++i) {
    const auto& row = rep.rows[static_cast<std::size_t>(i)];
    QStringList modules;
    for (const auto& m : row.modules) modules << QString::fromStdString(m);
    const QColor colour = row.verdict == studies::ProbeVerdict::agrees    ? kAgrees
                          : row.verdict == studies::ProbeVerdict::differs ? kDiffers
                                                                          : kNonFinite;
    auto* verdict = new Item(QString::fromUtf8(studies::probe_verdict_name(row.verdict).data()),
                             -static_cast<double>(i));  // worst first when sorted descending
    auto* mods = text_item(modules.size() > 1 ? tr("%1 (+%2 more)").arg(modules.front()).arg(modules.size() - 1)
                                              : modules.value(0));
    mods->setToolTip(modules.join("\n"));
    auto* shapes = text_item(QString::fromStdString(row.shapes() + "  " + row.params));
    QTableWidgetItem* items[] = {new Item(QString::number(i + 1), i),
                                 verdict,
                                 text_item(QString::fromStdString(row.op) + (row.emulated ? tr(" [EMULATED]") : "")),
                                 mods,
                                 new Item(QString::number(row.calls), row.calls),
                                 text_item(QString::fromStdString(row.precision)),
                                 new Item(num(row.max_rel), sort_key(row.max_rel)),
                                 new Item(num(row.nmse), sort_key(row.nmse)),
                                 new Item(QString::number(row.max_ulp), static_cast<double>(row.max_ulp)),
                                 new Item(QString::number(row.nonfinite + row.mismatched_nonfinite),
                                          static_cast<double>(row.nonfinite + row.mismatched_nonfinite)),
                                 shapes};
    for (int c = 0; c < static_cast<int>(std::size(items)); ++c) {
      items[c]->setBackground(QBrush(colour));
      table_->setItem(i, c, items[c]);
    }
  }
  table_->setSortingEnabled(true);
  table_->sortByColumn(0, Qt::AscendingOrder);
  table_->resizeColumnsToContents();
  table_->setColumnWidth(3, std::min(table_->columnWidth(3), 420));
  emit finishedProbe(true);
}

void ProbeDialog::show_f16(const F16Result& r) {
  if (!busy_ || mode_ != Mode::f16_safety) return;
  set_busy(false);
  if (r.cancelled) {
    summary_->setText(tr("The f16-safety probe was cancelled."));
    emit finishedProbe(false);
    return;
  }
  if (!r.error.isEmpty()) {
    summary_->setText(tr("The f16-safety probe failed: %1").arg(r.error));
    emit finishedProbe(false);
    return;
  }
  const auto& rep = r.report;
  summary_->setText(QString::fromStdString(rep.summary) + "\n" + tr("VAE: %1").arg(QString::fromStdString(rep.vae)));
  const QStringList headers = {
      tr("#"), tr("Module"), tr("Op"), tr("Max |x|"), tr("f16 headroom"), tr("bf16 headroom"), tr("Reads"), tr("f16")};
  table_->setSortingEnabled(false);
  table_->setColumnCount(static_cast<int>(headers.size()));
  table_->setHorizontalHeaderLabels(headers);
  table_->setRowCount(static_cast<int>(rep.modules.size()));
  for (int i = 0; i < static_cast<int>(rep.modules.size()); ++i) {
    const auto& m = rep.modules[static_cast<std::size_t>(i)];
    const QString flag = m.overflows_f16   ? tr("OVERFLOWS")
                         : m.at_risk       ? tr("at risk (headroom < %1x)").arg(pipeline::kF16RiskHeadroom)
                         : m.reads_at_risk ? tr("reads a value at risk")
                                           : tr("safe");
    const QColor colour = m.overflows_f16 ? kNonFinite : m.flagged() ? kDiffers : kAgrees;
    QTableWidgetItem* items[] = {new Item(QString::number(i + 1), i),
                                 text_item(QString::fromStdString(m.module)),
                                 text_item(QString::fromStdString(m.op)),
                                 new Item(num(m.max_abs), m.max_abs),
                                 new Item(num(m.headroom_f16) + "x", sort_key(m.headroom_f16)),
                                 new Item(num(m.headroom_bf16) + "x", sort_key(m.headroom_bf16)),
                                 new Item(num(m.input_max), m.input_max),
                                 text_item(flag)};
    for (int c = 0; c < static_cast<int>(std::size(items)); ++c) {
      items[c]->setBackground(QBrush(colour));
      table_->setItem(i, c, items[c]);
    }
  }
  table_->setSortingEnabled(true);
  table_->sortByColumn(0, Qt::AscendingOrder);
  table_->resizeColumnsToContents();
  for (const auto& o : rep.overrides) overrides_ << QString::fromStdString(o);
  if (!overrides_.isEmpty()) {
    overrides_label_->setText(tr("Keeps an f16 run finite (these modules in f32):\n%1").arg(overrides_.join("\n")));
    overrides_label_->setVisible(true);
    apply_->setVisible(true);
  }
  emit finishedProbe(true);
}

}  // namespace nanscope::gui
