#include "panel_helpers.hpp"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>

#include "config/settings.hpp"
#include "settings_panel.hpp"

namespace nanscope::gui::panels {

void select_data(QComboBox* box, const QString& value) {
  const int i = box->findData(value);
  if (i >= 0) box->setCurrentIndex(i);
}

QString mib(std::uint64_t bytes) {
  if (bytes == 0) return QObject::tr("n/a");
  if (bytes >= (1ULL << 30)) return QString("%1 GiB").arg(static_cast<double>(bytes) / (1ULL << 30), 0, 'f', 1);
  return QString("%1 MiB").arg(bytes >> 20);
}

bool is_vae_folder(const QString& dir) {
  QFile f(QDir(dir).filePath("config.json"));
  if (!f.open(QIODevice::ReadOnly)) return false;
  const auto doc = QJsonDocument::fromJson(f.readAll());
  return doc.object().value("_class_name").toString().startsWith("AutoencoderKL");
}

void describe(QWidget* w, std::string_view key) {
  mark_shown(key);
  w->setToolTip(setting_tooltip(setting(key)));
}

void from_table(QSpinBox* box, std::string_view key) {
  const Setting& row = setting(key);
  box->setRange(row.type == SettingType::size ? 0 : static_cast<int>(row.min), static_cast<int>(row.max));
  describe(box, key);
}

void from_table(QDoubleSpinBox* box, std::string_view key) {
  const Setting& row = setting(key);
  box->setRange(row.min, row.max);
  describe(box, key);
}

QComboBox* combo(std::initializer_list<std::pair<const char*, const char*>> items) {
  auto* box = new QComboBox;
  for (const auto& [label, value] : items) box->addItem(QObject::tr(label), QString(value));
  return box;
}

}  // namespace nanscope::gui::panels
