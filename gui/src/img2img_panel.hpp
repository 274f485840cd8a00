#pragma once
// img2img and the hires fix (pipeline/img2img.hpp): an init image picker with
// its strength, and A1111's hires-fix controls (scale, second-pass steps,
// denoising strength, upscaler, the target size of "Resize width/height to",
// and the second pass's own sampler, schedule, CFG scale and prompts). Each
// control takes its range and tooltip from its settings-table row
// (init_image, strength, hires.*).

#include "config_panels.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace nanscope::gui {

class Img2ImgPanel : public ConfigPanel {
  Q_OBJECT
 public:
  explicit Img2ImgPanel(QWidget* parent = nullptr);
  void load(const RunConfig& config) override;
  void store(RunConfig& config) const override;
  // Sets the init image (an empty path clears it) and shows its thumbnail.
  void set_init_image(const QString& path);

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void show_thumbnail();
  void update_enabled();

  QLineEdit* init_;
  QLabel* thumb_;
  QDoubleSpinBox* strength_;
  QGroupBox* hires_;
  QDoubleSpinBox* scale_;
  QSpinBox* hires_steps_;
  QDoubleSpinBox* denoise_;
  QComboBox* upscaler_;
  QSpinBox* hires_width_;
  QSpinBox* hires_height_;
  QComboBox* hires_sampler_;
  QComboBox* hires_schedule_;
  QDoubleSpinBox* hires_cfg_;
  QLineEdit* hires_prompt_;
  QLineEdit* hires_negative_;
  QLabel* hires_note_;
};

}  // namespace nanscope::gui
