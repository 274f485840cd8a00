// The precision, attention and VAE & NaN-policy panels (config_panels.hpp).
#include "config_panels.hpp"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include "config/inspect_settings.hpp"
#include "config/settings.hpp"
#include "core/error.hpp"
#include "panel_helpers.hpp"

namespace nanscope::gui {

using namespace panels;

// ---------------------------------------------------------------- precision

PrecisionPanel::PrecisionPanel(QWidget* parent)
    : ConfigPanel(parent), overrides_(new QTableWidget(0, 2)), override_error_(new QLabel) {
  setObjectName("precisionPanel");
  auto* grid = new QGridLayout;
  grid->addWidget(new QLabel(tr("<b>Storage</b>")), 0, 1);
  grid->addWidget(new QLabel(tr("<b>Accumulation</b>")), 0, 2);
  grid->addWidget(new QLabel(tr("<b>Softmax</b>")), 0, 3);
  for (int c = 0; c < 3; ++c) {
    grid->addWidget(new QLabel(tr(kComponentLabels[c])), c + 1, 0);
    const std::string comp(component_name(kComponents[c]));
    dtype_[c] = combo({{"f32", "f32"}, {"f16", "f16"}, {"bf16", "bf16"}});
    describe(dtype_[c], comp + ".dtype");
    accumulate_[c] = combo({{"f32", "f32"}, {"native (storage type)", "native"}});
    describe(accumulate_[c], comp + ".accumulate");
    softmax_[c] = combo({{"f32 (upcast)", "f32"}, {"native", "native"}});
    describe(softmax_[c], comp + ".attention.softmax");
    dtype_[c]->setObjectName(QString("dtype_%1").arg(qs(component_name(kComponents[c]))));
    accumulate_[c]->setObjectName(QString("accumulate_%1").arg(qs(component_name(kComponents[c]))));
    softmax_[c]->setObjectName(QString("softmax_%1").arg(qs(component_name(kComponents[c]))));
    grid->addWidget(dtype_[c], c + 1, 1);
    grid->addWidget(accumulate_[c], c + 1, 2);
    grid->addWidget(softmax_[c], c + 1, 3);
    for (QComboBox* b : {dtype_[c], accumulate_[c], softmax_[c]})
      connect(b, qOverload<int>(&QComboBox::activated), this, [this] { emit changed(); });
  }

  auto* box = new QGroupBox(tr("Per-module overrides (most specific pattern wins)"));
  overrides_->setObjectName("overrides");
  overrides_->setHorizontalHeaderLabels({tr("Module pattern"), tr("Settings")});
  overrides_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  overrides_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  overrides_->verticalHeader()->hide();
  overrides_->setMinimumHeight(80);
  overrides_->setToolTip(
      tr("Pattern: component.module.path with * for one segment, e.g. "
         "unet.up_blocks.*.attentions.*.attn1\nSettings: field=value separated by ';', e.g. "
         "accumulate=f32; attention.softmax=f32"));
  auto* add = new QPushButton(tr("Add"));
  auto* remove = new QPushButton(tr("Remove"));
  connect(add, &QPushButton::clicked, this, [this] {
    add_override_row("unet.up_blocks.*.attentions.*", "accumulate=f32");
    check_overrides();
    emit changed();
  });
  connect(remove, &QPushButton::clicked, this, [this] {
    const int row = overrides_->currentRow();
    if (row < 0) return;
    overrides_->removeRow(row);
    check_overrides();
    emit changed();
  });
  connect(overrides_, &QTableWidget::cellChanged, this, [this] {
    check_overrides();
    emit changed();
  });
  override_error_->setWordWrap(true);
  override_error_->setStyleSheet("color: #c0392b");
  override_error_->hide();
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(add);
  buttons->addWidget(remove);
  buttons->addStretch();
  auto* box_layout = new QVBoxLayout(box);
  box_layout->addWidget(overrides_);
  box_layout->addLayout(buttons);
  box_layout->addWidget(override_error_);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addLayout(grid);
  layout->addWidget(box, 1);
}

void PrecisionPanel::add_override_row(const QString& pattern, const QString& settings) {
  const QSignalBlocker block(overrides_);
  const int row = overrides_->rowCount();
  overrides_->insertRow(row);
  overrides_->setItem(row, 0, new QTableWidgetItem(pattern));
  overrides_->setItem(row, 1, new QTableWidgetItem(settings));
}

void PrecisionPanel::load(const RunConfig& c) {
  for (int i = 0; i < 3; ++i) {
    const auto& p = c.precision[static_cast<std::size_t>(i)].precision;
    select_data(dtype_[i], qs(dtype_name(p.dtype)));
    select_data(accumulate_[i], qs(accumulate_name(p.accumulate)));
    select_data(softmax_[i], qs(softmax_name(p.softmax)));
  }
  const QSignalBlocker block(overrides_);
  overrides_->setRowCount(0);
  for (const auto& o : c.overrides) {
    QStringList s;
    if (o.dtype) s << "dtype=" + qs(dtype_name(*o.dtype));
    if (o.accumulate) s << "accumulate=" + qs(accumulate_name(*o.accumulate));
    if (o.softmax) s << "attention.softmax=" + qs(softmax_name(*o.softmax));
    if (o.impl) s << "attention.impl=" + qs(attention_impl_name(*o.impl));
    if (o.slice_size) s << "attention.slice_size=" + QString::number(*o.slice_size);
    add_override_row(qs(o.pattern), s.join("; "));
  }
  check_overrides();
}

void PrecisionPanel::apply_overrides(RunConfig& c) const {
  c.overrides.clear();
  for (int row = 0; row < overrides_->rowCount(); ++row) {
    const QString pattern = overrides_->item(row, 0) ? overrides_->item(row, 0)->text().trimmed() : QString();
    const QString settings = overrides_->item(row, 1) ? overrides_->item(row, 1)->text() : QString();
    if (pattern.isEmpty()) throw ConfigError("override row " + std::to_string(row + 1) + ": the pattern is empty");
    for (const QString& part : settings.split(';', Qt::SkipEmptyParts)) {
      const int eq = part.indexOf('=');
      if (eq < 0)
        throw ConfigError("override row " + std::to_string(row + 1) + ": expected field=value, found '" +
                          part.trimmed().toStdString() + "'");
      c.set((pattern + "." + part.left(eq).trimmed()).toStdString(), part.mid(eq + 1).trimmed().toStdString());
    }
  }
}

void PrecisionPanel::check_overrides() {
  RunConfig probe;
  try {
    apply_overrides(probe);
    override_error_->hide();
  } catch (const std::exception& e) {
    override_error_->setText(QString::fromUtf8(e.what()));
    override_error_->show();
  }
}

void PrecisionPanel::store(RunConfig& c) const {
  for (int i = 0; i < 3; ++i) {
    auto& p = c.precision[static_cast<std::size_t>(i)].precision;
    p.dtype = *parse_dtype(dtype_[i]->currentData().toString().toStdString());
    p.accumulate = *parse_accumulate(accumulate_[i]->currentData().toString().toStdString());
    p.softmax = *parse_softmax(softmax_[i]->currentData().toString().toStdString());
  }
  apply_overrides(c);
}

// ---------------------------------------------------------------- attention

AttentionPanel::AttentionPanel(QWidget* parent) : ConfigPanel(parent) {
  setObjectName("attentionPanel");
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(6, 6, 6, 6);
  grid->addWidget(new QLabel(tr("<b>Implementation</b>")), 0, 1);
  grid->addWidget(new QLabel(tr("<b>Slice size</b>")), 0, 2);
  for (int c = 0; c < 3; ++c) {
    grid->addWidget(new QLabel(tr(kComponentLabels[c])), c + 1, 0);
    impl_[c] = combo({{"fused (one pass, online softmax)", "fused"},
                      {"bmm (full score matrix)", "bmm"},
                      {"sliced (score matrix in slices)", "sliced"}});
    impl_[c]->setObjectName(QString("impl_%1").arg(qs(component_name(kComponents[c]))));
    const std::string comp(component_name(kComponents[c]));
    describe(impl_[c], comp + ".attention.impl");
    slice_[c] = new QSpinBox;
    from_table(slice_[c], comp + ".attention.slice_size");
    grid->addWidget(impl_[c], c + 1, 1);
    grid->addWidget(slice_[c], c + 1, 2);
    connect(impl_[c], qOverload<int>(&QComboBox::currentIndexChanged), this,
            [this, c] { slice_[c]->setEnabled(impl_[c]->currentData().toString() == "sliced"); });
    connect(impl_[c], qOverload<int>(&QComboBox::activated), this, [this] { emit changed(); });
    connect(slice_[c], qOverload<int>(&QSpinBox::valueChanged), this, [this] { emit changed(); });
    slice_[c]->setEnabled(false);
  }
  grid->setColumnStretch(1, 1);
  grid->setRowStretch(4, 1);
}

void AttentionPanel::load(const RunConfig& c) {
  for (int i = 0; i < 3; ++i) {
    const auto& a = c.precision[static_cast<std::size_t>(i)].attention;
    const QSignalBlocker block(slice_[i]);
    select_data(impl_[i], qs(attention_impl_name(a.impl)));
    slice_[i]->setValue(a.slice_size);
  }
}

void AttentionPanel::store(RunConfig& c) const {
  for (int i = 0; i < 3; ++i) {
    auto& a = c.precision[static_cast<std::size_t>(i)].attention;
    a.impl = *parse_attention_impl(impl_[i]->currentData().toString().toStdString());
    a.slice_size = slice_[i]->value();
  }
}

// ---------------------------------------------------------------- VAE & NaN policy

VaePolicyPanel::VaePolicyPanel(QWidget* parent)
    : ConfigPanel(parent),
      policy_(combo({{"Report it and keep going", "report"},
                     {"Stop the run at the first non-finite step", "stop"},
                     {"Decode again in f32", "retry-vae-f32"},
                     {"Decode again with another VAE", "retry-vae"},
                     {"Upcast only the layer that broke to f32, redo that call", "retry-layer-f32"}})),
      retry_vae_(new QLineEdit),
      retry_browse_(new QPushButton(tr("Browse..."))),
      redecode_vae_(new QComboBox),
      redecode_dtype_(combo({{"f32", "f32"}, {"f16", "f16"}, {"bf16", "bf16"}})),
      redecode_image_(new QSpinBox),
      redecode_(new QPushButton(tr("Decode again"))),
      redecode_note_(new QLabel),
      decode_every_(new QSpinBox),
      stats_every_(new QSpinBox),
      layer_retry_limit_(new QSpinBox),
      trace_(combo(
          {{"When something breaks", "auto"}, {"Always (last step and decode too)", "always"}, {"Never", "off"}})),
      emulate_(combo({{"None (real numerics)", "none"}, {"R0 bands (EMULATED device quirk)", "r0"}})) {
  setObjectName("vaePolicyPanel");
  decode_every_->setObjectName("decodeEvery");
  from_table(decode_every_, "inspect.decode_every");
  decode_every_->setSpecialValueText(tr("off (latent preview only)"));
  decode_every_->setPrefix(tr("every "));
  decode_every_->setSuffix(tr(" steps"));
  // Long choices must not widen the dock: combos shrink to a short minimum and elide.
  for (QComboBox* c : {policy_, redecode_vae_, trace_, emulate_}) {
    c->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    c->setMinimumContentsLength(10);
  }
  // "every 1 step", "every 2 steps"
  for (QSpinBox* b : {decode_every_, stats_every_}) {
    connect(b, qOverload<int>(&QSpinBox::valueChanged), b,
            [b](int v) { b->setSuffix(v == 1 ? QObject::tr(" step") : QObject::tr(" steps")); });
  }
  stats_every_->setObjectName("statsEvery");
  from_table(stats_every_, "inspect.stats_every");
  stats_every_->setSpecialValueText(tr("off (image checks only)"));
  stats_every_->setPrefix(tr("every "));
  stats_every_->setSuffix(tr(" steps"));
  stats_every_->setValue(setting("inspect.stats_every").default_json().get<int>());
  layer_retry_limit_->setObjectName("layerRetryLimit");
  from_table(layer_retry_limit_, "inspect.layer_retry_limit");
  layer_retry_limit_->setSuffix(tr(" modules"));
  layer_retry_limit_->setValue(setting("inspect.layer_retry_limit").default_json().get<int>());
  trace_->setObjectName("traceMode");
  describe(trace_, "inspect.trace");
  emulate_->setObjectName("emulateFault");
  describe(emulate_, "inspect.emulate");
  for (QSpinBox* b : {decode_every_, stats_every_, layer_retry_limit_})
    connect(b, qOverload<int>(&QSpinBox::valueChanged), this, [this] { emit changed(); });
  for (QComboBox* c : {trace_, emulate_})
    connect(c, qOverload<int>(&QComboBox::activated), this, [this] { emit changed(); });
  policy_->setObjectName("nanPolicy");
  describe(policy_, "nan_policy");
  retry_vae_->setPlaceholderText(tr("VAE folder for the retry, e.g. vae-fp16-fix"));
  connect(policy_, qOverload<int>(&QComboBox::activated), this, [this] {
    update_enabled();
    emit changed();
  });
  connect(retry_vae_, &QLineEdit::textEdited, this, [this] { emit changed(); });
  connect(retry_browse_, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Choose the VAE for the retry"));
    if (dir.isEmpty()) return;
    retry_vae_->setText(QDir::cleanPath(dir));
    emit changed();
  });
  redecode_->setObjectName("redecodeButton");
  redecode_image_->setRange(1, 1);
  redecode_image_->setPrefix(tr("image "));
  redecode_note_->setWordWrap(true);
  redecode_note_->setText(tr("The last latent is kept: no new sampling (report R2)."));
  redecode_note_->setToolTip(
      tr("The sampled latent is kept after every run: decode it again with another VAE or "
         "precision without sampling again"));
  connect(redecode_, &QPushButton::clicked, this, [this] {
    emit redecodeRequested(redecode_image_->value() - 1, redecode_vae_->currentData().toString(),
                           redecode_dtype_->currentData().toString());
  });

