#include "config_panels.hpp"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRandomGenerator>
#include <QRegularExpressionValidator>
#include <QSpinBox>
#include <QStyle>
#include <QTableWidget>
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "config/inspect_settings.hpp"
#include "config/settings.hpp"
#include "core/error.hpp"
#include "lora_list.hpp"
#include "settings_panel.hpp"

namespace nanscope::gui {

namespace {

constexpr const char* kComponentLabels[3] = {"Text encoder", "UNet", "VAE"};

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<int>(s.size())); }

void select_data(QComboBox* box, const QString& value) {
  const int i = box->findData(value);
  if (i >= 0) box->setCurrentIndex(i);
}

QString mib(std::uint64_t bytes) {
  if (bytes == 0) return QObject::tr("n/a");
  if (bytes >= (1ULL << 30)) return QString("%1 GiB").arg(static_cast<double>(bytes) / (1ULL << 30), 0, 'f', 1);
  return QString("%1 MiB").arg(bytes >> 20);
}

// A folder holds a VAE when its config.json names an AutoencoderKL.
bool is_vae_folder(const QString& dir) {
  QFile f(QDir(dir).filePath("config.json"));
  if (!f.open(QIODevice::ReadOnly)) return false;
  const auto doc = QJsonDocument::fromJson(f.readAll());
  return doc.object().value("_class_name").toString().startsWith("AutoencoderKL");
}

// A control's tooltip from its row of the settings table (setting_tooltip),
// and the key marked as shown so the More settings tab leaves it out.
void describe(QWidget* w, std::string_view key) {
  mark_shown(key);
  w->setToolTip(setting_tooltip(setting(key)));
}

// A spin box's range (a size's 0 stands for the model's default) and tooltip from the table.
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

}  // namespace

// ---------------------------------------------------------------- model & device

