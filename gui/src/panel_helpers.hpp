#pragma once
// What the configuration panels (config_panels.cpp, model_prompt_panels.cpp)
// share: their controls' ranges and tooltips from the settings table, and a
// few conversions.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSpinBox>
#include <QString>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

namespace nanscope::gui::panels {

inline constexpr const char* kComponentLabels[3] = {"Text encoder", "UNet", "VAE"};

inline QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<int>(s.size())); }

// Selects the item whose data is `value` (none when no item has it).
void select_data(QComboBox* box, const QString& value);
// "1.5 GiB", "512 MiB"; "n/a" for 0.
QString mib(std::uint64_t bytes);
// A folder holds a VAE when its config.json names an AutoencoderKL.
bool is_vae_folder(const QString& dir);
// A control's tooltip from its row of the settings table (setting_tooltip),
// and the key marked as shown so the More settings tab leaves it out.
void describe(QWidget* w, std::string_view key);
// A spin box's range (a size's 0 stands for the model's default) and tooltip from the table.
void from_table(QSpinBox* box, std::string_view key);
void from_table(QDoubleSpinBox* box, std::string_view key);
// A combo box of (label, value) items, the labels translated.
QComboBox* combo(std::initializer_list<std::pair<const char*, const char*>> items);

}  // namespace nanscope::gui::panels
