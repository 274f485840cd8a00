#include "img2img_panel.hpp"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QImageReader>
#include <QLabel>
#include <QLineEdit>
#include <QMimeData>
#include <QPixmap>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <tuple>

#include "config/settings.hpp"
#include "pipeline/img2img.hpp"
#include "settings_panel.hpp"

namespace nanscope::gui {

namespace {

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<int>(s.size())); }

void describe(QWidget* w, std::string_view key) {
  mark_shown(key);
  w->setToolTip(setting_tooltip(setting(key)));
}

void from_table(QDoubleSpinBox* box, std::string_view key, double step, int decimals) {
  const Setting& row = setting(key);
  box->setRange(row.min, row.max);
  box->setSingleStep(step);
  box->setDecimals(decimals);
  describe(box, key);
}

constexpr int kThumb = 96;

}  // namespace

Img2ImgPanel::Img2ImgPanel(QWidget* parent)
    : ConfigPanel(parent),
      init_(new QLineEdit),
      thumb_(new QLabel),
      strength_(new QDoubleSpinBox),
      hires_(new QGroupBox(tr("Hires fix (a second pass at a larger size, as A1111)"))),
      scale_(new QDoubleSpinBox),
      hires_steps_(new QSpinBox),
      denoise_(new QDoubleSpinBox),
      upscaler_(new QComboBox),
      hires_width_(new QSpinBox),
      hires_height_(new QSpinBox),
      hires_sampler_(new QComboBox),
      hires_schedule_(new QComboBox),
      hires_cfg_(new QDoubleSpinBox),
      hires_prompt_(new QLineEdit),
      hires_negative_(new QLineEdit),
      hires_note_(new QLabel) {
  setObjectName("img2imgPanel");
  setAcceptDrops(true);
  init_->setObjectName("initImage");
  init_->setPlaceholderText(tr("none: txt2img (drop a PNG here)"));
  describe(init_, "init_image");
  auto* browse = new QToolButton;
  browse->setObjectName("initImageBrowse");
  browse->setText(tr("Choose..."));
  auto* clear = new QToolButton;
  clear->setText(tr("Clear"));
  thumb_->setObjectName("initImageThumbnail");
  thumb_->setFixedSize(kThumb, kThumb);
  thumb_->setAlignment(Qt::AlignCenter);
  thumb_->setFrameShape(QFrame::StyledPanel);
  strength_->setObjectName("strength");
  from_table(strength_, "strength", 0.05, 2);

  hires_->setObjectName("hiresFix");
  hires_->setCheckable(true);
  scale_->setObjectName("hiresScale");
  from_table(scale_, "hires.scale", 0.25, 2);
  scale_->setMinimum(1.0);  // 0 (off) is the unchecked box
  hires_steps_->setObjectName("hiresSteps");
  hires_steps_->setRange(0, static_cast<int>(setting("hires.steps").max));
  hires_steps_->setSpecialValueText(tr("same as the first pass"));
  describe(hires_steps_, "hires.steps");
  denoise_->setObjectName("hiresDenoise");
  from_table(denoise_, "hires.denoise", 0.05, 2);
  upscaler_->setObjectName("hiresUpscaler");
  for (HiresUpscaler u : {HiresUpscaler::latent, HiresUpscaler::latent_nearest, HiresUpscaler::latent_nearest_exact,
                          HiresUpscaler::lanczos}) {
    upscaler_->addItem(qs(hires_upscaler_a1111_name(u)), qs(hires_upscaler_name(u)));
  }
  describe(upscaler_, "hires.upscaler");
  describe(hires_, "hires.scale");
  // A1111's "Resize width to" / "Resize height to": 0 on both uses "Upscale by".
  for (auto [box, key, name] : {std::tuple{hires_width_, "hires.width", "hiresWidth"},
                                std::tuple{hires_height_, "hires.height", "hiresHeight"}}) {
    box->setObjectName(name);
    box->setRange(0, static_cast<int>(setting(key).max));
    box->setSingleStep(8);
    box->setSpecialValueText(tr("0 (from the other side or the scale)"));
    describe(box, key);
  }
  // The second pass's own sampler, schedule, CFG scale and prompts; the first item is A1111's "Use same ...".
  hires_sampler_->setObjectName("hiresSampler");
  hires_sampler_->addItem(tr("Use same sampler"), QString());
  for (SamplerId id : kSamplers) hires_sampler_->addItem(qs(sampler_name(id)), qs(sampler_name(id)));
  describe(hires_sampler_, "hires.sampler");
  hires_schedule_->setObjectName("hiresSchedule");
  hires_schedule_->addItem(tr("Use same schedule"), QString());
  for (ScheduleId id : kSchedules) hires_schedule_->addItem(qs(schedule_name(id)), qs(schedule_name(id)));
  describe(hires_schedule_, "hires.schedule");
  hires_cfg_->setObjectName("hiresCfg");
  from_table(hires_cfg_, "hires.cfg_scale", 0.5, 1);
  hires_cfg_->setSpecialValueText(tr("same as the first pass"));
  hires_prompt_->setObjectName("hiresPrompt");
  hires_prompt_->setPlaceholderText(tr("same as the prompt"));
  describe(hires_prompt_, "hires.prompt");
  hires_negative_->setObjectName("hiresNegativePrompt");
  hires_negative_->setPlaceholderText(tr("same as the negative prompt"));
  describe(hires_negative_, "hires.negative_prompt");
  hires_note_->setObjectName("hiresNote");
  hires_note_->setWordWrap(true);

  auto* path_row = new QHBoxLayout;
  path_row->addWidget(init_, 1);
  path_row->addWidget(browse);
  path_row->addWidget(clear);
  auto* init_form = new QFormLayout;
  init_form->addRow(tr("Init image:"), path_row);
  init_form->addRow(tr("Strength:"), strength_);
  auto* init_row = new QHBoxLayout;
  init_row->addLayout(init_form, 1);
  init_row->addWidget(thumb_, 0, Qt::AlignTop);
  auto* init_box = new QGroupBox(tr("img2img (start from an image)"));
  init_box->setLayout(init_row);

  auto* hires_form = new QFormLayout(hires_);
  hires_form->addRow(tr("Upscale by:"), scale_);
  hires_form->addRow(tr("Hires steps:"), hires_steps_);
  hires_form->addRow(tr("Denoising strength:"), denoise_);
  auto* resize_row = new QHBoxLayout;
  resize_row->addWidget(hires_width_, 1);
  resize_row->addWidget(new QLabel(QStringLiteral("x")));
  resize_row->addWidget(hires_height_, 1);
  hires_form->addRow(tr("Resize to:"), resize_row);
  hires_form->addRow(tr("Upscaler:"), upscaler_);
  hires_form->addRow(tr("Hires sampler:"), hires_sampler_);
  hires_form->addRow(tr("Hires schedule:"), hires_schedule_);
  hires_form->addRow(tr("Hires CFG scale:"), hires_cfg_);
  hires_form->addRow(tr("Hires prompt:"), hires_prompt_);
  hires_form->addRow(tr("Hires negative:"), hires_negative_);
  hires_form->addRow(hires_note_);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addWidget(init_box);
  layout->addWidget(hires_);
  layout->addStretch();

  auto notify = [this] {
    update_enabled();
    emit changed();
  };
  connect(browse, &QToolButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Init image"), QFileInfo(init_->text()).absolutePath(),
                                                   tr("PNG images (*.png)"));
    if (!f.isEmpty()) set_init_image(f);
  });
  connect(clear, &QToolButton::clicked, this, [this] { set_init_image(QString()); });
  connect(init_, &QLineEdit::editingFinished, this, [this] {
    show_thumbnail();
    update_enabled();
    emit changed();
  });
  connect(strength_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, notify);
  connect(scale_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, notify);
  connect(denoise_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, notify);
  connect(hires_steps_, qOverload<int>(&QSpinBox::valueChanged), this, notify);
  connect(upscaler_, qOverload<int>(&QComboBox::activated), this, notify);
  connect(hires_width_, qOverload<int>(&QSpinBox::valueChanged), this, notify);
  connect(hires_height_, qOverload<int>(&QSpinBox::valueChanged), this, notify);
  connect(hires_sampler_, qOverload<int>(&QComboBox::activated), this, notify);
  connect(hires_schedule_, qOverload<int>(&QComboBox::activated), this, notify);
  connect(hires_cfg_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, notify);
  connect(hires_prompt_, &QLineEdit::editingFinished, this, notify);
  connect(hires_negative_, &QLineEdit::editingFinished, this, notify);
  connect(hires_, &QGroupBox::toggled, this, notify);
  load(RunConfig{});
}