ModelDevicePanel::ModelDevicePanel(QWidget* parent)
    : ConfigPanel(parent),
      model_(new QLineEdit),
      model_note_(new QLabel),
      vae_(new QComboBox),
      loras_(new LoraList),
      device_(new QComboBox),
      devices_(new QTreeWidget),
      device_notes_(new QLabel),
      kernels_(new QLabel),
      kernel_live_(new QLabel),
      kernel_busy_(new QProgressBar) {
  setObjectName("modelDevicePanel");
  setAcceptDrops(true);
  model_->setObjectName("modelFolder");
  model_->setToolTip(
      tr("A diffusers model folder (with model_index.json) or a single-file checkpoint "
         "(.safetensors, SD 1.x/2.x/SDXL). Empty: the embedded model. You can also drop one here."));
  auto* browse = new QPushButton(tr("Folder..."));
  browse->setToolTip(tr("Choose a diffusers model folder"));
  auto* browse_file = new QPushButton(tr("File..."));
  browse_file->setToolTip(
      tr("Choose a single-file checkpoint (.safetensors; the CLIP tokenizer is read from "
         "tokenizer/ beside it)"));
  auto* embedded = new QPushButton(tr("Embedded"));
  embedded->setToolTip(tr("Use the embedded nanscope-tiny model"));
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Choose a diffusers model folder"), model_folder());
    if (!dir.isEmpty()) set_model_folder(dir);
  });
  connect(browse_file, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Choose a single-file checkpoint"), model_folder(),
                                                      tr("safetensors checkpoints (*.safetensors)"));
    if (!file.isEmpty()) set_model_folder(file);
  });
  connect(embedded, &QPushButton::clicked, this, [this] { set_model_folder({}); });
  connect(model_, &QLineEdit::editingFinished, this, [this] {
    refresh_vae_choices(vae_->currentData().toString());
    emit changed();
  });
  model_note_->setWordWrap(true);
  model_note_->setStyleSheet("color: palette(dark)");

  vae_->setObjectName("vaeVariant");
  vae_->setToolTip(
      tr("The VAE that decodes the latent: the model's own, a variant shipped beside it "
         "(such as vae-fp16-fix), or any VAE folder"));
  connect(vae_, qOverload<int>(&QComboBox::activated), this, [this](int index) {
    const QString what = vae_->itemData(index).toString();
    if (what == "\x01browse" || what == "\x01browse-file") {
      const QString path = what == "\x01browse"
                               ? QFileDialog::getExistingDirectory(this, tr("Choose a VAE folder"), model_folder())
                               : QFileDialog::getOpenFileName(this, tr("Choose a VAE file"), model_folder(),
                                                              tr("safetensors files (*.safetensors)"));
      if (!path.isEmpty()) add_vae_choice(path);
      select_data(vae_, path.isEmpty() ? QString() : QDir::cleanPath(path));
    }
    emit changed();
  });

  // Their own controls, with tooltips of their own: not listed under More.
  for (const char* key : {"model", "vae", "device"}) mark_shown(key);

  device_->setObjectName("devicePin");
  device_->setToolTip(
      tr("Pin the device every run uses. A pinned device that is missing is an error, "
         "never a silent switch."));
  connect(device_, qOverload<int>(&QComboBox::activated), this, [this] { emit changed(); });

  devices_->setObjectName("deviceList");
  devices_->setColumnCount(4);
  devices_->setHeaderLabels({tr("#"), tr("Device"), tr("Type"), tr("Memory")});
  devices_->setRootIsDecorated(false);
  devices_->setWordWrap(true);
  devices_->header()->setStretchLastSection(true);
  devices_->setMinimumHeight(70);
  devices_->setMaximumHeight(fontMetrics().lineSpacing() * 6 + 12);
  connect(devices_, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item) {
    select_data(device_, item->data(0, Qt::UserRole).toString());
    emit changed();
  });
  device_notes_->setWordWrap(true);
  device_notes_->setTextFormat(Qt::RichText);
  kernels_->setObjectName("kernelStatus");
  kernels_->setWordWrap(true);
  kernels_->setText(tr("Kernel programs: none built yet (they build on first use and are cached)."));
  kernel_live_->setObjectName("kernelLive");
  kernel_live_->setWordWrap(true);
  kernel_live_->hide();
  kernel_busy_->setObjectName("kernelBusy");
  kernel_busy_->setRange(0, 0);  // busy: how long a compile takes is not known in advance
  kernel_busy_->setTextVisible(false);
  kernel_busy_->setMaximumHeight(fontMetrics().height() / 2 + 4);
  kernel_busy_->hide();

  auto* model_row = new QHBoxLayout;
  model_row->addWidget(model_, 1);
  model_row->addWidget(browse);
  model_row->addWidget(browse_file);
  model_row->addWidget(embedded);
  auto* form = new QFormLayout;
  form->addRow(tr("Model:"), model_row);
  form->addRow(QString(), model_note_);
  form->addRow(tr("VAE:"), vae_);
  form->addRow(tr("LoRAs:"), loras_);
  connect(loras_, &LoraList::changed, this, &ConfigPanel::changed);
  form->addRow(tr("Run on:"), device_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addLayout(form);
  layout->addWidget(devices_);
  layout->addWidget(device_notes_);
  layout->addWidget(kernels_);
  layout->addWidget(kernel_live_);
  kernel_plan_ = new QLabel(this);
  kernel_plan_->setObjectName("kernelPlan");
  kernel_plan_->hide();
  layout->addWidget(kernel_plan_);
  layout->addWidget(kernel_busy_);
  layout->addStretch(1);
  refresh_vae_choices({});
}

