#pragma once
// The LoRAs of a run, in the Model panel: a list of files with a weight each
// and a UNet weight (A1111's <lora:NAME:TE:UNET>: the first weight is the
// text encoder's, the UNet's follows it until set apart), add, remove, how
// they are applied (lora.mode) and the folder <lora:NAME:WEIGHT> prompt tags
// are found in (lora_dir).

#include <QWidget>
#include <optional>

#include "engine_types.hpp"

class QComboBox;
class QLineEdit;
class QTableWidget;

namespace nanscope::gui {

class LoraList : public QWidget {
  Q_OBJECT
 public:
  explicit LoraList(QWidget* parent = nullptr);
  void load(const RunConfig& config);
  void store(RunConfig& config) const;
  // Adds a file with weight 1 (the Add button's dialog, a drop, tests).
  void add_file(const QString& path, double weight = 1.0, std::optional<double> unet_weight = std::nullopt);

 signals:
  void changed();

 private:
  QTableWidget* table_;
  QComboBox* mode_;
  QLineEdit* dir_;
};

}  // namespace nanscope::gui