void Img2ImgPanel::set_init_image(const QString& path) {
  init_->setText(path);
  show_thumbnail();
  update_enabled();
  emit changed();
}

void Img2ImgPanel::show_thumbnail() {
  const QString path = init_->text().trimmed();
  if (path.isEmpty()) {
    thumb_->setPixmap({});
    thumb_->setText(tr("txt2img"));
    return;
  }
  QImageReader reader(path);
  const QImage img = reader.read();
  if (img.isNull()) {
    thumb_->setPixmap({});
    thumb_->setText(tr("cannot read"));
    thumb_->setToolTip(tr("%1: %2").arg(path, reader.errorString()));
    return;
  }
  thumb_->setToolTip(tr("%1 (%2x%3)").arg(path).arg(img.width()).arg(img.height()));
  thumb_->setPixmap(
      QPixmap::fromImage(img.scaled(kThumb - 4, kThumb - 4, Qt::KeepAspectRatio, Qt::SmoothTransformation)));
}

// img2img and the hires fix exclude each other (A1111's hires fix is a txt2img
// pass; RunConfig::validate says so too); the note says what the second pass runs.
void Img2ImgPanel::update_enabled() {
  const bool init = !init_->text().trimmed().isEmpty();
  strength_->setEnabled(init);
  hires_->setEnabled(!init);
  if (init) {
    hires_note_->setText(tr("Off while an init image is set: run img2img at the larger size instead."));
    return;
  }
  // A target size replaces "Upscale by" (A1111 ignores hr_scale then).
  const bool resize = hires_width_->value() > 0 || hires_height_->value() > 0;
  scale_->setEnabled(!resize);
  QString size;
  if (resize) {
    size = tr("The second pass runs at %1 x %2 (0: that side follows the first pass's aspect; another aspect is "
              "cropped from the middle, as A1111 does). ")
               .arg(hires_width_->value())
               .arg(hires_height_->value());
  }
  const int steps = hires_steps_->value();
  if (steps > 0) {
    try {
      const auto ps = pipeline::hires_schedule(steps, denoise_->value());
      hires_note_->setText(size + tr("The second pass runs the last %1 steps of a %2-step schedule.")
                                      .arg(ps.run_steps())
                                      .arg(ps.schedule_steps));
    } catch (const std::exception& e) {
      hires_note_->setText(QString::fromUtf8(e.what()));
    }
  } else {
    hires_note_->setText(size + tr("The second pass runs as many steps as the first, the last of a longer schedule "
                                   "(steps / denoising strength)."));
  }
}