void ModelDevicePanel::set_devices(const DeviceList& list, const QString& embedded_model, const QString& model_error) {
  embedded_ = embedded_model;
  model_->setPlaceholderText(embedded_.isEmpty() ? tr("(no embedded model found)")
                                                 : tr("embedded: %1").arg(QFileInfo(embedded_).fileName()));
  if (!model_error.isEmpty()) model_note_->setText(model_error);
  const QString pinned = device_->currentData().toString();
  device_->clear();
  devices_->clear();
  QString default_name;
  for (const auto& d : list.devices) {
    if (d.is_default) default_name = qs(d.name);
    auto* item = new QTreeWidgetItem(devices_);
    item->setText(0, QString::number(d.index));
    item->setText(1, qs(d.name) + (d.is_default ? tr("  (default)") : QString()) +
                         (d.suspect.empty() ? QString() : tr("  (not what it says)")));
    if (!d.suspect.empty()) {
      // Report R3: a simulator or software renderer ranks last; grey, with the reason on every column.
      for (int c = 0; c < 4; ++c) item->setForeground(c, devices_->palette().color(QPalette::Disabled, QPalette::Text));
      item->setIcon(1, devices_->style()->standardIcon(QStyle::SP_MessageBoxWarning));
      item->setToolTip(2, qs(d.reason));
    }
    QString kind = qs(device_kind_name(d.kind));
    if (d.kind != DeviceKind::reference) kind += d.fp16 ? tr(", fp16") : tr(", no fp16");
    item->setText(2, kind);
    item->setText(3, d.kind == DeviceKind::reference ? tr("host") : mib(d.global_mem_bytes));
    item->setToolTip(0, qs(d.reason));
    item->setToolTip(1, tr("%1\nvendor: %2\ndriver: %3\n%4\ncompute units: %5\nlargest buffer: %6")
                            .arg(qs(d.id), qs(d.vendor), qs(d.driver_version), qs(d.opencl_c_version))
                            .arg(d.compute_units)
                            .arg(mib(d.max_alloc_bytes)));
    item->setData(0, Qt::UserRole, qs(d.id));
  }
  device_->addItem(default_name.isEmpty() ? tr("Default device") : tr("Default device (%1)").arg(default_name),
                   QString());
  for (const auto& d : list.devices) device_->addItem(QString("%1: %2").arg(d.index).arg(qs(d.name)), qs(d.id));
  if (!pinned.isEmpty() && device_->findData(pinned) < 0) device_->addItem(tr("%1 (not found)").arg(pinned), pinned);
  select_data(device_, pinned);
  for (int c = 0; c < 4; ++c) devices_->resizeColumnToContents(c);
  // Why each device is or is not the default (report R3), in full.
  QStringList notes;
  for (const auto& d : list.devices) notes << QString("%1: %2").arg(d.index).arg(qs(d.reason)).toHtmlEscaped();
  for (const auto& n : list.notes) notes << qs(n).toHtmlEscaped();
  device_notes_->setText(tr("<b>Why:</b><br>") + notes.join("<br>"));
  device_notes_->setVisible(!notes.isEmpty());
  if (model_->text().isEmpty()) refresh_vae_choices(vae_->currentData().toString());
}

void ModelDevicePanel::kernel_build(const QString& program, const QString& options, bool finished, bool cache_hit,
                                    double ms) {
  // Short label for the options: the storage dtype and precision flags, not the -cl-std noise.
  QStringList flags;
  for (const QString& o : options.split(' ', Qt::SkipEmptyParts))
    if (o.startsWith("-D")) flags << o.mid(2);
  const QString what = flags.isEmpty() ? program : tr("%1 [%2]").arg(program, flags.join(' '));
  if (!finished) {
    kernel_live_->setText(tr("Loading or compiling %1 ...").arg(what));
    kernel_live_->show();
    kernel_busy_->show();
    return;
  }
  if (cache_hit) {
    ++live_loaded_;
  } else {
    ++live_built_;
    live_build_ms_ += ms;
  }
  kernel_live_->setText(tr("%1 %2 in %3 ms").arg(cache_hit ? tr("Loaded") : tr("Compiled"), what).arg(ms, 0, 'f', 0));
  kernels_->setText(tr("Kernel programs this run so far: %1 compiled (%2 s), %3 loaded from the cache.")
                        .arg(live_built_)
                        .arg(live_build_ms_ / 1000.0, 0, 'f', 1)
                        .arg(live_loaded_));
  kernel_busy_->hide();
}

void ModelDevicePanel::kernel_progress(const QString& text) {
  kernel_plan_->setText(text.isEmpty() ? QString() : tr("Kernels: %1").arg(text));
  kernel_plan_->setVisible(!text.isEmpty());
}