  auto* retry_row = new QHBoxLayout;
  retry_row->addWidget(retry_vae_, 1);
  retry_row->addWidget(retry_browse_);
  auto* form = new QFormLayout;
  form->addRow(tr("On NaN/Inf:"), policy_);
  form->addRow(tr("Retry VAE:"), retry_row);
  form->addRow(tr("Upcast at most:"), layer_retry_limit_);

  auto* box = new QGroupBox(tr("Decode the last latent again"));
  auto* box_form = new QFormLayout(box);
  box_form->addRow(redecode_note_);
  box_form->addRow(tr("VAE:"), redecode_vae_);
  box_form->addRow(tr("Precision:"), redecode_dtype_);
  auto* row = new QHBoxLayout;
  row->addWidget(redecode_image_);
  row->addWidget(redecode_, 1);
  box_form->addRow(row);

  auto* inspector = new QGroupBox(tr("Inspector"));
  auto* inspector_form = new QFormLayout(inspector);
  inspector_form->addRow(tr("Step statistics:"), stats_every_);
  inspector_form->addRow(tr("Full preview:"), decode_every_);
  inspector_form->addRow(tr("Layer trace:"), trace_);
  inspector_form->addRow(tr("Fault emulation:"), emulate_);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addLayout(form);
  layout->addWidget(box);
  layout->addWidget(inspector);
  layout->addStretch();
  update_enabled();
}

