#include "settings_panel.hpp"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QRegularExpressionValidator>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>
#include <set>
#include <string>

#include "config/settings.hpp"

namespace nanscope::gui {

namespace {

std::set<std::string, std::less<>>& shown() {
  static std::set<std::string, std::less<>> keys;
  return keys;
}

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<int>(s.size())); }

// "inspect.emulate_min_tokens" -> "Emulate min tokens (inspect)": the label of a row's editor.
QString label_of(const Setting& row) {
  std::string key = row.key, group;
  if (const auto dot = key.rfind('.'); dot != std::string::npos) {
    group = key.substr(0, dot);
    key = key.substr(dot + 1);
  }
  QString text = qs(key).replace('_', ' ');
  if (!text.isEmpty()) text[0] = text[0].toUpper();
  if (!group.empty()) text += QString(" (%1)").arg(qs(group).replace('_', ' '));
  return text + ":";
}

QWidget* make_editor(const Setting& row) {
  switch (row.type) {
    case SettingType::choice: {
      auto* box = new QComboBox;
      for (const auto& c : row.choices) box->addItem(qs(c), qs(c));
      return box;
    }
    case SettingType::integer:
    case SettingType::size: {
      auto* box = new QSpinBox;
      box->setRange(row.type == SettingType::size ? 0 : static_cast<int>(row.min), static_cast<int>(row.max));
      if (row.type == SettingType::size) box->setSingleStep(8);
      return box;
    }
    case SettingType::number: {
      auto* box = new QDoubleSpinBox;
      box->setRange(row.min, row.max);
      box->setDecimals(3);
      return box;
    }
    case SettingType::seed: {
      auto* edit = new QLineEdit;
      edit->setValidator(new QRegularExpressionValidator(QRegularExpression("[0-9]{1,20}"), edit));
      return edit;
    }
    case SettingType::seed_list:
    case SettingType::text: return new QLineEdit;
  }
  return new QLineEdit;
}

}  // namespace

QString setting_tooltip(const Setting& row) {
  return QString("%1\n\n--set %2: %3").arg(qs(row.help), qs(row.key), qs(row.allowed()));
}

void mark_shown(std::string_view key) { shown().emplace(key); }
bool is_shown(std::string_view key) { return shown().count(key) > 0; }

MoreSettingsPanel::MoreSettingsPanel(QWidget* parent) : ConfigPanel(parent) {
  setObjectName("moreSettingsPanel");
  auto* form = new QFormLayout;
  for (const Setting& row : settings()) {
    if (is_shown(row.key)) continue;
    QWidget* w = make_editor(row);
    w->setObjectName(qs(row.key));
    w->setToolTip(setting_tooltip(row));
    auto notify = [this] { emit changed(); };
    if (auto* box = qobject_cast<QComboBox*>(w)) connect(box, qOverload<int>(&QComboBox::activated), this, notify);
    if (auto* box = qobject_cast<QSpinBox*>(w)) connect(box, qOverload<int>(&QSpinBox::valueChanged), this, notify);
    if (auto* box = qobject_cast<QDoubleSpinBox*>(w))
      connect(box, qOverload<double>(&QDoubleSpinBox::valueChanged), this, notify);
    if (auto* edit = qobject_cast<QLineEdit*>(w)) connect(edit, &QLineEdit::textEdited, this, notify);
    auto* label = new QLabel(label_of(row));
    label->setToolTip(w->toolTip());
    form->addRow(label, w);
    editors_.push_back({&row, w});
  }
  auto* note =
      new QLabel(tr("Settings without a control of their own in the other panels. Hover over one for what "
                    "it does; the same keys work with nanscope-cli --set."));
  note->setWordWrap(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addWidget(note);
  layout->addLayout(form);
  layout->addStretch();
  load(RunConfig{});
}

QStringList MoreSettingsPanel::keys() const {
  QStringList out;
  for (const auto& e : editors_) out << qs(e.row->key);
  return out;
}

void MoreSettingsPanel::load(const RunConfig& config) {
  for (const auto& e : editors_) {
    const QSignalBlocker block(e.widget);
    const nlohmann::json v = e.row->get(config);
    if (auto* box = qobject_cast<QComboBox*>(e.widget)) {
      const int i = box->findData(qs(e.row->format(v)));
      if (i >= 0) box->setCurrentIndex(i);
    } else if (auto* spin = qobject_cast<QSpinBox*>(e.widget)) {
      spin->setValue(v.get<int>());
    } else if (auto* dspin = qobject_cast<QDoubleSpinBox*>(e.widget)) {
      dspin->setValue(v.get<double>());
    } else if (auto* edit = qobject_cast<QLineEdit*>(e.widget)) {
      edit->setText(qs(e.row->format(v)));
    }
  }
}

void MoreSettingsPanel::store(RunConfig& config) const {
  for (const auto& e : editors_) {
    QString text;
    if (auto* box = qobject_cast<QComboBox*>(e.widget)) {
      text = box->currentData().toString();
    } else if (auto* spin = qobject_cast<QSpinBox*>(e.widget)) {
      text = QString::number(spin->value());
    } else if (auto* dspin = qobject_cast<QDoubleSpinBox*>(e.widget)) {
      text = QString::number(dspin->value(), 'g', 17);
    } else if (auto* edit = qobject_cast<QLineEdit*>(e.widget)) {
      text = edit->text();
    }
    // Through the table like --set: a value the editor let through but the row refuses is a ConfigError
    // naming the key, shown by the caller like any invalid setting.
    config.set(e.row->key, text.toStdString());
  }
}

}  // namespace nanscope::gui