void ModelDevicePanel::set_kernel_stats(const KernelStats& s) {
  kernel_plan_->hide();
  kernel_busy_->hide();
  kernel_live_->hide();
  live_built_ = live_loaded_ = 0;
  live_build_ms_ = 0;
  if (!s.opencl) {
    kernels_->setText(tr("Kernel programs: the reference device runs plain C++, nothing to compile."));
    return;
  }
  QString text = tr("Kernel programs this session: %1 built (%2 s), %3 loaded from the cache (%4 s)")
                     .arg(s.built)
                     .arg(s.build_ms / 1000.0, 0, 'f', 1)
                     .arg(s.loaded)
                     .arg(s.load_ms / 1000.0, 0, 'f', 2);
  if (s.failed) text += tr(", %1 failed").arg(s.failed);
  text += s.cache_dir.isEmpty() ? tr(". The cache is off.") : tr(".\nCache: %1").arg(s.cache_dir);
  kernels_->setText(text);
}

QString ModelDevicePanel::model_folder() const { return model_->text().isEmpty() ? embedded_ : model_->text(); }

QString ModelDevicePanel::pinned_device_name() const { return device_->currentText(); }

void ModelDevicePanel::set_model_folder(const QString& folder) {
  model_->setText(folder.isEmpty() ? QString() : QDir::cleanPath(folder));
  refresh_vae_choices({});
  emit changed();
}

void ModelDevicePanel::add_vae_choice(const QString& path) {
  const QString clean = QDir::cleanPath(path);
  for (const auto& c : vae_choices_)
    if (c.path == clean) return;
  vae_choices_.push_back({QFileInfo(clean).fileName() + "  (" + clean + ")", clean});
  vae_->insertItem(vae_->count() - 2, vae_choices_.back().label, clean);  // before the two "Other VAE" items
  emit vaeChoicesChanged();
}

void ModelDevicePanel::refresh_vae_choices(const QString& keep) {
  vae_->clear();
  vae_choices_.clear();
  vae_choices_.push_back({tr("The model's own VAE (vae/)"), QString()});
  const QDir dir(model_folder());
  if (!model_folder().isEmpty()) {
    for (const QString& sub : dir.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
      if (sub == "vae" || !is_vae_folder(dir.filePath(sub))) continue;
      vae_choices_.push_back({tr("%1 (beside the model)").arg(sub), QDir::cleanPath(dir.filePath(sub))});
    }
  }
  for (const auto& c : vae_choices_) vae_->addItem(c.label, c.path);
  vae_->addItem(tr("Other VAE folder..."), QString("\x01browse"));
  vae_->addItem(tr("Other VAE file..."), QString("\x01browse-file"));
  if (!keep.isEmpty() && vae_->findData(keep) < 0) add_vae_choice(keep);
  select_data(vae_, keep);
  emit vaeChoicesChanged();
}

void ModelDevicePanel::load(const RunConfig& c) {
  const QString model = qs(c.model);
  if (model != model_->text()) {
    model_->setText(model);
  }
  refresh_vae_choices(qs(c.vae));
  loras_->load(c);
  const QString pin = qs(c.device);
  if (device_->findData(pin) < 0)
    device_->addItem(pin.isEmpty() ? tr("Default device") : tr("%1 (not found)").arg(pin), pin);
  select_data(device_, pin);
}

void ModelDevicePanel::store(RunConfig& c) const {
  c.model = model_->text().toStdString();
  const QString vae = vae_->currentData().toString();
  c.vae = vae.startsWith('\x01') ? std::string() : vae.toStdString();
  c.device = device_->currentData().toString().toStdString();
  loras_->store(c);
}

void ModelDevicePanel::dragEnterEvent(QDragEnterEvent* event) {
  const auto urls = event->mimeData()->urls();
  if (urls.size() != 1) return;
  const QFileInfo info(urls.front().toLocalFile());
  if (info.isDir() || (info.isFile() && info.suffix().compare("safetensors", Qt::CaseInsensitive) == 0)) {
    event->acceptProposedAction();
  }
}

void ModelDevicePanel::dropEvent(QDropEvent* event) {
  const QString path = event->mimeData()->urls().front().toLocalFile();
  if (is_vae_folder(path)) {
    add_vae_choice(path);
    select_data(vae_, QDir::cleanPath(path));
    emit changed();
  } else {
    set_model_folder(path);
  }
  event->acceptProposedAction();
}

