#pragma once
// The panels that edit a RunConfig. Each one loads its part of a config,
// stores its part back, and says when the user changed something.

#include <QStringList>
#include <QWidget>

#include "engine_types.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QToolButton;
class QTreeWidget;

namespace nanscope::gui {

class ConfigPanel : public QWidget {
  Q_OBJECT
 public:
  using QWidget::QWidget;
  virtual void load(const RunConfig& config) = 0;
  virtual void store(RunConfig& config) const = 0;
 signals:
  void changed();
};

// A VAE the user can pick: label and folder ("" = the model's own).
struct VaeChoice {
  QString label, path;
};

class LoraList;

class ModelDevicePanel : public ConfigPanel {
  Q_OBJECT
 public:
  explicit ModelDevicePanel(QWidget* parent = nullptr);
  void load(const RunConfig& config) override;
  void store(RunConfig& config) const override;

  void set_devices(const DeviceList& devices, const QString& embedded_model, const QString& model_error);
  void set_kernel_stats(const KernelStats& stats);
  // Live: a kernel program started (finished=false) or finished loading/compiling.
  void kernel_build(const QString& program, const QString& options, bool finished, bool cache_hit, double ms);
  // The cold-start progress while a run waits on the compiler ("" hides it).
  void kernel_progress(const QString& text);
  void set_model_folder(const QString& folder);  // "" = the embedded model
  QString model_folder() const;                  // the folder in effect (embedded resolved)
  QList<VaeChoice> vae_choices() const { return vae_choices_; }
  QString pinned_device_name() const;

 signals:
  void vaeChoicesChanged();

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void refresh_vae_choices(const QString& keep);
  void add_vae_choice(const QString& path);

  QLineEdit* model_;
  QLabel* model_note_;
  QComboBox* vae_;
  LoraList* loras_;  // lora_list.hpp
  QComboBox* device_;
  QTreeWidget* devices_;
  QLabel* device_notes_;
  QLabel* kernels_;
  QLabel* kernel_live_;        // the program compiling now, and this run's counts
  QProgressBar* kernel_busy_;  // shown while a program compiles
  // "building 7 of 12 programs, about 9 s left" (report R4)
  QLabel* kernel_plan_ = nullptr;
  int live_built_ = 0, live_loaded_ = 0;
  double live_build_ms_ = 0;
  QString embedded_;
  QList<VaeChoice> vae_choices_;
  bool loading_ = false;
};

class PromptPanel : public ConfigPanel {
  Q_OBJECT
 public:
  PromptPanel(QAction* run, QAction* cancel, QWidget* parent = nullptr);
  void load(const RunConfig& config) override;
  void store(RunConfig& config) const override;
  void randomise_seed();

  QPlainTextEdit* prompt_edit() const { return prompt_; }
  QSpinBox* steps_box() const { return steps_; }

 private:
  QPlainTextEdit* prompt_;
  QPlainTextEdit* negative_;
  QSpinBox* steps_;
  QDoubleSpinBox* cfg_;
  QLineEdit* seed_;
  QSpinBox* width_;
  QSpinBox* height_;
  QComboBox* sampler_;
  QComboBox* schedule_;
  QComboBox* noise_;
  QSpinBox* batch_;
  QLineEdit* seeds_;
  QSpinBox* clip_skip_;
};

class PrecisionPanel : public ConfigPanel {
  Q_OBJECT
 public:
  explicit PrecisionPanel(QWidget* parent = nullptr);
  void load(const RunConfig& config) override;
  void store(RunConfig& config) const override;
  // The overrides table as config keys; throws ConfigError naming the row.
  void apply_overrides(RunConfig& config) const;

 private:
  void add_override_row(const QString& pattern, const QString& settings);
  void check_overrides();

  QComboBox* dtype_[3];
  QComboBox* accumulate_[3];
  QComboBox* softmax_[3];
  QTableWidget* overrides_;
  QLabel* override_error_;
};

class AttentionPanel : public ConfigPanel {
  Q_OBJECT
 public:
  explicit AttentionPanel(QWidget* parent = nullptr);
  void load(const RunConfig& config) override;
  void store(RunConfig& config) const override;

 private:
  QComboBox* impl_[3];
  QSpinBox* slice_[3];
};

class VaePolicyPanel : public ConfigPanel {
  Q_OBJECT
 public:
  explicit VaePolicyPanel(QWidget* parent = nullptr);
  void load(const RunConfig& config) override;
  void store(RunConfig& config) const override;

  void set_vae_choices(const QList<VaeChoice>& choices);
  // Whether a kept latent can be decoded again (after a run, not during one).
  void set_redecode_available(bool available, int images);

 signals:
  void redecodeRequested(int image, const QString& vae, const QString& dtype);

 private:
  void update_enabled();

  QComboBox* policy_;
  QLineEdit* retry_vae_;
  QPushButton* retry_browse_;
  QComboBox* redecode_vae_;
  QComboBox* redecode_dtype_;
  QSpinBox* redecode_image_;
  QPushButton* redecode_;
  QLabel* redecode_note_;
  // Inspector settings (RunConfig::inspect).
  QSpinBox* decode_every_;
  QSpinBox* stats_every_;
  QSpinBox* layer_retry_limit_;
  QComboBox* trace_;
  QComboBox* emulate_;
  bool redecode_available_ = false;
};

}  // namespace nanscope::gui