void VaePolicyPanel::set_vae_choices(const QList<VaeChoice>& choices) {
  const QString keep = redecode_vae_->currentData().toString();
  redecode_vae_->clear();
  for (const auto& c : choices) redecode_vae_->addItem(c.label, c.path);
  select_data(redecode_vae_, keep);
  // Offer the first variant as the retry VAE when none is set.
  if (retry_vae_->placeholderText().startsWith(tr("VAE folder")) && choices.size() > 1)
    retry_vae_->setPlaceholderText(tr("VAE folder for the retry, e.g. %1").arg(choices[1].path));
}

void VaePolicyPanel::set_redecode_available(bool available, int images) {
  redecode_available_ = available && images > 0;
  redecode_image_->setRange(1, std::max(1, images));
  redecode_image_->setVisible(images > 1);
  update_enabled();
}

void VaePolicyPanel::update_enabled() {
  const bool retry_vae = policy_->currentData().toString() == "retry-vae";
  retry_vae_->setEnabled(retry_vae);
  retry_browse_->setEnabled(retry_vae);
  layer_retry_limit_->setEnabled(policy_->currentData().toString() == "retry-layer-f32");
  redecode_->setEnabled(redecode_available_);
  redecode_vae_->setEnabled(redecode_available_);
  redecode_dtype_->setEnabled(redecode_available_);
  redecode_image_->setEnabled(redecode_available_);
}

