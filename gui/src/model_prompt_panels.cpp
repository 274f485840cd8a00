// The model & device and the prompt & run panels (config_panels.hpp).
#include "config_panels.hpp"

#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
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
#include <QToolButton>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "lora_list.hpp"
#include "panel_helpers.hpp"
#include "settings_panel.hpp"

namespace nanscope::gui {

using namespace panels;

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

}  // namespace nanscope::gui
