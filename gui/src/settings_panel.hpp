#pragma once
// The settings the other panels do not show, each with an editor made from
// its row of the settings table (config/settings.hpp): a choice is a combo
// box, an integer or a size a spin box with the row's range, a number a
// decimal spin box, text a line edit; the tooltip is the row's help. A new
// row in config/settings.cpp appears here, loaded, stored, validated and
// explained, without GUI code; a panel that gives a key its own control says
// so with mark_shown() and the key leaves this list.

#include <string_view>
#include <vector>

#include "config_panels.hpp"

class QString;
class QWidget;

namespace nanscope {
struct Setting;
}

namespace nanscope::gui {

// A control's tooltip from its settings-table row: the help text, then the
// `--set` key and what it allows, so the workbench and the CLI describe a
// setting in the same words.
QString setting_tooltip(const Setting& row);

// Called by the panels for every key they show (config_panels.cpp's describe()).
void mark_shown(std::string_view key);
bool is_shown(std::string_view key);

class MoreSettingsPanel : public ConfigPanel {
  Q_OBJECT
 public:
  // Lists the rows not marked shown when it is made: make it after the other panels.
  explicit MoreSettingsPanel(QWidget* parent = nullptr);
  void load(const RunConfig& config) override;
  void store(RunConfig& config) const override;
  // The keys listed here, in table order.
  QStringList keys() const;

 private:
  struct Editor {
    const Setting* row;
    QWidget* widget;
  };
  std::vector<Editor> editors_;
};

}  // namespace nanscope::gui