void VaePolicyPanel::load(const RunConfig& c) {
  switch (c.nan_policy.kind) {
    case NanPolicy::Kind::report: select_data(policy_, "report"); break;
    case NanPolicy::Kind::stop: select_data(policy_, "stop"); break;
    case NanPolicy::Kind::retry_vae_f32: select_data(policy_, "retry-vae-f32"); break;
    case NanPolicy::Kind::retry_vae: select_data(policy_, "retry-vae"); break;
    case NanPolicy::Kind::retry_layer_f32: select_data(policy_, "retry-layer-f32"); break;
  }
  retry_vae_->setText(qs(c.nan_policy.vae_path));
  inspect::InspectSettings insp;
  try {
    insp = inspect_settings(c.inspect);
  } catch (const ConfigError&) {
    // A bad inspect.* value is reported when the run starts; show the defaults meanwhile.
  }
  decode_every_->setValue(insp.decode_every);
  stats_every_->setValue(insp.stats_every);
  layer_retry_limit_->setValue(insp.layer_retry_limit);
  select_data(trace_, insp.trace == inspect::TraceMode::always ? "always"
                      : insp.trace == inspect::TraceMode::off  ? "off"
                                                               : "auto");
  select_data(emulate_, insp.emulate_r0 ? "r0" : "none");
  update_enabled();
}

void VaePolicyPanel::store(RunConfig& c) const {
  const QString p = policy_->currentData().toString();
  if (p == "retry-vae") {
    const QString path = retry_vae_->text().trimmed();
    if (path.isEmpty()) throw ConfigError("nan_policy: 'Decode again with another VAE' needs a VAE folder");
    c.set("nan_policy", ("retry-vae:" + path).toStdString());
  } else {
    c.set("nan_policy", p.toStdString());
  }
  // set() leaves defaults out of RunConfig::inspect (and so out of the
  // preset); inspect.* keys without a control here (emulate_min_tokens) are kept.
  c.set("inspect.decode_every", std::to_string(decode_every_->value()));
  c.set("inspect.stats_every", std::to_string(stats_every_->value()));
  c.set("inspect.layer_retry_limit", std::to_string(layer_retry_limit_->value()));
  c.set("inspect.trace", trace_->currentData().toString().toStdString());
  c.set("inspect.emulate", emulate_->currentData().toString().toStdString());
}

}  // namespace nanscope::gui