// ---------------------------------------------------------------- prompt & run

PromptPanel::PromptPanel(QAction* run, QAction* cancel, QWidget* parent)
    : ConfigPanel(parent),
      prompt_(new QPlainTextEdit),
      negative_(new QPlainTextEdit),
      steps_(new QSpinBox),
      cfg_(new QDoubleSpinBox),
      seed_(new QLineEdit),
      width_(new QSpinBox),
      height_(new QSpinBox),
      sampler_(new QComboBox),
      schedule_(new QComboBox),
      noise_(new QComboBox),
      batch_(new QSpinBox),
      seeds_(new QLineEdit),
      clip_skip_(new QSpinBox) {
  setObjectName("promptPanel");
  prompt_->setObjectName("prompt");
  prompt_->setPlaceholderText(tr("What to draw"));
  prompt_->setTabChangesFocus(true);
  negative_->setPlaceholderText(tr("What to steer away from (optional)"));
  negative_->setTabChangesFocus(true);
  const int line = fontMetrics().lineSpacing();
  prompt_->setFixedHeight(line * 3 + 12);
  negative_->setFixedHeight(line * 2 + 12);
  steps_->setObjectName("steps");
  from_table(steps_, "steps");
  from_table(cfg_, "cfg_scale");
  cfg_->setSingleStep(0.5);
  cfg_->setDecimals(1);
  seed_->setObjectName("seed");
  seed_->setValidator(new QRegularExpressionValidator(QRegularExpression("[0-9]{1,20}"), seed_));
  auto* randomise = new QToolButton;
  randomise->setText(tr("Randomise"));
  connect(randomise, &QToolButton::clicked, this, &PromptPanel::randomise_seed);
  from_table(width_, "width");
  from_table(height_, "height");
  for (QSpinBox* s : {width_, height_}) {
    s->setSingleStep(8);
    s->setSpecialValueText(tr("model default"));
  }
  for (SamplerId id : kSamplers) sampler_->addItem(qs(sampler_a1111_name(id)), qs(sampler_name(id)));
  describe(sampler_, "sampler");
  // "Default" is the sampler's diffusers class; the others as A1111's Schedule type names them.
  schedule_->addItem(tr("Default (the model's scheduler config)"), "default");
  for (ScheduleId id : kSchedules) {
    if (id != ScheduleId::class_default) schedule_->addItem(qs(schedule_a1111_name(id)), qs(schedule_name(id)));
  }
  describe(schedule_, "schedule");
  describe(noise_, "noise");
  describe(seed_, "seed");
  describe(seeds_, "seeds");
  describe(prompt_, "prompt");
  describe(negative_, "negative_prompt");
  noise_->addItem(tr("NaNscope (same on every device)"), "nanscope");
  noise_->addItem(tr("torch CPU (as diffusers)"), "torch-cpu");
  noise_->addItem(tr("torch CUDA (A1111's GPU and NV sources)"), "torch-cuda");
  from_table(batch_, "batch_size");
  seeds_->setPlaceholderText(tr("optional list, e.g. 1, 7, 42 (overrides the batch)"));
  seeds_->setValidator(new QRegularExpressionValidator(QRegularExpression("[0-9, ]*"), seeds_));
  from_table(clip_skip_, "clip_skip");

  auto* seed_row = new QHBoxLayout;
  seed_row->addWidget(seed_, 1);
  seed_row->addWidget(randomise);
  auto* size_row = new QHBoxLayout;
  size_row->addWidget(width_, 1);
  size_row->addWidget(new QLabel(QString::fromUtf8("\u00d7")));
  size_row->addWidget(height_, 1);
  auto* batch_row = new QHBoxLayout;
  batch_row->addWidget(batch_);
  batch_row->addWidget(seeds_, 1);

  auto* form = new QFormLayout;
  form->addRow(tr("Prompt:"), prompt_);
  form->addRow(tr("Negative:"), negative_);
  form->addRow(tr("Steps:"), steps_);
  form->addRow(tr("CFG scale:"), cfg_);
  form->addRow(tr("Seed:"), seed_row);
  form->addRow(tr("Size:"), size_row);
  form->addRow(tr("Sampler:"), sampler_);
  form->addRow(tr("Schedule:"), schedule_);
  form->addRow(tr("Noise:"), noise_);
  form->addRow(tr("Batch / seeds:"), batch_row);
  form->addRow(tr("CLIP skip:"), clip_skip_);

  auto* run_button = new QToolButton;
  run_button->setObjectName("runButton");
  run_button->setDefaultAction(run);
  run_button->setToolButtonStyle(Qt::ToolButtonTextOnly);
  run_button->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  run_button->setMinimumHeight(30);
  auto* cancel_button = new QToolButton;
  cancel_button->setObjectName("cancelButton");
  cancel_button->setDefaultAction(cancel);
  cancel_button->setToolButtonStyle(Qt::ToolButtonTextOnly);
  cancel_button->setMinimumHeight(30);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_button, 1);
  buttons->addWidget(cancel_button);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addLayout(form);
  layout->addLayout(buttons);
  layout->addStretch();

  auto notify = [this] { emit changed(); };
  connect(prompt_, &QPlainTextEdit::textChanged, this, notify);
  connect(negative_, &QPlainTextEdit::textChanged, this, notify);
  for (QSpinBox* s : {steps_, width_, height_, batch_, clip_skip_})
    connect(s, qOverload<int>(&QSpinBox::valueChanged), this, notify);
  connect(cfg_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, notify);
  connect(seed_, &QLineEdit::textEdited, this, notify);
  connect(seeds_, &QLineEdit::textEdited, this, [this] {
    batch_->setEnabled(seeds_->text().trimmed().isEmpty());
    emit changed();
  });
  connect(sampler_, qOverload<int>(&QComboBox::activated), this, notify);
  connect(schedule_, qOverload<int>(&QComboBox::activated), this, notify);
  connect(noise_, qOverload<int>(&QComboBox::activated), this, notify);
  load(RunConfig{});
}