void Img2ImgPanel::load(const RunConfig& c) {
  const QSignalBlocker b1(init_), b2(strength_), b3(hires_), b4(scale_), b5(hires_steps_), b6(denoise_), b7(upscaler_),
      b8(hires_width_), b9(hires_height_), b10(hires_sampler_), b11(hires_schedule_), b12(hires_cfg_),
      b13(hires_prompt_), b14(hires_negative_);
  init_->setText(qs(c.init_image));
  strength_->setValue(c.strength);
  hires_->setChecked(c.hires());
  scale_->setValue(c.hires_scale > 0 ? c.hires_scale : 2.0);  // A1111's default "Upscale by"
  hires_steps_->setValue(c.hires_steps);
  denoise_->setValue(c.hires_denoise);
  upscaler_->setCurrentIndex(std::max(0, upscaler_->findData(qs(hires_upscaler_name(c.hires_upscaler)))));
  hires_width_->setValue(c.hires_width);
  hires_height_->setValue(c.hires_height);
  hires_sampler_->setCurrentIndex(
      c.hires_sampler ? std::max(0, hires_sampler_->findData(qs(sampler_name(*c.hires_sampler)))) : 0);
  hires_schedule_->setCurrentIndex(
      c.hires_schedule ? std::max(0, hires_schedule_->findData(qs(schedule_name(*c.hires_schedule)))) : 0);
  hires_cfg_->setValue(c.hires_cfg_scale);
  hires_prompt_->setText(QString::fromStdString(c.hires_prompt));
  hires_negative_->setText(QString::fromStdString(c.hires_negative_prompt));
  show_thumbnail();
  update_enabled();
}

void Img2ImgPanel::store(RunConfig& c) const {
  c.init_image = init_->text().trimmed().toStdString();
  c.strength = strength_->value();
  const bool on = hires_->isChecked() && c.init_image.empty();
  const bool resize = hires_width_->value() > 0 || hires_height_->value() > 0;
  c.hires_scale = on && !resize ? scale_->value() : 0.0;  // a target size replaces the scale
  c.hires_steps = hires_steps_->value();
  c.hires_denoise = denoise_->value();
  c.hires_upscaler = *parse_hires_upscaler(upscaler_->currentData().toString().toStdString());
  c.hires_width = on ? hires_width_->value() : 0;
  c.hires_height = on ? hires_height_->value() : 0;
  const std::string sampler = hires_sampler_->currentData().toString().toStdString();
  c.hires_sampler = sampler.empty() ? std::nullopt : parse_sampler(sampler);
  const std::string schedule = hires_schedule_->currentData().toString().toStdString();
  c.hires_schedule = schedule.empty() ? std::nullopt : parse_schedule(schedule);
  c.hires_cfg_scale = hires_cfg_->value();
  c.hires_prompt = hires_prompt_->text().toStdString();
  c.hires_negative_prompt = hires_negative_->text().toStdString();
}

void Img2ImgPanel::dragEnterEvent(QDragEnterEvent* event) {
  const auto urls = event->mimeData()->urls();
  if (urls.size() == 1 && QFileInfo(urls.front().toLocalFile()).suffix().compare("png", Qt::CaseInsensitive) == 0) {
    event->acceptProposedAction();
  }
}

void Img2ImgPanel::dropEvent(QDropEvent* event) {
  set_init_image(event->mimeData()->urls().front().toLocalFile());
  event->acceptProposedAction();
}

}  // namespace nanscope::gui
