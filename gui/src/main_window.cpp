#include "main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QCoreApplication>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QScrollArea>
#include <QSettings>
#include <QShowEvent>
#include <QStatusBar>
#include <QTabBar>
#include <QTimer>

#include "ab_panel.hpp"
#include "config/png_metadata.hpp"
#include "config/preset.hpp"
#include "config_diff.hpp"
#include "config_panels.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/version.hpp"
#include "img2img_panel.hpp"
#include "inspector_panel.hpp"
#include "kernel_cache_dialog.hpp"
#include "layer_trace_panel.hpp"
#include "log_panel.hpp"
#include "pipeline/img2img.hpp"
#include "probe_dialog.hpp"
#include "reproduce_dialog.hpp"
#include "result_panel.hpp"
#include "settings_panel.hpp"
#include "studies/report_json.hpp"
#include "studies/scenario.hpp"

namespace nanscope::gui {

namespace {

constexpr int kMaxRecent = 8;

QSettings settings() {
  const QByteArray scope = qgetenv("NANSCOPE_GUI_SETTINGS_SCOPE");
  return QSettings("NaNscope", scope.isEmpty() ? QString("nanscope") : QString::fromUtf8(scope));
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setObjectName("mainWindow");
  setAcceptDrops(true);
  register_metatypes();
  build_actions();
  // The log panel first: it hooks the engine's logger before the engine thread logs.
  log_ = new LogPanel;
  engine_ = std::make_unique<EngineThread>();
  build_docks();
  build_menus();
  connect_engine();

  device_label_ = new QLabel(tr("Looking for devices..."));
  timing_label_ = new QLabel;
  progress_ = new QProgressBar;
  progress_->setMaximumWidth(220);
  progress_->setTextVisible(true);
  progress_->setVisible(false);
  device_label_->setContentsMargins(12, 0, 6, 0);
  timing_label_->setContentsMargins(12, 0, 12, 0);
  statusBar()->addPermanentWidget(timing_label_);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(device_label_);

  resize(1500, 950);
  default_state_ = saveState();
  restore_settings();
  set_running(false);
  update_title();
  QMetaObject::invokeMethod(controller(), "listDevices", Qt::QueuedConnection);
}

MainWindow::~MainWindow() {
  // Stop the engine (cancel, wait for the current step) before any panel dies.
  engine_->shutdown();
}

void MainWindow::build_actions() {
  run_ = new QAction(tr("Run"), this);
  run_->setObjectName("actionRun");
  run_->setShortcut(QKeySequence("Ctrl+Return"));
  run_->setToolTip(tr("Generate with the current settings (Ctrl+Return)"));
  connect(run_, &QAction::triggered, this, [this] { start_run(); });
  cancel_ = new QAction(tr("Cancel"), this);
  cancel_->setObjectName("actionCancel");
  cancel_->setShortcut(QKeySequence(Qt::Key_Escape));
  cancel_->setToolTip(tr("Stop the run at the next step (Esc)"));
  connect(cancel_, &QAction::triggered, this, &MainWindow::cancel_run);
  save_image_ = new QAction(tr("Save Image..."), this);
  save_image_->setShortcut(QKeySequence("Ctrl+Alt+S"));
  save_image_->setToolTip(tr("Save the image as PNG with its settings inside"));
  connect(save_image_, &QAction::triggered, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, tr("Save image"), "nanscope.png", tr("PNG images (*.png)"));
    if (!path.isEmpty()) save_image(path);
  });
  copy_image_ = new QAction(tr("Copy Image"), this);
  copy_image_->setShortcut(QKeySequence("Ctrl+Shift+C"));
  connect(copy_image_, &QAction::triggered, this, [this] {
    if (const ImageView* v = result_->current(); v && !v->qimage.isNull()) {
      QApplication::clipboard()->setImage(v->qimage);
      statusBar()->showMessage(tr("Image copied"), 3000);
    }
  });
}

QDockWidget* MainWindow::add_dock(QWidget* panel, const QString& name, const QString& title, Qt::DockWidgetArea area) {
  auto* dock = new QDockWidget(title, this);
  dock->setObjectName(name + "Dock");
  if (qobject_cast<ConfigPanel*>(panel)) {
    // Settings panels scroll rather than squeeze when the dock is small.
    auto* scroll = new QScrollArea;
    scroll->setWidget(panel);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    dock->setWidget(scroll);
  } else {
    dock->setWidget(panel);
  }
  addDockWidget(area, dock);
  docks_[name] = dock;
  return dock;
}

