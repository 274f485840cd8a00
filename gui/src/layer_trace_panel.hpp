#pragma once
// The layer trace of a run: every op of one traced UNet or VAE call with its
// module path, effective precision and output statistics. The origin (the
// first op whose inputs were finite and whose output was not) is highlighted
// and scrolled to; so is the first op that came within 10% of its dtype's limit.

#include <QWidget>
#include <vector>

#include "inspect/inspect.hpp"

class QComboBox;
class QLabel;
class QTableWidget;

namespace nanscope::gui {

class LayerTracePanel : public QWidget {
  Q_OBJECT
 public:
  explicit LayerTracePanel(QWidget* parent = nullptr);

  void clear();
  void set_traces(const std::vector<inspect::LayerTrace>& traces);
  int rows() const;
  int origin_row() const;  // -1 when the shown trace has no origin

 private:
  void show_trace(int index);

  std::vector<inspect::LayerTrace> traces_;
  QComboBox* pick_;
  QLabel* summary_;
  QTableWidget* table_;
};

}  // namespace nanscope::gui
