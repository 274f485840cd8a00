#include "layer_trace_panel.hpp"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

namespace nanscope::gui {

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString shape_text(const Shape& shape) {
  QStringList dims;
  for (auto d : shape) dims << QString::number(d);
  return "[" + dims.join(", ") + "]";
}

}  // namespace

LayerTracePanel::LayerTracePanel(QWidget* parent)
    : QWidget(parent), pick_(new QComboBox), summary_(new QLabel), table_(new QTableWidget(0, 9)) {
  setObjectName("layerTracePanel");
  table_->setObjectName("layerTrace");
  table_->setHorizontalHeaderLabels({tr("#"), tr("Module"), tr("Op"), tr("Output shape"), tr("Precision"),
                                     tr("Attention"), tr("max |x|"), tr("NaN / Inf"), tr("Inputs finite")});
  table_->verticalHeader()->hide();
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setWordWrap(false);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  summary_->setWordWrap(true);
  summary_->setTextFormat(Qt::RichText);
  summary_->setText(
      tr("A layer trace records every op of one UNet or VAE call. The engine takes one when a step "
         "or a decode goes wrong (or always, with inspect.trace=always), and names the op where "
         "it started."));
  pick_->setVisible(false);
  connect(pick_, qOverload<int>(&QComboBox::activated), this, &LayerTracePanel::show_trace);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addWidget(pick_);
  layout->addWidget(summary_);
  layout->addWidget(table_, 1);
}

void LayerTracePanel::clear() { set_traces({}); }

void LayerTracePanel::set_traces(const std::vector<inspect::LayerTrace>& traces) {
  traces_ = traces;
  pick_->clear();
  for (const auto& t : traces_) {
    QString label = qs(t.call) + tr(": %1 ops").arg(t.ops.size());
    if (const auto* o = t.origin_op()) label += tr(", origin %1").arg(qs(o->full_path()));
    pick_->addItem(label);
  }
  pick_->setVisible(traces_.size() > 1);
  // Show the first trace that names an origin, else the first one.
  int shown = traces_.empty() ? -1 : 0;
  for (std::size_t i = 0; i < traces_.size(); ++i)
    if (traces_[i].origin >= 0) {
      shown = static_cast<int>(i);
      break;
    }
  if (shown >= 0) pick_->setCurrentIndex(shown);
  show_trace(shown);
}

void LayerTracePanel::show_trace(int index) {
  table_->setRowCount(0);
  if (index < 0 || index >= static_cast<int>(traces_.size())) {
    if (traces_.empty())
      summary_->setText(
          tr("No layer trace in the last run: nothing went wrong that needed one. Set "
             "inspect.trace=always in a preset to trace every run."));
    return;
  }
  const inspect::LayerTrace& t = traces_[static_cast<std::size_t>(index)];
  QString text = tr("<b>%1</b>: %2 ops. ").arg(qs(t.call).toHtmlEscaped()).arg(t.ops.size());
  if (const auto* o = t.origin_op())
    text += tr("<span style='color:#c0392b'><b>Origin: %1</b> (%2), the first op whose inputs were finite and "
               "whose output was not.</span> ")
                .arg(qs(o->full_path()).toHtmlEscaped(), qs(o->op).toHtmlEscaped());
  else
    text += tr("No op turned finite inputs into non-finite output. ");
  if (const auto* n = t.near_limit_op())
    text += tr("<span style='color:#b9770e'>First op near its dtype's limit: %1.</span>")
                .arg(qs(n->full_path()).toHtmlEscaped());
  summary_->setText(text);

  table_->setRowCount(static_cast<int>(t.ops.size()));
  const QColor origin_bg("#f5b7b1"), near_bg("#fdebd0"), bad_fg("#922b21");
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    const auto& op = t.ops[i];
    const int row = static_cast<int>(i);
    const QStringList cells = {QString::number(op.index),
                               qs(op.full_path()) + (op.emulated_fault ? tr("  (EMULATED fault)") : QString()),
                               qs(op.op),
                               shape_text(op.shape),
                               qs(op.precision),
                               qs(op.attention),
                               QString::number(op.output.max_abs, 'g', 5),
                               op.output.nonfinite()
                                   ? QString("%1 / %2").arg(op.output.nan).arg(op.output.pos_inf + op.output.neg_inf)
                                   : QString("0"),
                               op.inputs_finite ? tr("yes") : tr("no")};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (static_cast<int>(i) == t.origin) {
        item->setBackground(origin_bg);
        QFont f = item->font();
        f.setBold(true);
        item->setFont(f);
      } else if (static_cast<int>(i) == t.near_limit) {
        item->setBackground(near_bg);
      } else if (op.output.nonfinite()) {
        item->setForeground(bad_fg);
      }
      table_->setItem(row, c, item);
    }
  }
  const int focus = t.origin >= 0 ? t.origin : t.near_limit;
  if (focus >= 0) {
    table_->selectRow(focus);
    table_->scrollToItem(table_->item(focus, 1), QAbstractItemView::PositionAtCenter);
  }
}

int LayerTracePanel::rows() const { return table_->rowCount(); }

int LayerTracePanel::origin_row() const {
  const int i = pick_->currentIndex();
  if (i < 0 || i >= static_cast<int>(traces_.size())) return -1;
  return traces_[static_cast<std::size_t>(i)].origin;
}

}  // namespace nanscope::gui