void MainWindow::build_docks() {
  model_ = new ModelDevicePanel;
  prompt_ = new PromptPanel(run_, cancel_);
  precision_ = new PrecisionPanel;
  attention_ = new AttentionPanel;
  vae_ = new VaePolicyPanel;
  inspector_ = new InspectorPanel;
  result_ = new ResultPanel(save_image_, copy_image_);
  layer_trace_ = new LayerTracePanel;
  ab_ = new AbPanel;
  img2img_ = new Img2ImgPanel;
  more_ = new MoreSettingsPanel;  // after the other settings panels: it lists what they do not show
  config_panels_ = {model_, prompt_, precision_, attention_, vae_, img2img_, more_};
  for (ConfigPanel* p : config_panels_) connect(p, &ConfigPanel::changed, this, &MainWindow::mark_dirty);

  setCentralWidget(inspector_);
  setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks);
  // The settings column and the result run the full height; the log and trace sit under the inspector.
  setCorner(Qt::BottomLeftCorner, Qt::LeftDockWidgetArea);
  setCorner(Qt::BottomRightCorner, Qt::RightDockWidgetArea);
  auto* prompt = add_dock(prompt_, "prompt", tr("Prompt and run"), Qt::LeftDockWidgetArea);
  auto* model = add_dock(model_, "model", tr("Model"), Qt::LeftDockWidgetArea);
  auto* precision = add_dock(precision_, "precision", tr("Precision"), Qt::LeftDockWidgetArea);
  auto* attention = add_dock(attention_, "attention", tr("Attention"), Qt::LeftDockWidgetArea);
  auto* vae = add_dock(vae_, "vae", tr("VAE, NaN"), Qt::LeftDockWidgetArea);
  // Under the inspector with the log: the settings column's tab bar has no room
  // for a fifth tab at 1500x950, and a tab beside the prompt would push Run out of view.
  auto* more = add_dock(more_, "more", tr("More settings"), Qt::BottomDockWidgetArea);
  add_dock(result_, "result", tr("Result"), Qt::RightDockWidgetArea);
  auto* log = add_dock(log_, "log", tr("Log"), Qt::BottomDockWidgetArea);
  auto* trace = add_dock(layer_trace_, "trace", tr("Layer trace"), Qt::BottomDockWidgetArea);
  tabifyDockWidget(log, trace);
  auto* ab = add_dock(ab_, "ab", tr("A/B"), Qt::BottomDockWidgetArea);
  tabifyDockWidget(trace, ab);
  tabifyDockWidget(ab, more);
  auto* img2img = add_dock(img2img_, "img2img", tr("img2img, hires fix"), Qt::BottomDockWidgetArea);
  tabifyDockWidget(more, img2img);
  connect(ab_, &AbPanel::compareRequested, this, [this](const QStringList& changes) { start_ab(changes); });
  log->raise();
  splitDockWidget(prompt, model, Qt::Vertical);
  tabifyDockWidget(model, precision);
  tabifyDockWidget(precision, attention);
  tabifyDockWidget(attention, vae);
  model->raise();
  resizeDocks({prompt}, {440}, Qt::Horizontal);
  resizeDocks({docks_["result"]}, {300}, Qt::Horizontal);
  resizeDocks({prompt, model}, {430, 470}, Qt::Vertical);
  resizeDocks({log}, {170}, Qt::Vertical);

  connect(model_, &ModelDevicePanel::vaeChoicesChanged, this, [this] { vae_->set_vae_choices(model_->vae_choices()); });
  vae_->set_vae_choices(model_->vae_choices());
  connect(vae_, &VaePolicyPanel::redecodeRequested, this, [this](int image, const QString& vae, const QString& dtype) {
    if (running_) return;
    set_running(true);
    controller()->note_request();
    emit requestRedecode(image, vae, dtype);
  });
}

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open Preset or Image..."), this, [this] {
    if (!confirm_discard()) return;
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open a preset or an image (NaNscope, A1111, ComfyUI)"), QString(),
                                     tr("Presets and images (*.json *.png);;All files (*)"));
    if (!path.isEmpty()) open_file(path);
  });
  open->setShortcut(QKeySequence::Open);
  recent_menu_ = file->addMenu(tr("Open &Recent"));
  rebuild_recent_menu();

  bool have_presets = true;
  try {
    studies::presets_dir();
  } catch (const std::exception&) {
    have_presets = false;  // an install without presets: no menu rather than a menu that fails
  }
  if (have_presets) {
    QMenu* menu = menuBar()->addMenu(tr("&Scenarios"));
    menu->setToolTipsVisible(true);
    for (const auto& s : studies::scenarios()) {
      const QString id = QString::fromStdString(s.id);
      QAction* broken = menu->addAction(tr("%1: %2").arg(id, QString::fromStdString(s.title)), this, [this, id] {
        if (confirm_discard()) open_scenario(id, false);
      });
      broken->setToolTip(tr("The failure as reported; press Run to see it"));
      QAction* fixed = menu->addAction(tr("%1 fixed: %2").arg(id, QString::fromStdString(s.fix)), this, [this, id] {
        if (confirm_discard()) open_scenario(id, true);
      });
      fixed->setToolTip(tr("The same run with the known fix applied"));
      menu->addSeparator();
    }
  }
  file->addSeparator();
  QAction* save = file->addAction(tr("&Save Preset"), this, [this] {
    if (current_file_.isEmpty() || !current_file_.endsWith(".json")) {
      const QString path = QFileDialog::getSaveFileName(this, tr("Save preset"), "preset.json", tr("Presets (*.json)"));
      if (!path.isEmpty()) save_preset(path);
    } else {
      save_preset(current_file_);
    }
  });
  save->setShortcut(QKeySequence::Save);
  QAction* save_as = file->addAction(tr("Save Preset &As..."), this, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Save preset as"), current_file_.isEmpty() ? "preset.json" : current_file_, tr("Presets (*.json)"));
    if (!path.isEmpty()) save_preset(path);
  });
  save_as->setShortcut(QKeySequence::SaveAs);
  file->addSeparator();
  file->addAction(save_image_);
  file->addAction(copy_image_);
  file->addSeparator();
  QAction* shot = file->addAction(tr("Export Screenshot of the &Window..."), this, [this] { export_screenshot({}); });
  shot->setShortcut(QKeySequence("Ctrl+Shift+P"));
  QMenu* panels = file->addMenu(tr("Export Screenshot of a &Panel"));
  for (const QString& name : panel_names()) {
    const QString title = name == "inspector" ? tr("Inspector") : docks_[name]->windowTitle();
    panels->addAction(title, this, [this, name] { export_screenshot(name); });
  }
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(run_);
  run->addAction(cancel_);
  run->addSeparator();
  run->addAction(tr("Randomise Seed"), prompt_, &PromptPanel::randomise_seed);
  run->addSeparator();
  QAction* probe = run->addAction(tr("Probe Device..."), this, [this] { open_probe(false); });
  probe->setObjectName("probeDeviceAction");
  probe->setToolTip(tr("Every distinct op of the model at this size on the device and on the reference device"));
  QAction* f16 = run->addAction(tr("f16 Safety..."), this, [this] { open_probe(true); });
  f16->setObjectName("f16SafetyAction");
  f16->setToolTip(tr("Which modules would overflow in f16, and the per-module overrides that keep the run finite"));

  QMenu* tools = menuBar()->addMenu(tr("&Tools"));
  QAction* cache = tools->addAction(tr("&Kernel Cache..."), this, [this] {
    auto* dialog = findChild<KernelCacheDialog*>();
    if (!dialog) dialog = new KernelCacheDialog(controller(), this);
    dialog->show();
    dialog->raise();
  });
  cache->setObjectName("kernelCacheAction");

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (QDockWidget* d : docks_) view->addAction(d->toggleViewAction());
  view->addSeparator();
  view->addAction(tr("Reset Layout"), this, [this] {
    restoreState(default_state_);
    for (QDockWidget* d : docks_) d->show();
    docks_["model"]->raise();
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* about = help->addAction(tr("About NaNscope"), this,
                                   [this] { QMessageBox::about(this, tr("About NaNscope"), about_text()); });
  about->setObjectName("aboutAction");
  about->setMenuRole(QAction::AboutRole);
}

QString MainWindow::about_text() {
  const QString commit = QString::fromUtf8(git_commit().data(), static_cast<int>(git_commit().size()));
  const QString version = QString::fromUtf8(nanscope::version().data(), static_cast<int>(nanscope::version().size()));
  return tr("<b>NaNscope %1</b><p>%2</p><p>A workbench for the numerics of diffusion image generation: run "
            "a Stable Diffusion pipeline on the OpenCL device you pick, change precision, attention "
            "and VAE per run, and watch where values go non-finite.</p><p>Qt %3</p>")
      .arg(version, commit.isEmpty() ? tr("Built without a git commit.") : tr("Git commit %1").arg(commit),
           QString::fromLatin1(qVersion()));
}

void MainWindow::connect_engine() {
  EngineController* c = controller();
  connect(this, &MainWindow::requestRun, c, &EngineController::run);
  connect(this, &MainWindow::requestRedecode, c, &EngineController::redecode);
  connect(this, &MainWindow::requestScenario, c, &EngineController::runScenario);
  connect(this, &MainWindow::requestAb, c, &EngineController::runAb);
  connect(c, &EngineController::abFinished, this, [this](const AbView& v) { ab_->show_result(v); });
  connect(c, &EngineController::devicesReady, this,
          [this](const DeviceList& devices, const QString& model, const QString& model_error) {
            model_->set_devices(devices, model, model_error);
            QString def;
            for (const auto& d : devices.devices)
              if (d.is_default) def = QString::fromStdString(d.name);
            device_label_->setText(tr("Device: %1").arg(def.isEmpty() ? tr("none") : def));
            if (!model_error.isEmpty()) log::warn("{}", model_error.toStdString());
            emit devicesListed();
          });
  connect(c, &EngineController::status, this, [this](const QString& s) { statusBar()->showMessage(s + "..."); });
  connect(c, &EngineController::step, this, [this](const StepView& s) {
    inspector_->add_step(s);
    ++steps_done_;
    progress_->setValue(steps_done_);
    timing_label_->setText(
        (s.report.passes > 1 ? tr("pass %1, ").arg(s.report.pass) : QString()) +
        tr("step %1/%2: %3 s").arg(s.report.index + 1).arg(s.report.steps).arg(s.report.seconds, 0, 'f', 2));
  });
  connect(c, &EngineController::image, this, [this](const ImageView& v) {
    inspector_->add_image(v);
    result_->add(v);
    if (!v.report.inspection.traces.empty() || v.report.image == 0) {
      layer_trace_->set_traces(v.report.inspection.traces);
      if (layer_trace_->origin_row() >= 0) docks_["trace"]->raise();
    }
    const auto& r = v.report;
    if (!r.device.empty()) device_label_->setText(tr("Device: %1").arg(QString::fromStdString(r.device)));
    timing_label_->setText(tr("load %1 s, prompt %2 s, sampling %3 s, decode %4 s")
                               .arg(r.load_seconds, 0, 'f', 2)
                               .arg(r.text_seconds, 0, 'f', 2)
                               .arg(r.sampling_seconds, 0, 'f', 2)
                               .arg(r.decode_seconds, 0, 'f', 2));
    // The decode's outcome and the inspector's verdict ("decode clean" can still be a banded image).
    log::info("image {}: decode {}; verdict {}", r.image + 1, r.outcome, inspect::verdict_name(r.inspection.verdict));
  });
  connect(inspector_, &InspectorPanel::applyFix, this, [this](const QStringList& sets) { apply_fix(sets); });
  connect(c, &EngineController::kernels, this, [this](const KernelStats& k) { model_->set_kernel_stats(k); });
  connect(c, &EngineController::kernelBuild, model_, &ModelDevicePanel::kernel_build);
  connect(c, &EngineController::kernelProgress, model_, &ModelDevicePanel::kernel_progress);
  connect(c, &EngineController::runFinished, this, [this](const RunFinished& f) {
    set_running(false);
    if (!f.note.isEmpty()) inspector_->set_note(f.note);
    if (!f.verdict.isEmpty()) inspector_->set_run_verdict(f.verdict, f.summary);
    if (!f.ok) {
      inspector_->set_failure(f.error, f.fix);
      statusBar()->showMessage(tr("Failed: %1").arg(f.error));
    } else if (f.cancelled) {
      statusBar()->showMessage(tr("Cancelled after %1 s").arg(f.seconds, 0, 'f', 1));
    } else {
      // Scenario facts (R4's kernel build times, R1's stress variant) go next to the time.
      statusBar()->showMessage(f.note.isEmpty() ? tr("Done in %1 s").arg(f.seconds, 0, 'f', 1)
                                                : tr("Done in %1 s. %2").arg(f.seconds, 0, 'f', 1).arg(f.note));
    }
    vae_->set_redecode_available(result_->count() > 0, result_->count());
    emit runCompleted(f);
  });
}

void MainWindow::set_running(bool on) {
  running_ = on;
  run_->setEnabled(!on);
  cancel_->setEnabled(on);
  progress_->setVisible(on);
  for (ConfigPanel* p : config_panels_) p->setEnabled(!on);
  if (ab_) ab_->set_busy(on);
  const bool image = !on && result_->has_image();
  save_image_->setEnabled(image);
  copy_image_->setEnabled(image);
}

RunConfig MainWindow::current_config() const {
  RunConfig c;
  c.inspect = inspect_;  // as loaded; the inspector controls then set their own keys, others are kept
  for (const ConfigPanel* p : config_panels_) p->store(c);
  c.validate();
  return c;
}

void MainWindow::load_config(const RunConfig& config) {
  loading_ = true;
  for (ConfigPanel* p : config_panels_) p->load(config);
  inspect_ = config.inspect;
  loading_ = false;
}

bool MainWindow::start_run() {
  if (running_) return false;
  RunConfig config;
  try {
    config = current_config();
  } catch (const std::exception& e) {
    show_error(tr("These settings cannot run"), QString::fromUtf8(e.what()));
    return false;
  }
  const int images = static_cast<int>(config.image_seeds().size());
  // Steps run per image: img2img runs the last int(steps * strength); the hires fix adds its own.
  int per_image = config.steps;
  try {
    if (!config.init_image.empty()) per_image = pipeline::img2img_schedule(config.steps, config.strength).run_steps();
    if (config.hires()) per_image += config.hires_steps > 0 ? config.hires_steps : config.steps;
  } catch (const std::exception&) {
    // The run reports the bad value itself.
  }
  inspector_->clear(images, per_image);
  result_->clear();
  layer_trace_->clear();
  steps_done_ = 0;
  progress_->setRange(0, images * per_image);
  progress_->setValue(0);
  set_running(true);
  log::info("run: {} step(s), {} image(s), seed {}", config.steps, images, config.image_seeds().front());
  if (!scenario_id_.isEmpty()) {
    const ConfigDiff diff = config_diff(scenario_base_, config);
    if (diff.ok) {
      QStringList sets;
      for (const auto& s : diff.sets) sets << QString::fromStdString(s);
      log::info("scenario {}{}{}", scenario_id_.toStdString(), scenario_fixed_ ? " (fixed)" : "",
                sets.isEmpty() ? std::string() : " with " + sets.join(", ").toStdString());
      controller()->note_request();
      emit requestScenario(scenario_id_, scenario_fixed_, sets);
      return true;
    }
    log::warn("these edits cannot be carried onto scenario {}: running the settings as a plain run",
              scenario_id_.toStdString());
  }
  controller()->note_request();
  emit requestRun(config);
  return true;
}

bool MainWindow::start_ab(const QStringList& b_changes) {
  if (running_) return false;
  RunConfig config;
  try {
    config = current_config();
    RunConfig b = config;
    for (const QString& s : b_changes) b.set(s.toStdString());
    b.validate();
  } catch (const std::exception& e) {
    show_error(tr("These settings cannot run"), QString::fromUtf8(e.what()));
    return false;
  }
  docks_["ab"]->raise();
  ab_->set_changes(b_changes);
  progress_->setRange(0, 0);  // two runs: a busy indicator rather than a step count
  set_running(true);
  log::info("A/B: B = A with {}", b_changes.join("; ").toStdString());
  controller()->note_request();
  emit requestAb(config, b_changes);
  return true;
}

bool MainWindow::apply_fix(const QStringList& sets) {
  if (running_) return false;
  RunConfig config;
  try {
    config = current_config();
    for (const QString& s : sets) config.set(s.toStdString());
    config.validate();
  } catch (const std::exception& e) {
    show_error(tr("This fix cannot be applied"), QString::fromUtf8(e.what()));
    return false;
  }
  load_config(config);
  mark_dirty();
  log::info("applied the fix: {}", sets.join(", ").toStdString());
  if (!sets.isEmpty() && sets.front().startsWith("vae.tiling=")) {  // the memory plan's fix (VAE tiling)
    statusBar()->showMessage(tr("Applied %1: More settings shows it; press Run again").arg(sets.join(' ')));
    return true;
  }
  statusBar()->showMessage(sets.size() == 1
                               ? tr("Applied 1 per-module override: the Precision panel lists it, Save preset keeps it")
                               : tr("Applied %1 per-module overrides: the Precision panel lists them, Save preset "
                                    "keeps them")
                                     .arg(sets.size()));
  if (docks_.contains("precision")) docks_["precision"]->raise();
  return true;
}

bool MainWindow::open_probe(bool f16_safety) {
  if (running_ || (probe_ && probe_->busy())) return false;
  RunConfig config;
  try {
    config = current_config();
  } catch (const std::exception& e) {
    show_error(tr("These settings cannot be probed"), QString::fromUtf8(e.what()));
    return false;
  }
  if (!probe_) {
    probe_ = new ProbeDialog(controller(), this);
    connect(probe_, &ProbeDialog::applyOverrides, this, [this](const QStringList& sets) { apply_fix(sets); });
  }
  probe_->show();
  probe_->raise();
  return probe_->start(f16_safety ? ProbeDialog::Mode::f16_safety : ProbeDialog::Mode::device, config);
}

void MainWindow::cancel_run() {
  if (!running_) return;
  controller()->cancel();  // atomic flag: the engine stops at the next step
  statusBar()->showMessage(tr("Cancelling at the next step..."));
}

void MainWindow::mark_dirty() {
  if (loading_) return;
  dirty_ = true;
  update_title();
}

void MainWindow::set_current_file(const QString& path) {
  current_file_ = path;
  dirty_ = false;
  update_title();
}

void MainWindow::update_title() {
  QString name = current_file_.isEmpty() ? tr("untitled") : QFileInfo(current_file_).fileName();
  if (!scenario_id_.isEmpty())
    name = tr("scenario %1%2").arg(scenario_id_, scenario_fixed_ ? tr(" (fixed)") : QString());
  setWindowTitle(tr("%1[*] - NaNscope").arg(name));
  setWindowModified(dirty_);
}

QStringList MainWindow::scenario_ids() {
  QStringList ids;
  for (const auto& s : studies::scenarios()) ids << QString::fromStdString(s.id);
  return ids;
}

bool MainWindow::open_scenario(const QString& id, bool fixed) {
  const studies::Scenario* s = studies::find_scenario(id.toStdString());
  if (!s) {
    show_error(tr("No such scenario"), tr("'%1' is not one of %2.").arg(id, scenario_ids().join(", ")));
    return false;
  }
  QString path;
  try {
    path = QString::fromStdString((studies::presets_dir() / (fixed ? s->fixed_preset : s->preset)).string());
    scenario_base_ = load_preset(path.toStdString());
  } catch (const std::exception& e) {
    show_error(tr("Cannot open scenario %1").arg(id), QString::fromUtf8(e.what()));
    return false;
  }
  load_config(scenario_base_);
  scenario_id_ = QString::fromStdString(s->id);
  scenario_fixed_ = fixed;
  set_current_file(path);
  inspector_->clear(1, scenario_base_.steps);
  inspector_->set_note(
      fixed ? tr("Scenario %1, fixed: %2. Press Run.").arg(scenario_id_, QString::fromStdString(s->fix))
            : tr("Scenario %1: %2. Press Run to see it happen.").arg(scenario_id_, QString::fromStdString(s->title)));
  log::info("opened scenario {}{}: {}", s->id, fixed ? " (fixed)" : "", fixed ? s->fix : s->title);
  return true;
}

bool MainWindow::open_file(const QString& path) {
  scenario_id_.clear();
  try {
    if (path.endsWith(".png", Qt::CaseInsensitive)) {
      const io::PngContents png = io::read_png(path.toStdString());
      if (auto foreign = foreign_generation_from_png(png, path.toStdString())) {
        open_foreign_png(path, png, std::move(*foreign));
        return true;
      }
      const auto config = config_from_png(png, path.toStdString());
      if (!config) {
        show_error(tr("No settings in this image"),
                   tr("%1 holds no NaNscope or A1111 generation settings.").arg(QFileInfo(path).fileName()));
        return false;
      }
      load_config(*config);
      ImageView view;
      view.image.image = png.image;
      view.image.config = *config;
      view.report.outcome = "opened from " + QFileInfo(path).fileName().toStdString();
      view.qimage = to_qimage(png.image);
      result_->clear();
      result_->add(view);
      set_running(false);
      set_current_file({});
      dirty_ = true;  // the restored settings are not in a preset yet
      update_title();
      log::info("restored the settings of {}", path.toStdString());
    } else {
      load_config(load_preset(path.toStdString()));
      set_current_file(path);
      log::info("opened preset {}", path.toStdString());
    }
  } catch (const std::exception& e) {
    show_error(tr("Cannot open %1").arg(QFileInfo(path).fileName()), QString::fromUtf8(e.what()));
    return false;
  }
  add_recent(path);
  statusBar()->showMessage(tr("Opened %1").arg(QFileInfo(path).fileName()), 4000);
  return true;
}

// An image from another tool: the reproduce dialog (window-modal, not
// blocking, so scripted sessions and tests drive it too) shows the plan; its
// Apply loads the plan's config into the panels.
void MainWindow::open_foreign_png(const QString& path, const io::PngContents& png, ForeignGeneration generation) {
  const QString name = QFileInfo(path).fileName();
  const std::string tool(foreign_tool_name(generation.tool));
  ImageView view;
  view.image.image = png.image;
  view.report.outcome = "opened from " + name.toStdString() + " (made by " + tool + ")";
  view.qimage = to_qimage(png.image);
  auto* dialog =
      new ReproduceDialog(std::move(generation), name, settings().value("reproduce/models_dir").toString(), this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &ReproduceDialog::applied, this,
          [this, path, view](const RunConfig& config, const QString& models_dir) mutable {
            settings().setValue("reproduce/models_dir", models_dir);
            scenario_id_.clear();
            load_config(config);
            view.image.config = config;
            result_->clear();
            result_->add(view);
            set_current_file({});
            dirty_ = true;
            update_title();
            add_recent(path);
            log::info("applied the settings of {} (from another tool)", path.toStdString());
            statusBar()->showMessage(tr("Applied the settings of %1: press Run").arg(QFileInfo(path).fileName()), 6000);
          });
  dialog->open();
  log::info("{} was made by {}: showing what can be reproduced", path.toStdString(), tool);
}

bool MainWindow::save_preset(const QString& path) {
  try {
    nanscope::save_preset(current_config(), path.toStdString());
  } catch (const std::exception& e) {
    show_error(tr("Cannot save the preset"), QString::fromUtf8(e.what()));
    return false;
  }
  set_current_file(path);
  add_recent(path);
  log::info("saved preset {}", path.toStdString());
  return true;
}

bool MainWindow::save_image(const QString& path) {
  const ImageView* v = result_->current();
  if (!v || v->qimage.isNull()) return false;
  try {
    nlohmann::json extra = nlohmann::json::object();
    if (!v->report.device.empty() || !v->report.decodes.empty())
      extra["report"] = studies::image_report_json(v->report);
    write_run_png(path.toStdString(), v->image.image, v->image.config, extra);
  } catch (const std::exception& e) {
    show_error(tr("Cannot save the image"), QString::fromUtf8(e.what()));
    return false;
  }
  log::info("saved image {}", path.toStdString());
  statusBar()->showMessage(tr("Saved %1").arg(path), 4000);
  return true;
}

void MainWindow::add_recent(const QString& path) {
  auto s = settings();
  QStringList recent = s.value("recentFiles").toStringList();
  const QString abs = QFileInfo(path).absoluteFilePath();
  recent.removeAll(abs);
  recent.prepend(abs);
  while (recent.size() > kMaxRecent) recent.removeLast();
  s.setValue("recentFiles", recent);
  rebuild_recent_menu();
}

void MainWindow::rebuild_recent_menu() {
  recent_menu_->clear();
  const QStringList recent = settings().value("recentFiles").toStringList();
  for (const QString& path : recent) {
    recent_menu_->addAction(QFileInfo(path).fileName() + "   " + QFileInfo(path).absolutePath(), this, [this, path] {
      if (confirm_discard()) open_file(path);
    });
  }
  if (!recent.isEmpty()) {
    recent_menu_->addSeparator();
    recent_menu_->addAction(tr("Clear the List"), this, [this] {
      settings().remove("recentFiles");
      rebuild_recent_menu();
    });
  }
  recent_menu_->setEnabled(!recent.isEmpty());
}

bool MainWindow::confirm_discard() {
  if (!dirty_ || !interactive_) return true;
  const auto answer = QMessageBox::question(this, tr("Unsaved settings"),
                                            tr("The current settings are not saved in a preset. Save them first?"),
                                            QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
  if (answer == QMessageBox::Cancel) return false;
  if (answer == QMessageBox::Discard) return true;
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Save preset"), current_file_.isEmpty() ? "preset.json" : current_file_, tr("Presets (*.json)"));
  return !path.isEmpty() && save_preset(path);
}

void MainWindow::show_error(const QString& title, const QString& text) {
  log::error("{}: {}", title.toStdString(), text.toStdString());
  statusBar()->showMessage(title + ": " + text, 10000);
  if (interactive_) QMessageBox::warning(this, title, text);
}

QStringList MainWindow::panel_names() const {
  QStringList names = {"inspector"};
  for (auto it = docks_.begin(); it != docks_.end(); ++it) names << it.key();
  return names;
}

QImage MainWindow::screenshot(const QString& panel) {
  if (panel.isEmpty() || panel == "window") return grab().toImage();
  if (panel == "inspector") return inspector_->grab().toImage();
  if (QDockWidget* d = docks_.value(panel)) {
    // A dock tabbed behind another is hidden, or (before the window was first laid out) parked off-screen.
    if ((!d->isVisible() || d->visibleRegion().isEmpty()) && d->toggleViewAction()->isChecked()) {
      d->raise();  // tabbed behind another dock: bring it to the front, laid out at its tab's size
      // The dock layout settles over a few event-loop turns (and animates with AnimatedDocks).
      QElapsedTimer settle;
      settle.start();
      while (settle.elapsed() < 400) QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    }
    if (!d->isVisible()) return {};
    return d->grab().toImage();
  }
  return {};
}

void MainWindow::export_screenshot(const QString& panel) {
  const QImage img = screenshot(panel);
  if (img.isNull()) {
    show_error(tr("Nothing to capture"), tr("The panel '%1' is hidden: show it from the View menu first.").arg(panel));
    return;
  }
  const QString name = QString("nanscope-%1.png").arg(panel.isEmpty() ? "window" : panel);
  const QString path = QFileDialog::getSaveFileName(this, tr("Export screenshot"), name, tr("PNG images (*.png)"));
  if (path.isEmpty()) return;
  if (!img.save(path, "PNG")) {
    show_error(tr("Cannot save the screenshot"), tr("Writing %1 failed.").arg(path));
    return;
  }
  statusBar()->showMessage(tr("Saved %1").arg(path), 4000);
}

void MainWindow::unelide_dock_tabs() {
  for (QTabBar* bar : findChildren<QTabBar*>(QString(), Qt::FindDirectChildrenOnly)) {
    bar->setElideMode(Qt::ElideNone);
    bar->setUsesScrollButtons(true);
    bar->setExpanding(false);
  }
}

void MainWindow::showEvent(QShowEvent* event) {
  QMainWindow::showEvent(event);
  unelide_dock_tabs();
  // The main window makes its dock tab bars while laying out: once more after that.
  QTimer::singleShot(0, this, [this] { unelide_dock_tabs(); });
}

void MainWindow::restore_settings() {
  auto s = settings();
  if (s.contains("geometry")) restoreGeometry(s.value("geometry").toByteArray());
  if (s.contains("windowState")) restoreState(s.value("windowState").toByteArray());
  unelide_dock_tabs();
  const QString last = s.value("lastConfig").toString();
  if (!last.isEmpty()) {
    try {
      load_config(run_config_from_json(nlohmann::json::parse(last.toStdString()), "the last session"));
    } catch (const std::exception& e) {
      log::warn("could not restore the last session's settings: {}", e.what());
    }
  }
}

void MainWindow::save_settings() {
  if (!interactive_) return;  // scripted runs and tests leave the user's layout and settings alone
  auto s = settings();
  s.setValue("geometry", saveGeometry());
  s.setValue("windowState", saveState());
  try {
    s.setValue("lastConfig", QString::fromStdString(to_json(current_config()).dump()));
  } catch (const std::exception&) {
    // An invalid half-edited config is not worth keeping.
  }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!confirm_discard()) {
    event->ignore();
    return;
  }
  save_settings();
  if (running_) {
    statusBar()->showMessage(tr("Stopping the run..."));
    engine_->shutdown();  // cancels and waits for the current step
  }
  event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  const auto urls = event->mimeData()->urls();
  if (urls.size() != 1 || running_) return;
  const QFileInfo f(urls.front().toLocalFile());
  if (f.isDir() || f.suffix().compare("json", Qt::CaseInsensitive) == 0 ||
      f.suffix().compare("png", Qt::CaseInsensitive) == 0)
    event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QString path = event->mimeData()->urls().front().toLocalFile();
  if (QFileInfo(path).isDir()) {
    model_->set_model_folder(path);
  } else if (confirm_discard()) {
    open_file(path);
  }
  event->acceptProposedAction();
}

}  // namespace nanscope::gui