void PromptPanel::randomise_seed() {
  seed_->setText(QString::number(QRandomGenerator::global()->bounded(0x7fffffff)));
  emit changed();
}

void PromptPanel::load(const RunConfig& c) {
  const QSignalBlocker b1(prompt_), b2(negative_), b3(steps_), b4(cfg_), b5(width_), b6(height_), b7(batch_),
      b8(clip_skip_);
  prompt_->setPlainText(qs(c.prompt));
  negative_->setPlainText(qs(c.negative_prompt));
  steps_->setValue(c.steps);
  cfg_->setValue(c.cfg_scale);
  seed_->setText(QString::number(c.seed));
  width_->setValue(c.width);
  height_->setValue(c.height);
  select_data(sampler_, qs(sampler_name(c.sampler)));
  select_data(schedule_, qs(schedule_name(c.schedule)));
  select_data(noise_, qs(noise_name(c.noise)));
  batch_->setValue(c.batch_size);
  QStringList seeds;
  for (auto s : c.seeds) seeds << QString::number(s);
  seeds_->setText(seeds.join(", "));
  batch_->setEnabled(seeds.isEmpty());
  clip_skip_->setValue(c.clip_skip);
}

void PromptPanel::store(RunConfig& c) const {
  c.prompt = prompt_->toPlainText().toStdString();
  c.negative_prompt = negative_->toPlainText().toStdString();
  c.steps = steps_->value();
  c.cfg_scale = cfg_->value();
  if (!seed_->text().isEmpty()) c.set("seed", seed_->text().toStdString());
  c.width = width_->value() / 8 * 8;
  c.height = height_->value() / 8 * 8;
  c.sampler = *parse_sampler(sampler_->currentData().toString().toStdString());
  c.schedule = *parse_schedule(schedule_->currentData().toString().toStdString());
  c.noise = *parse_noise(noise_->currentData().toString().toStdString());
  const QString seeds = seeds_->text().simplified().remove(' ');
  if (!seeds.isEmpty()) {
    QStringList parts = seeds.split(',', Qt::SkipEmptyParts);
    c.set("seeds", parts.join(',').toStdString());
  } else {
    c.seeds.clear();
    c.batch_size = batch_->value();
  }
  c.clip_skip = clip_skip_->value();
}

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
