#pragma once
// The workbench window: dock panels around the live inspector, an engine
// thread behind them, presets, PNGs and screenshots.

#include <QMainWindow>
#include <QMap>
#include <memory>
#include <nlohmann/json.hpp>

#include "config/foreign_generation.hpp"
#include "engine_controller.hpp"

class QAction;
class QDockWidget;
class QLabel;
class QMenu;
class QProgressBar;

namespace nanscope::gui {

class AttentionPanel;
class ConfigPanel;
class AbPanel;
class InspectorPanel;
class LayerTracePanel;
class LogPanel;
class MoreSettingsPanel;
class Img2ImgPanel;
class ModelDevicePanel;
class PrecisionPanel;
class PromptPanel;
class ResultPanel;
class ProbeDialog;
class VaePolicyPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // The config the panels describe (validated). Throws ConfigError naming the key.
  RunConfig current_config() const;
  void load_config(const RunConfig& config);

  // Starts a run with the panels' config; false (and the reason logged and
  // shown) when the config is invalid or a run is going.
  bool start_run();
  void cancel_run();
  bool running() const { return running_; }

  // Files. Each returns false and tells the user why when it fails.
  bool open_file(const QString& path);  // preset JSON or PNG
  bool save_preset(const QString& path);
  bool save_image(const QString& path);
  bool is_dirty() const { return dirty_; }
  void set_interactive(bool on) { interactive_ = on; }  // off: no dialogs (scripted mode, tests)

  // Opens a field-report scenario (R0-R4, or its fixed twin): its preset goes
  // into the panels, and Run then runs it the way the engine defines it, with
  // the user's edits applied on top.
  bool open_scenario(const QString& id, bool fixed);

  // Writes settings ("PATTERN.dtype=f32": the fix the retry-layer-f32 NaN
  // policy found, offered by the inspector's "Apply this fix") into the
  // current config; the panels show them and Save preset stores them. False
  // (and the reason shown) when a run is going or a setting is refused.
  bool apply_fix(const QStringList& sets);
  // Run > Probe Device... / f16 Safety...: opens the probe window and starts
  // the device probe or the f16-safety probe of the current settings; false
  // (and the reason shown) when the settings are invalid or a run is going.
  bool open_probe(bool f16_safety);
  ProbeDialog* probe_dialog() const { return probe_; }
  QString scenario() const { return scenario_id_; }
  static QStringList scenario_ids();

  // Help > About: the version, the git commit it was built from, Qt's version.
  static QString about_text();

  // Screenshots: the window, or one panel by name (see panel_names()).
  QImage screenshot(const QString& panel = {});
  QStringList panel_names() const;

  InspectorPanel* inspector() const { return inspector_; }
  PromptPanel* prompt_panel() const { return prompt_; }
  ResultPanel* result_panel() const { return result_; }
  LayerTracePanel* layer_trace_panel() const { return layer_trace_; }
  AbPanel* ab_panel() const { return ab_; }
  // Starts an A/B comparison of the panels' config against it with `b_changes` applied.
  bool start_ab(const QStringList& b_changes);
  LogPanel* log_panel() const { return log_; }
  EngineController* controller() const { return engine_->controller(); }

 signals:
  void requestRun(const nanscope::RunConfig& config);
  void requestRedecode(int image, const QString& vae, const QString& dtype);
  void requestScenario(const QString& id, bool fixed, const QStringList& sets);
  void requestAb(const nanscope::RunConfig& a, const QStringList& b_changes);
  void runCompleted(const nanscope::gui::RunFinished& result);
  void devicesListed();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void showEvent(QShowEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void open_foreign_png(const QString& path, const io::PngContents& png, ForeignGeneration generation);
  void build_actions();
  void build_docks();
  // The tab bars of tabified docks show their whole labels (Qt's style elides
  // them to "Precis..." in a narrow column): no eliding, scroll buttons when
  // the column is narrower than all the tabs.
  void unelide_dock_tabs();
  void build_menus();
  void connect_engine();
  void set_running(bool on);
  void mark_dirty();
  void set_current_file(const QString& path);
  void update_title();
  void add_recent(const QString& path);
  void rebuild_recent_menu();
  bool confirm_discard();
  void show_error(const QString& title, const QString& text);
  void export_screenshot(const QString& panel);
  void restore_settings();
  void save_settings();
  QDockWidget* add_dock(QWidget* panel, const QString& name, const QString& title, Qt::DockWidgetArea area);

  std::unique_ptr<EngineThread> engine_;
  LogPanel* log_ = nullptr;
  ModelDevicePanel* model_ = nullptr;
  PromptPanel* prompt_ = nullptr;
  PrecisionPanel* precision_ = nullptr;
  AttentionPanel* attention_ = nullptr;
  VaePolicyPanel* vae_ = nullptr;
  MoreSettingsPanel* more_ = nullptr;
  Img2ImgPanel* img2img_ = nullptr;  // img2img and the hires fix
  InspectorPanel* inspector_ = nullptr;
  ResultPanel* result_ = nullptr;
  LayerTracePanel* layer_trace_ = nullptr;
  AbPanel* ab_ = nullptr;
  QString scenario_id_;
  bool scenario_fixed_ = false;
  RunConfig scenario_base_;
  QList<ConfigPanel*> config_panels_;
  QMap<QString, QDockWidget*> docks_;
  QByteArray default_state_;

  QAction* run_ = nullptr;
  QAction* cancel_ = nullptr;
  QAction* save_image_ = nullptr;
  QAction* copy_image_ = nullptr;
  QMenu* recent_menu_ = nullptr;

  QLabel* device_label_ = nullptr;
  QLabel* timing_label_ = nullptr;
  QProgressBar* progress_ = nullptr;

  nlohmann::json inspect_ = nlohmann::json::object();  // inspector settings of the loaded preset, kept as given
  QString current_file_;
  bool dirty_ = false;
  bool loading_ = false;
  bool running_ = false;
  bool interactive_ = true;
  int steps_done_ = 0;
  ProbeDialog* probe_ = nullptr;  // the probe window, made on first use
};

}  // namespace nanscope::gui
