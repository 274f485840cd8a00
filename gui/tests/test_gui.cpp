// Workbench tests: the real window, driven through its controls, on Qt's
// offscreen platform (QT_QPA_PLATFORM=offscreen). The run tests need the
// embedded model (or NANSCOPE_MODEL_DIR) and skip with a note without it.

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFile>
#include <QGroupBox>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabBar>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QtTest>
#include <algorithm>
#include <cstdlib>
#include <memory>

#include "ab_panel.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "config/foreign_generation.hpp"
#include "config/preset.hpp"
#include "config/settings.hpp"
#include "config_diff.hpp"
#include "config_panels.hpp"
#include "core/version.hpp"
#include "engine_types.hpp"
#include "img2img_panel.hpp"
#include "inspector_panel.hpp"
#include "io/file_hash.hpp"
#include "io/png.hpp"
#include "io/safetensors.hpp"
#include "kernel_cache_dialog.hpp"
#include "layer_trace_panel.hpp"
#include "lora_list.hpp"
#include "main_window.hpp"
#include "pipeline/sd_model.hpp"
#include "probe_dialog.hpp"
#include "reproduce_dialog.hpp"
#include "result_panel.hpp"
#include "settings_panel.hpp"
#include "studies/scenario.hpp"
#include "support/small_fs.hpp"

using namespace nanscope;
using namespace nanscope::gui;

class GuiTest : public QObject {
  Q_OBJECT

 private:
  bool have_model_ = false;
  QString model_note_;

  std::unique_ptr<MainWindow> make_window() {
    auto w = std::make_unique<MainWindow>();
    w->set_interactive(false);
    w->resize(1400, 900);
    w->show();
    QSignalSpy listed(w.get(), &MainWindow::devicesListed);
    if (listed.isEmpty()) listed.wait(60000);
    return w;
  }

  // Types a prompt and a step count into the controls and presses Run.
  static void press_run(MainWindow& w, int steps, const QString& prompt) {
    auto* edit = w.findChild<QPlainTextEdit*>("prompt");
    QVERIFY(edit);
    edit->clear();
    QTest::keyClicks(edit, prompt);
    auto* spin = w.findChild<QSpinBox*>("steps");
    QVERIFY(spin);
    spin->setValue(steps);
    auto* run = w.findChild<QToolButton*>("runButton");
    QVERIFY(run);
    QVERIFY(run->isEnabled());
    QTest::mouseClick(run, Qt::LeftButton);
    QVERIFY(w.running());
  }

 private slots:
  void initTestCase() {
    QSettings("NaNscope", qEnvironmentVariable("NANSCOPE_GUI_SETTINGS_SCOPE", "nanscope-test")).clear();
    try {
      pipeline::embedded_model_dir();
      have_model_ = true;
    } catch (const std::exception& e) {
      model_note_ = QString::fromUtf8(e.what());
    }
  }

  void run_end_to_end_with_low_latency() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    QSignalSpy steps(w->controller(), &EngineController::step);

    // Event-loop latency: a 5 ms timer on the GUI thread; the largest gap between ticks.
    QElapsedTimer clock;
    qint64 last = 0, worst = 0;
    QTimer tick;
    tick.setInterval(5);
    QObject::connect(&tick, &QTimer::timeout, [&] {
      const qint64 now = clock.elapsed();
      worst = std::max(worst, now - last);
      last = now;
    });
    clock.start();
    tick.start();

    const int kSteps = 8;
    press_run(*w, kSteps, "a red circle");
    QVERIFY(done.wait(300000));
    tick.stop();
    const RunFinished f = done.front().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    QVERIFY(!f.cancelled);
    QCOMPARE(steps.size(), kSteps);
    QCOMPARE(w->inspector()->steps_received(0), kSteps);
    QCOMPARE(w->inspector()->points_plotted(), kSteps);
    QVERIFY(w->result_panel()->has_image());
    // The verdict carries the engine's own outcome for the image.
    const ImageView* img = w->result_panel()->current();
    QVERIFY(img);
    QVERIFY2(w->inspector()->verdict().contains(QString::fromStdString(img->report.outcome).toHtmlEscaped()),
             qPrintable(w->inspector()->verdict()));
    qInfo("run: %.2f s; worst event-loop gap during the run: %lld ms", f.seconds, worst);
    QVERIFY2(worst < 250, qPrintable(QString("the GUI thread stalled for %1 ms").arg(worst)));

    // Save the image, open it again: the config comes back.
    QTemporaryDir dir;
    const QString png = dir.filePath("out.png");
    QVERIFY(w->save_image(png));
    const RunConfig saved = img->image.config;
    auto w2 = make_window();
    QVERIFY(w2->open_file(png));
    QCOMPARE(to_json(w2->current_config()).dump(), to_json(saved).dump());
  }

  // Saving onto a full disk or a read-only file system: the save fails with a
  // message that says what to do, the old file survives, the image stays in
  // the workbench and saves elsewhere; a failed preset save keeps the current file.
  void full_or_read_only_disk_keeps_the_image() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    test::SmallFilesystem disk(256 << 10);
    if (!disk.ok()) QSKIP(disk.reason().c_str());
    auto w = make_window();
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    press_run(*w, 2, "a red circle");
    QVERIFY(done.wait(300000));
    QVERIFY(w->result_panel()->has_image());
    const QString png = QString::fromStdString((disk / "out.png").string());
    const QString preset = QString::fromStdString((disk / "preset.json").string());
    for (const QString& path : {png, preset}) {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("old bytes");
    }
    const auto old_bytes = [](const QString& path) {
      QFile f(path);
      return f.open(QIODevice::ReadOnly) && f.readAll() == "old bytes";
    };
    disk.fill();
    QVERIFY(!w->save_image(png));
    QVERIFY2(w->statusBar()->currentMessage().contains("Free some disk space"),
             qPrintable(w->statusBar()->currentMessage()));
    QVERIFY(old_bytes(png));
    QVERIFY(w->result_panel()->has_image());
    QVERIFY(!w->save_preset(preset));
    QVERIFY(old_bytes(preset));
    QVERIFY(disk.make_read_only());
    QVERIFY(!w->save_image(png));
    QVERIFY2(w->statusBar()->currentMessage().contains("writable"), qPrintable(w->statusBar()->currentMessage()));
    QVERIFY(old_bytes(png));
    QVERIFY(w->result_panel()->has_image());
    QTemporaryDir elsewhere;
    QVERIFY(w->save_image(elsewhere.filePath("out.png")));
    QVERIFY(QFileInfo(elsewhere.filePath("out.png")).size() > 100);
    QVERIFY(w->save_preset(elsewhere.filePath("preset.json")));
  }

  void cancel_mid_run() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    QSignalSpy steps(w->controller(), &EngineController::step);
    press_run(*w, 500, "a blue square");
    QVERIFY(steps.wait(120000));
    QElapsedTimer t;
    t.start();
    w->cancel_run();
    QVERIFY(done.wait(60000));
    const RunFinished f = done.front().front().value<RunFinished>();
    QVERIFY(f.cancelled);
    QVERIFY(w->inspector()->steps_received(0) < 500);
    qInfo("cancel took %lld ms after %d step(s)", t.elapsed(), w->inspector()->steps_received(0));
    QVERIFY(!w->running());
  }

  // A Cancel pressed while a run is queued but not yet started cancels that
  // run (the worker no longer resets the flag when a request begins), and
  // cannot cancel a run requested after it.
  void cancel_before_a_queued_run_starts() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    EngineController c;  // on this thread: the slots below run in order, synchronously
    QSignalSpy done(&c, &EngineController::runFinished);
    RunConfig config;
    config.steps = 2;
    c.note_request();  // the GUI queues a run...
    c.cancel();        // ...and the user cancels before the worker reaches it
    c.run(config);
    QCOMPARE(done.size(), 1);
    RunFinished f = done.takeFirst().front().value<RunFinished>();
    QVERIFY(f.cancelled);
    QCOMPARE(f.images, 0);
    c.note_request();  // the next run is not touched by the earlier Cancel
    c.run(config);
    QCOMPARE(done.size(), 1);
    f = done.takeFirst().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    QVERIFY(!f.cancelled);
    QCOMPARE(f.images, 1);
    // Two runs queued, Cancel pressed once: both are cancelled.
    c.note_request();
    c.note_request();
    c.cancel();
    c.run(config);
    c.run(config);
    QCOMPARE(done.size(), 2);
    QVERIFY(done.at(0).front().value<RunFinished>().cancelled);
    QVERIFY(done.at(1).front().value<RunFinished>().cancelled);
  }

  // A size the device cannot hold (the size boxes allow up to 16384) is
  // refused before any work with the memory plan's message; the window keeps
  // working and the next run gives an image.
  void a_size_the_device_cannot_hold_is_refused_and_the_next_run_works() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QTemporaryDir dir;
    auto write = [&](const QString& name, const QByteArray& json) {
      QFile f(dir.filePath(name));
      if (!f.open(QIODevice::WriteOnly)) return QString();
      f.write(json);
      return f.fileName();
    };
    const QString huge = write("huge.json", R"({"nanscope_preset": 1, "prompt": "a red circle", "steps": 1,
                                               "cfg_scale": 1, "width": 16384, "height": 16384})");
    const QString small = write("small.json", R"({"nanscope_preset": 1, "prompt": "a red circle", "steps": 2})");
    QVERIFY(w->open_file(huge));
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    auto* run = w->findChild<QToolButton*>("runButton");
    QVERIFY(run);
    run->click();
    QVERIFY(done.wait(120000));
    RunFinished f = done.takeFirst().front().value<RunFinished>();
    QVERIFY(!f.ok);
    QVERIFY2(f.error.contains("16384x16384 does not fit"), qPrintable(f.error));
    QVERIFY2(f.error.contains("The largest square size that fits is"), qPrintable(f.error));
    QVERIFY(!w->running());
    QVERIFY(w->open_file(small));
    run->click();
    QVERIFY(done.wait(120000));
    f = done.takeFirst().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    QCOMPARE(f.images, 1);
  }

  // Settings without a control of their own are listed under More, each with
  // an editor made from its settings-table row: a new row needs no GUI code.
  void more_settings_come_from_the_table() {
    auto w = make_window();
    auto* more = w->findChild<MoreSettingsPanel*>("moreSettingsPanel");
    QVERIFY(more);
    const QStringList keys = more->keys();
    QVERIFY2(keys.contains("noise.torch_cpu_kernel"), qPrintable(keys.join(", ")));
    QVERIFY2(keys.contains("inspect.emulate_min_tokens"), qPrintable(keys.join(", ")));
    for (const char* own : {"steps", "noise", "model", "device", "unet.dtype", "inspect.trace", "nan_policy"}) {
      QVERIFY2(!keys.contains(own), own);
    }
    // Every row of the table has a control somewhere.
    for (const Setting& row : settings()) {
      QVERIFY2(keys.contains(QString::fromStdString(row.key)) || is_shown(row.key), row.key.c_str());
    }
    auto* kernel = w->findChild<QComboBox*>("noise.torch_cpu_kernel");
    QVERIFY(kernel);
    QVERIFY2(kernel->toolTip().contains("--set noise.torch_cpu_kernel"), qPrintable(kernel->toolTip()));
    QCOMPARE(kernel->currentData().toString(), QString("auto"));
    kernel->setCurrentIndex(kernel->findData("default"));
    QCOMPARE(w->current_config().torch_cpu_kernel, TorchCpuKernel::scalar);
    auto* tokens = w->findChild<QSpinBox*>("inspect.emulate_min_tokens");
    QVERIFY(tokens);
    QCOMPARE(tokens->maximum(), static_cast<int>(setting("inspect.emulate_min_tokens").max));
    tokens->setValue(2048);
    QCOMPARE(w->current_config().inspect.value("emulate_min_tokens", 0), 2048);
    // Loading a config sets the editors; storing it again changes nothing.
    RunConfig c = w->current_config();
    c.set("noise.torch_cpu_kernel", "avx2");
    c.set("inspect.emulate_min_tokens", "64");
    w->load_config(c);
    QCOMPARE(kernel->currentData().toString(), QString("avx2"));
    QCOMPARE(tokens->value(), 64);
    QCOMPARE(to_json(w->current_config()).dump(), to_json(c).dump());
  }

  // The tab bars of the docks show every label whole at the default layout
  // (1500x950): Qt's style elided them to "Precis..." and "Attent...".
  void dock_tab_labels_are_readable() {
    auto w = std::make_unique<MainWindow>();
    w->set_interactive(false);
    w->resize(1500, 950);
    w->show();
    QVERIFY(QTest::qWaitForWindowExposed(w.get()));
    QTest::qWait(50);
    int bars = 0;
    for (QTabBar* bar : w->findChildren<QTabBar*>(QString(), Qt::FindDirectChildrenOnly)) {
      if (!bar->isVisible() || bar->count() < 2) continue;
      ++bars;
      const QFontMetrics fm(bar->font());
      int total = 0;
      QString widths;
      for (int i = 0; i < bar->count(); ++i) {
        widths += QString(" '%1' %2").arg(bar->tabText(i)).arg(bar->tabRect(i).width());
        const QString text = bar->tabText(i);
        QVERIFY2(bar->tabRect(i).width() >= fm.horizontalAdvance(text),
                 qPrintable(QString("tab '%1' is %2 px wide for %3 px of text")
                                .arg(text)
                                .arg(bar->tabRect(i).width())
                                .arg(fm.horizontalAdvance(text))));
        total += bar->tabRect(i).width();
      }
      QVERIFY2(total <= bar->width(),
               qPrintable(QString("the tabs need %1 px, the bar has %2 (some are scrolled away):%3")
                              .arg(total)
                              .arg(bar->width())
                              .arg(widths)));
    }
    QVERIFY(bars >= 2);  // the settings column and the bottom panels
  }

  void close_during_run_is_clean() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QSignalSpy steps(w->controller(), &EngineController::step);
    press_run(*w, 500, "a green triangle");
    QVERIFY(steps.wait(120000));
    QElapsedTimer t;
    t.start();
    w->close();
    w.reset();  // stops the engine thread: must come back within a step or two
    QVERIFY2(t.elapsed() < 20000, qPrintable(QString("closing took %1 ms").arg(t.elapsed())));
  }

  // Runs an opened scenario to the end; the image view of the first image.
  static const ImageView* run_scenario(MainWindow& w, const QString& id, bool fixed) {
    if (!w.open_scenario(id, fixed)) return nullptr;
    QSignalSpy done(&w, &MainWindow::runCompleted);
    if (!w.start_run() || !done.wait(300000)) return nullptr;
    return w.result_panel()->current();
  }

  void scenario_r0_detected_and_fixed() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    const ImageView* broken = run_scenario(*w, "R0", false);
    QVERIFY(broken);
    const auto expected = studies::find_scenario("R0")->broken_verdict;
    QCOMPARE(inspect::verdict_name(broken->report.inspection.verdict), inspect::verdict_name(expected));
    QVERIFY2(w->inspector()->verdict().contains(QString::fromStdString(std::string(inspect::verdict_name(expected)))),
             qPrintable(w->inspector()->verdict()));
    const ImageView* fixed = run_scenario(*w, "R0", true);
    QVERIFY(fixed);
    QCOMPARE(inspect::verdict_name(fixed->report.inspection.verdict), inspect::verdict_name(inspect::Verdict::clean));
  }

  // Where a test's screenshots go: $NANSCOPE_TEST_SCREENSHOTS, else screenshots/ in the working directory.
  static QString screenshot_path(const QString& name) {
    const QString dir = qEnvironmentVariable("NANSCOPE_TEST_SCREENSHOTS", QDir::current().filePath("screenshots"));
    QDir().mkpath(dir);
    return QDir(dir).filePath(name);
  }

  // Run > Probe Device...: the probe window shows progress, then every
  // distinct op of the embedded model at 64x64 in a table, worst first, all
  // agreeing on a healthy device; Cancel stops a second probe between ops.
  void device_probe_table_progress_and_cancel() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    auto* action = w->findChild<QAction*>("probeDeviceAction");
    QVERIFY(action);
    action->trigger();
    ProbeDialog* d = w->probe_dialog();
    QVERIFY(d);
    QVERIFY(d->busy());
    QSignalSpy progress(w->controller(), &EngineController::probeProgress);
    QSignalSpy finished(d, &ProbeDialog::finishedProbe);
    QVERIFY(finished.wait(120000));
    QVERIFY(finished.front().front().toBool());
    QVERIFY(!progress.isEmpty());
    QVERIFY(!d->busy());
    QTableWidget* t = d->table();
    QVERIFY(t->rowCount() > 20);
    QVERIFY2(d->summary().contains("every op agrees"), qPrintable(d->summary()));
    QCOMPARE(t->horizontalHeaderItem(1)->text(), QString("Verdict"));
    for (int r = 0; r < t->rowCount(); ++r) QCOMPARE(t->item(r, 1)->text(), QString("agrees"));
    QVERIFY(t->item(0, 3)->text().contains('.'));  // a module path
    // Sortable: by calls, most first.
    t->sortByColumn(4, Qt::DescendingOrder);
    QVERIFY(t->item(0, 4)->text().toInt() >= t->item(t->rowCount() - 1, 4)->text().toInt());
    t->sortByColumn(0, Qt::AscendingOrder);
    QCoreApplication::processEvents();
    const QString shot = screenshot_path("probe-device.png");
    QVERIFY(d->grab().save(shot));
    qInfo("screenshot: %s", qPrintable(shot));

    // Cancel, pressed before the engine thread picked the probe up: it stops before its first op.
    QVERIFY(w->open_probe(false));
    QTest::mouseClick(d->cancel_button(), Qt::LeftButton);
    QVERIFY(finished.wait(60000));
    QVERIFY2(d->summary().contains("cancelled"), qPrintable(d->summary()));
  }

  // Run > f16 Safety... on R2 (the embedded vae/ in f16): the modules that
  // overflow are named with their headroom, "Apply these overrides" writes
  // them into the settings, and a run with them decodes clean.
  void f16_safety_names_the_overflow_and_applies_its_overrides() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QVERIFY(w->open_scenario("R2", false));
    auto* action = w->findChild<QAction*>("f16SafetyAction");
    QVERIFY(action);
    action->trigger();
    ProbeDialog* d = w->probe_dialog();
    QVERIFY(d);
    QSignalSpy finished(d, &ProbeDialog::finishedProbe);
    QVERIFY(finished.wait(120000));
    QVERIFY(finished.front().front().toBool());
    QCOMPARE(d->table()->item(0, 1)->text(), QString("vae.decoder.up_blocks.2.resnets.0.conv1"));
    QVERIFY(d->apply_button()->isVisible());
    QCOMPARE(d->overrides(), (QStringList{"vae.decoder.up_blocks.2.resnets.0.conv1.dtype=f32",
                                          "vae.decoder.up_blocks.2.resnets.0.norm2.dtype=f32"}));
    QCoreApplication::processEvents();
    const QString shot = screenshot_path("probe-f16-safety.png");
    QVERIFY(d->grab().save(shot));
    qInfo("screenshot: %s", qPrintable(shot));
    QTest::mouseClick(d->apply_button(), Qt::LeftButton);
    QVERIFY(!d->apply_button()->isEnabled());
    const RunConfig c = w->current_config();
    QCOMPARE(c.overrides.size(), std::size_t{2});
    QVERIFY(c.component(Component::vae).precision.dtype == DType::f16);
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    QVERIFY(w->start_run());
    QVERIFY(done.wait(300000));
    const ImageView* img = w->result_panel()->current();
    QVERIFY(img);
    QCOMPARE(img->image.nonfinite_pixels, std::int64_t{0});
  }

  // R2 with the retry-layer-f32 policy: the run comes out clean with only the
  // VAE modules that broke in f32, the inspector offers them as a fix, and
  // "Apply this fix" writes them into the settings (and so into a saved preset).
  void retry_layer_f32_offers_its_fix_and_apply_writes_it_into_the_config() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QVERIFY(w->open_scenario("R2", false));
    auto* policy = w->findChild<QComboBox*>("nanPolicy");
    QVERIFY(policy);
    const int index = policy->findData("retry-layer-f32");
    QVERIFY(index >= 0);
    policy->setCurrentIndex(index);
    auto* apply = w->findChild<QPushButton*>("applyFix");
    QVERIFY(apply);
    QVERIFY(!apply->isVisible());
    QVERIFY(w->current_config().overrides.empty());

    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    QVERIFY(w->start_run());
    QVERIFY(done.wait(300000));
    const ImageView* img = w->result_panel()->current();
    QVERIFY(img);
    const auto& lr = img->report.layer_retry;
    QCOMPARE(inspect::verdict_name(img->report.inspection.verdict), inspect::verdict_name(inspect::Verdict::clean));
    QVERIFY2(lr.clean, lr.remaining.c_str());
    QVERIFY(!lr.upcast.empty());
    QCOMPARE(QString::fromStdString(lr.upcast.front()), QString("vae.decoder.up_blocks.2.resnets.0.conv1"));
    for (const auto& u : lr.upcast) QVERIFY2(u.rfind("vae.decoder.", 0) == 0, u.c_str());
    QVERIFY(apply->isVisible());
    QVERIFY2(apply->text().startsWith("Apply this fix"), qPrintable(apply->text()));
    QVERIFY2(w->inspector()->verdict().contains("recovered by retry-layer-f32"), qPrintable(w->inspector()->verdict()));
    QCoreApplication::processEvents();
    const QString offer = screenshot_path("retry-layer-f32-fix-offer.png");
    QVERIFY(w->screenshot().save(offer));
    qInfo("screenshot: %s", qPrintable(offer));

    QTest::mouseClick(apply, Qt::LeftButton);
    QVERIFY(!apply->isEnabled());  // applied once; the next run offers its own
    QVERIFY2(apply->text().startsWith("Fix applied"), qPrintable(apply->text()));
    const RunConfig c = w->current_config();
    QCOMPARE(c.overrides.size(), lr.upcast.size());
    for (std::size_t i = 0; i < lr.upcast.size(); ++i) {
      QCOMPARE(QString::fromStdString(c.overrides[i].pattern), QString::fromStdString(lr.upcast[i]));
      QVERIFY(c.overrides[i].dtype && *c.overrides[i].dtype == DType::f32);
      QVERIFY(!c.overrides[i].accumulate && !c.overrides[i].softmax);
    }
    QVERIFY(c.component(Component::vae).precision.dtype == DType::f16);  // the rest of the VAE stays f16
    QVERIFY(w->is_dirty());
    auto* table = w->findChild<QTableWidget*>("overrides");
    QVERIFY(table);
    QCOMPARE(table->rowCount(), static_cast<int>(lr.upcast.size()));
    QCOMPARE(table->item(0, 0)->text(), QString::fromStdString(lr.upcast.front()));
    QCOMPARE(table->item(0, 1)->text(), QString("dtype=f32"));
    QVERIFY2(w->statusBar()->currentMessage().contains("Save preset keeps them"),
             qPrintable(w->statusBar()->currentMessage()));
    QCoreApplication::processEvents();
    const QString applied = screenshot_path("retry-layer-f32-fix-applied.png");
    QVERIFY(w->screenshot().save(applied));
    qInfo("screenshot: %s", qPrintable(applied));

    // Save preset stores the overrides.
    QTemporaryDir dir;
    const QString path = dir.filePath("fixed.json");
    QVERIFY(w->save_preset(path));
    QCOMPARE(to_json(load_preset(path.toStdString())).dump(), to_json(c).dump());

    // With the overrides and the plain report policy the same run decodes clean the first time.
    policy->setCurrentIndex(policy->findData("report"));
    QVERIFY(w->start_run());
    QVERIFY(done.wait(300000));
    const ImageView* again = w->result_panel()->current();
    QVERIFY(again);
    QCOMPARE(inspect::verdict_name(again->report.inspection.verdict), inspect::verdict_name(inspect::Verdict::clean));
    QCOMPARE(again->report.decodes.size(), std::size_t{1});
    QVERIFY(!again->report.layer_retry.active);
    QVERIFY(!apply->isVisible());
  }

  // img2img from a picked PNG, then a hires-fix run: both end to end, the
  // inspector and the status say which pass a step belongs to.
  void img2img_and_hires_fix_end_to_end() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    auto* panel = w->findChild<Img2ImgPanel*>("img2imgPanel");
    QVERIFY(panel);
    QTemporaryDir dir;
    const QString init = dir.filePath("init.png");
    QImage picture(40, 24, QImage::Format_RGB888);  // another size than the run's: resized, with a note
    for (int y = 0; y < picture.height(); ++y)
      for (int x = 0; x < picture.width(); ++x) picture.setPixel(x, y, qRgb(6 * x, 200 - 8 * y, x * y % 256));
    QVERIFY(picture.save(init));
    panel->set_init_image(init);
    auto* strength = w->findChild<QDoubleSpinBox*>("strength");
    QVERIFY(strength && strength->isEnabled());
    strength->setValue(0.5);
    auto* hires = w->findChild<QGroupBox*>("hiresFix");
    QVERIFY(hires && !hires->isEnabled());  // a hires pass is txt2img's
    RunConfig c = w->current_config();
    QCOMPARE(QString::fromStdString(c.init_image), init);
    QCOMPARE(c.strength, 0.5);

    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    press_run(*w, 4, "a red circle");
    QVERIFY(done.wait(300000));
    RunFinished f = done.takeFirst().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    QCOMPARE(w->inspector()->steps_received(0), 2);  // the last int(4 * 0.5) steps
    const ImageView* img = w->result_panel()->current();
    QVERIFY(img);
    QCOMPARE(QString::fromStdString(img->report.passes.at(0).kind), QString("img2img"));
    QVERIFY2(QString::fromStdString(img->report.passes.at(0).note).contains("resized"),
             img->report.passes.at(0).note.c_str());

    // Hires fix: 2 steps at the base size, then 2 at twice the size.
    panel->set_init_image(QString());
    QVERIFY(hires->isEnabled());
    hires->setChecked(true);
    w->findChild<QDoubleSpinBox*>("hiresScale")->setValue(2.0);
    w->findChild<QSpinBox*>("hiresSteps")->setValue(2);
    w->findChild<QDoubleSpinBox*>("hiresDenoise")->setValue(0.5);
    auto* upscaler = w->findChild<QComboBox*>("hiresUpscaler");
    upscaler->setCurrentIndex(upscaler->findData("latent-nearest"));
    c = w->current_config();
    QCOMPARE(c.hires_scale, 2.0);
    QCOMPARE(c.hires_upscaler, HiresUpscaler::latent_nearest);
    press_run(*w, 2, "a red circle");
    QVERIFY(done.wait(300000));
    f = done.takeFirst().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    QCOMPARE(w->inspector()->steps_received(0), 4);
    QCOMPARE(w->inspector()->points_plotted(), 4);
    const StepView* last = w->inspector()->step_view(0, 3);
    QVERIFY(last);
    QCOMPARE(last->report.pass, 2);
    QVERIFY2(w->inspector()->step_caption().contains("Pass 2 of 2"), qPrintable(w->inspector()->step_caption()));
    img = w->result_panel()->current();
    QVERIFY(img);
    QCOMPARE(img->report.passes.size(), std::size_t{2});
    QCOMPARE(img->image.image.width, 2 * img->report.passes.at(0).width);

    // Hires resize to another aspect with the second pass's own sampler, CFG and prompt (A1111's Hires resize,
    // Hires sampler, Hires CFG Scale, Hires prompt): 64x64 -> 128x64, the enlarged 128x128 cropped.
    w->findChild<QSpinBox*>("hiresWidth")->setValue(128);
    w->findChild<QSpinBox*>("hiresHeight")->setValue(64);
    QVERIFY(!w->findChild<QDoubleSpinBox*>("hiresScale")->isEnabled());
    auto* hsampler = w->findChild<QComboBox*>("hiresSampler");
    hsampler->setCurrentIndex(hsampler->findData("dpmpp_2m"));
    w->findChild<QDoubleSpinBox*>("hiresCfg")->setValue(4.0);
    w->findChild<QLineEdit*>("hiresPrompt")->setText("a blue square");
    c = w->current_config();
    QCOMPARE(c.hires_width, 128);
    QCOMPARE(c.hires_height, 64);
    QCOMPARE(c.hires_scale, 0.0);
    QVERIFY(c.hires_sampler == SamplerId::dpmpp_2m);
    QVERIFY(!c.hires_schedule);
    QCOMPARE(c.hires_cfg_scale, 4.0);
    QCOMPARE(c.hires_prompt, std::string("a blue square"));
    press_run(*w, 2, "a red circle");
    QVERIFY(done.wait(300000));
    f = done.takeFirst().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    img = w->result_panel()->current();
    QVERIFY(img);
    QCOMPARE(img->image.image.width, 128);
    QCOMPARE(img->image.image.height, 64);
    QCOMPARE(img->report.passes.at(1).sampler, std::string("dpmpp_2m"));
    QCOMPARE(img->report.passes.at(1).prompt, std::string("a blue square"));
    QCOMPARE(img->report.passes.at(1).cfg_scale, 4.0);
    // The panel shows what it loads.
    RunConfig back;
    back.hires_width = 96;
    back.hires_schedule = ScheduleId::karras;
    panel->load(back);
    QCOMPARE(w->findChild<QSpinBox*>("hiresWidth")->value(), 96);
    QCOMPARE(w->findChild<QComboBox*>("hiresSchedule")->currentData().toString(), QString("karras"));
    QCOMPARE(hsampler->currentIndex(), 0);  // "Use same sampler"
    for (QDockWidget* d : w->findChildren<QDockWidget*>())
      if (d->objectName() == "img2imgDock") d->raise();
    QCoreApplication::processEvents();
    const QString shot = screenshot_path("img2img-hires-fix.png");
    QVERIFY(w->screenshot().save(shot));
    qInfo("screenshot: %s", qPrintable(shot));
  }

  void scenario_r1_layer_trace_names_the_origin() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    const ImageView* broken = run_scenario(*w, "R1", false);
    QVERIFY(broken);
    QVERIFY(!broken->report.inspection.origin.empty());
    QVERIFY(w->layer_trace_panel()->rows() > 0);
    QVERIFY(w->layer_trace_panel()->origin_row() >= 0);
    QVERIFY(
        w->inspector()->verdict().contains(QString::fromStdString(broken->report.inspection.origin).toHtmlEscaped()));
  }

  void ab_compare_plots_every_step() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    w->findChild<QSpinBox*>("steps")->setValue(5);
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    QSignalSpy ab(w->controller(), &EngineController::abFinished);
    QVERIFY(w->start_ab({"unet.dtype=f16"}));
    QVERIFY(done.wait(300000));
    QCOMPARE(ab.size(), 1);
    const AbView v = ab.front().front().value<AbView>();
    QVERIFY2(v.error.isEmpty(), qPrintable(v.error));
    QCOMPARE(v.rel_l2.size(), 5);
    QCOMPARE(w->ab_panel()->points(), 5);
    QVERIFY(!v.image_a.isNull() && !v.image_b.isNull());
  }

  // Sets an inspector spin box, runs 4 steps of "a blue square" and waits: an empty string, or what went wrong.
  static QString run_with_inspector_setting(MainWindow& w, const char* spin, int value) {
    auto* box = w.findChild<QSpinBox*>(spin);
    if (!box) return QStringLiteral("no spin box %1").arg(spin);
    box->setValue(value);
    QSignalSpy done(&w, &MainWindow::runCompleted);
    press_run(w, 4, "a blue square");
    if (!done.wait(300000)) return QStringLiteral("the run did not finish");
    const auto finished = done.front().front().value<RunFinished>();
    return finished.ok ? QString() : QStringLiteral("the run failed: %1").arg(finished.error);
  }

  void step_statistics_every_n_steps() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QCOMPARE(w->findChild<QSpinBox*>("statsEvery")->value(), 1);
    const QString err = run_with_inspector_setting(*w, "statsEvery", 3);
    QVERIFY2(err.isEmpty(), qPrintable(err));
    QCOMPARE(w->current_config().inspect.value("stats_every", 1), 3);
    // Steps 3 and 4 (the last) carry statistics; only they are plotted.
    for (int i = 0; i < 4; ++i) {
      const StepView* s = w->inspector()->step_view(0, i);
      QVERIFY(s);
      QCOMPARE(s->report.latent.count > 0, i >= 2);
    }
    QCOMPARE(w->inspector()->points_plotted(), 2);
  }

  void full_decode_preview_and_live_kernel_builds() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    QSignalSpy builds(w->controller(), &EngineController::kernelBuild);
    const QString err = run_with_inspector_setting(*w, "decodeEvery", 2);
    QVERIFY2(err.isEmpty(), qPrintable(err));
    QCOMPARE(w->current_config().inspect.value("decode_every", 0), 2);
    // Step 2 carries a full decode of its x0 prediction; the last step (the image itself) and the others do not.
    for (int i = 0; i < 4; ++i) {
      const StepView* s = w->inspector()->step_view(0, i);
      QVERIFY(s);
      QCOMPARE(!s->decoded.isNull(), i == 1);
      if (i == 1) QCOMPARE(s->decoded.size(), QSize(64, 64));
    }
    auto* scrub = w->findChild<QSlider*>("stepScrubber");
    QVERIFY(scrub);
    scrub->setValue(1);
    QVERIFY2(w->inspector()->preview_caption().contains("Full decode"), qPrintable(w->inspector()->preview_caption()));
    scrub->setValue(2);
    QVERIFY(w->inspector()->preview_caption().contains("Latent preview"));
    // Every kernel program the fresh session needed was announced when it started and when it finished.
    int started = 0, finished = 0;
    for (const auto& b : builds) (b.at(2).toBool() ? finished : started) += 1;
    QVERIFY(started > 0);
    QCOMPARE(started, finished);
  }

  // The Model panel's LoRA list: a file added with a weight, the weight
  // changed in its spin box, applied unmerged to a run, then removed.
  void lora_list_end_to_end() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    // A one-module kohya LoRA for the embedded model's first attn1.to_q.
    const auto unet =
        io::SafetensorsFile::open(pipeline::embedded_model_dir() / "unet" / "diffusion_pytorch_model.safetensors");
    std::string module;
    Shape shape;
    for (const auto& e : unet.entries()) {
      if (e.name.ends_with("attn1.to_q.weight")) {
        module = e.name.substr(0, e.name.size() - 7);
        shape = e.shape;
        break;
      }
    }
    QVERIFY(!module.empty());
    std::string kohya = "lora_unet_" + module;
    std::replace(kohya.begin(), kohya.end(), '.', '_');
    QTemporaryDir dir;
    const std::string file = dir.filePath("style.safetensors").toStdString();
    io::write_safetensors(
        file,
        {{kohya + ".lora_down.weight",
          HostTensor::from_f32({2, shape[1]}, std::vector<float>(static_cast<std::size_t>(2 * shape[1]), 0.1f))},
         {kohya + ".lora_up.weight",
          HostTensor::from_f32({shape[0], 2}, std::vector<float>(static_cast<std::size_t>(2 * shape[0]), 0.1f))}});

    auto w = make_window();
    auto* list = w->findChild<LoraList*>("loraList");
    QVERIFY(list);
    list->add_file(QString::fromStdString(file), 0.5);
    QCOMPARE(w->current_config().loras.size(), std::size_t{1});
    auto* weight = list->findChild<QDoubleSpinBox*>("loraWeight");
    QVERIFY(weight);
    weight->setValue(0.75);
    QCOMPARE(w->current_config().loras.front().weight, 0.75);
    QVERIFY(!w->current_config().loras.front().unet_weight);  // the UNet's follows the weight
    auto* unet_box = list->findChild<QDoubleSpinBox*>("loraUnetWeight");
    QVERIFY(unet_box);
    QCOMPARE(unet_box->value(), 0.75);
    unet_box->setValue(0.25);
    QCOMPARE(w->current_config().loras.front().unet(), 0.25);
    weight->setValue(0.8);  // set apart: the UNet's stays
    QCOMPARE(w->current_config().loras.front().unet(), 0.25);
    unet_box->setValue(0.8);
    weight->setValue(0.75);
    auto* mode = w->findChild<QComboBox*>("loraMode");
    QVERIFY(mode);
    mode->setCurrentIndex(mode->findData("unmerged"));
    QVERIFY(w->current_config().lora_unmerged);
    QVERIFY2(!w->findChild<MoreSettingsPanel*>("moreSettingsPanel")->keys().contains("lora"),
             "lora has its own control");
    if (const char* shots = std::getenv("NANSCOPE_SCREENSHOT_DIR"))
      w->findChild<QDockWidget*>("modelDock")->grab().save(QString(shots) + "/lora_list.png");

    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    press_run(*w, 2, "a red circle");
    QVERIFY(done.wait(300000));
    const RunFinished f = done.front().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    const ImageView* img = w->result_panel()->current();
    QVERIFY(img);
    QCOMPARE(img->report.loras.size(), std::size_t{1});
    QCOMPARE(img->report.loras[0].name, std::string("style"));
    QCOMPARE(img->report.loras[0].weight, 0.75);
    QCOMPARE(img->report.loras[0].modules, 1);
    QVERIFY(img->report.lora_unmerged);

    list->findChild<QTableWidget*>("loraTable")->selectRow(0);
    list->findChild<QPushButton*>("loraRemove")->click();
    QVERIFY(w->current_config().loras.empty());
  }

  void drop_model_files_and_recent_files() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    auto w = make_window();
    auto* panel = w->findChild<ModelDevicePanel*>("modelDevicePanel");
    QVERIFY(panel);
    const QString model = QString::fromStdString(pipeline::embedded_model_dir().string());
    // Returns whether the panel accepted the drag, and drops when it did.
    auto drop = [panel](const QString& path) {
      QMimeData mime;
      mime.setUrls({QUrl::fromLocalFile(path)});
      QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
      enter.setAccepted(false);
      QCoreApplication::sendEvent(panel, &enter);
      if (!enter.isAccepted()) return false;
      QDropEvent event(QPointF(5, 5), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
      QCoreApplication::sendEvent(panel, &event);
      return true;
    };
    // A VAE folder becomes the VAE, a model folder the model.
    QVERIFY(drop(model + "/vae-fp16-fix"));
    QCOMPARE(QString::fromStdString(w->current_config().vae), QDir::cleanPath(model + "/vae-fp16-fix"));
    QVERIFY(drop(model));
    QCOMPARE(QString::fromStdString(w->current_config().model), QDir::cleanPath(model));
    // A single-file checkpoint is accepted; a pickle checkpoint is not even taken.
    QTemporaryDir dir;
    QFile(dir.filePath("model.safetensors")).open(QIODevice::WriteOnly);
    QFile(dir.filePath("model.ckpt")).open(QIODevice::WriteOnly);
    QVERIFY(drop(dir.filePath("model.safetensors")));
    QCOMPARE(QString::fromStdString(w->current_config().model), QDir::cleanPath(dir.filePath("model.safetensors")));
    QVERIFY(!drop(dir.filePath("model.ckpt")));

    // A preset saved and opened again leads the recent files.
    panel->set_model_folder(QString());  // back to the embedded model
    const QString preset = dir.filePath("recent-test.json");
    QVERIFY(w->save_preset(preset));
    QVERIFY(w->open_file(preset));
    QMenu* recent = nullptr;
    for (QMenu* m : w->findChildren<QMenu*>())
      if (m->title().contains("Recent")) recent = m;
    QVERIFY(recent);
    QVERIFY(!recent->actions().isEmpty());
    QVERIFY2(recent->actions().front()->text().startsWith("recent-test.json"),
             qPrintable(recent->actions().front()->text()));
  }

  // Ranges and tooltips come from the settings table (config/settings.hpp), not literals.
  void spin_boxes_follow_the_settings_table() {
    auto w = make_window();
    for (const auto& [name, key] : {std::pair{"steps", "steps"},
                                    {"statsEvery", "inspect.stats_every"},
                                    {"decodeEvery", "inspect.decode_every"}}) {
      auto* box = w->findChild<QSpinBox*>(name);
      QVERIFY2(box, name);
      const Setting& row = setting(key);
      QCOMPARE(box->minimum(), static_cast<int>(row.min));
      QCOMPARE(box->maximum(), static_cast<int>(row.max));
      QVERIFY2(box->toolTip().startsWith(QString::fromStdString(row.help)), qPrintable(box->toolTip()));
      QVERIFY2(box->toolTip().contains(QString::fromStdString(row.allowed())), qPrintable(box->toolTip()));
    }
  }

  // The scenario diff walks the table: every kind of row, overrides and inspector settings rebuild the target.
  void config_diff_rebuilds_the_target() {
    RunConfig base;
    base.set("seeds", "3,5,8");
    base.set("unet.up_blocks.*.dtype", "f16");
    base.set("inspect.trace", "always");
    RunConfig t;
    t.set("prompt", "  a cat = a dog ");
    t.set("cfg_scale", "4.25");
    t.set("batch_size", "2");
    t.set("sampler", "ddim");
    t.set("vae.attention.slice_size", "4");
    t.set("unet.*.attn1.accumulate", "native");
    t.set("inspect.stats_every", "3");
    t.set("inspect.layer_retry_limit", "2");
    for (const auto& [from, to] : {std::pair{base, t}, {t, base}, {RunConfig{}, t}}) {
      const ConfigDiff d = config_diff(from, to);
      QVERIFY2(d.ok, qPrintable(QString::fromStdString(to_json(to).dump())));
      RunConfig probe = from;
      for (const auto& a : d.sets) probe.set(a);
      QCOMPARE(QString::fromStdString(to_json(probe).dump()), QString::fromStdString(to_json(to).dump()));
    }
    QVERIFY(config_diff(t, t).sets.empty());
  }

  void preset_round_trip() {
    auto w = make_window();
    RunConfig c;
    c.prompt = "a lighthouse at dusk";
    c.negative_prompt = "blurry";
    c.steps = 12;
    c.cfg_scale = 5.5;
    c.seed = 12345678901234ULL;
    c.set("seeds", "3,5,8");
    c.width = 128;
    c.height = 64;
    c.set("sampler", "dpmpp_2m_karras");
    c.set("unet.dtype", "f16");
    c.set("unet.accumulate", "native");
    c.set("vae.dtype", "bf16");
    c.set("text_encoder.attention.softmax", "native");
    c.set("unet.attention.impl", "sliced");
    c.set("unet.attention.slice_size", "2");
    c.set("unet.up_blocks.*.attentions.*.attn1.accumulate", "f32");
    c.set("nan_policy", "retry-vae-f32");
    c.set("inspect.trace", "always");
    c.set("inspect.decode_every", "3");
    c.set("inspect.stats_every", "2");
    c.set("inspect.emulate_min_tokens", "64");  // no control of its own: kept as given
    c.validate();
    w->load_config(c);
    QCOMPARE(to_json(w->current_config()).dump(), to_json(c).dump());

    QTemporaryDir dir;
    const QString path = dir.filePath("round.json");
    QVERIFY(w->save_preset(path));
    QVERIFY(!w->is_dirty());
    QCOMPARE(to_json(load_preset(path.toStdString())).dump(), to_json(c).dump());
    auto w2 = make_window();
    QVERIFY(w2->open_file(path));
    QCOMPARE(to_json(w2->current_config()).dump(), to_json(c).dump());

    // Editing a control marks the settings dirty.
    w2->findChild<QSpinBox*>("steps")->setValue(13);
    QVERIFY(w2->is_dirty());
  }

  // Report R3: a device that is not what it says (Oclgrind, a simulator that reports every device type)
  // is listed, greyed and marked, with the reason in its tooltip, and is not the default.
  void device_panel_marks_devices_that_are_not_what_they_say() {
    const DeviceList list = enumerate_devices();
    const DeviceInfo* suspect = nullptr;
    for (const auto& d : list.devices)
      if (!d.suspect.empty()) suspect = &d;
    if (!suspect) QSKIP("no simulator or software renderer here (tools/setup.sh installs oclgrind)");
    auto w = make_window();
    auto* tree = w->findChild<QTreeWidget*>("deviceList");
    QVERIFY(tree);
    QTreeWidgetItem* item = nullptr;
    for (int i = 0; i < tree->topLevelItemCount(); ++i)
      if (tree->topLevelItem(i)->data(0, Qt::UserRole).toString() == QString::fromStdString(suspect->id))
        item = tree->topLevelItem(i);
    QVERIFY(item);
    QVERIFY2(item->text(1).contains("not what it says"), qPrintable(item->text(1)));
    QVERIFY(!item->text(1).contains("(default)"));
    QVERIFY2(item->toolTip(0).contains("ranked"), qPrintable(item->toolTip(0)));
    QVERIFY(!item->icon(1).isNull());
  }

  // Tools > Kernel Cache...: the table, Verify (and remove) and Clear, each through the engine thread, on a
  // cache of the test's own (one tiny program in two variants, built here) so that Clear touches nothing else.
  void kernel_cache_dialog_lists_verifies_and_clears() {
    const DeviceList list = enumerate_devices();
    const DeviceInfo* dev = nullptr;
    for (const auto& d : list.devices)
      if (!dev && d.kind != DeviceKind::reference && d.kind != DeviceKind::simulator) dev = &d;
    if (!dev) QSKIP("no OpenCL device (pocl-opencl-icd)");
    QTemporaryDir dir;
    const QByteArray old_cache = qgetenv("NANSCOPE_KERNEL_CACHE");
    qputenv("NANSCOPE_KERNEL_CACHE", dir.path().toUtf8());
    struct Restore {
      QByteArray value;
      ~Restore() { value.isEmpty() ? qunsetenv("NANSCOPE_KERNEL_CACHE") : qputenv("NANSCOPE_KERNEL_CACHE", value); }
    } restore{old_cache};
    {
      BackendOptions o;
      o.use_kernel_cache = false;
      opencl::OpenClBackend be(*dev, o);
      opencl::ProgramCache cache(be.context(), static_cast<cl_device_id>(dev->cl_device), *dev,
                                 dir.path().toStdString());
      const std::string src = "__kernel void inc(__global float* a) { a[get_global_id(0)] += STEP; }";
      cache.get_source("inc", src, "-DSTEP=1.0f");
      cache.get_source("inc", src, "-DSTEP=2.0f");
    }
    auto w = make_window();
    auto* action = w->findChild<QAction*>("kernelCacheAction");
    QVERIFY(action);
    action->trigger();
    auto* dialog = w->findChild<KernelCacheDialog*>();
    QVERIFY(dialog);
    QSignalSpy updated(dialog, &KernelCacheDialog::updated);
    QVERIFY(updated.wait(60000));  // the list it asks for when shown
    QTableWidget* table = dialog->table();
    QCOMPARE(table->rowCount(), 2);
    for (int r = 0; r < 2; ++r) {
      QCOMPARE(table->item(r, 2)->text(), QString("inc"));
      QCOMPARE(table->item(r, 0)->text(), QString::fromStdString(dev->name));
      bool number = false;
      table->item(r, 5)->text().toDouble(&number);
      QVERIFY2(number, qPrintable(table->item(r, 5)->text()));  // the build time in ms
    }
    // Corrupt one entry's payload: Verify names it, and removes it only with the box ticked.
    const QStringList bins = QDir(dir.path()).entryList({"*.bin"}, QDir::Files);
    QCOMPARE(bins.size(), 2);
    QFile f(dir.filePath(bins[0]));
    QVERIFY(f.open(QIODevice::ReadWrite));
    QByteArray bytes = f.readAll();
    bytes[bytes.size() - 5] = static_cast<char>(bytes[bytes.size() - 5] ^ 0x33);
    f.seek(0);
    f.write(bytes);
    f.close();
    QTest::mouseClick(dialog->findChild<QPushButton*>("kernelCacheVerify"), Qt::LeftButton);
    QVERIFY(updated.wait(60000));
    QVERIFY2(dialog->message()->text().contains("1 corrupt"), qPrintable(dialog->message()->text()));
    int flagged = 0;
    for (int r = 0; r < table->rowCount(); ++r) flagged += table->item(r, 8)->text().contains("checksum mismatch");
    QCOMPARE(flagged, 1);
    QVERIFY(QFile::exists(dir.filePath(bins[0])));
    dialog->findChild<QCheckBox*>("kernelCacheRemoveCorrupt")->setChecked(true);
    QTest::mouseClick(dialog->findChild<QPushButton*>("kernelCacheVerify"), Qt::LeftButton);
    QVERIFY(updated.wait(60000));
    QCOMPARE(table->rowCount(), 1);
    QVERIFY(!QFile::exists(dir.filePath(bins[0])));
    // Clear for the device (the button asks first; the request is what it sends).
    QComboBox* devices = dialog->device_filter();
    const int index = devices->findData(QString::fromStdString(dev->id));
    QVERIFY(index > 0);
    devices->setCurrentIndex(index);
    dialog->request(3);  // CacheAction::clear
    QVERIFY(updated.wait(60000));
    QVERIFY2(dialog->message()->text().contains("Removed 1 entries"), qPrintable(dialog->message()->text()));
    QCOMPARE(table->rowCount(), 0);
    QVERIFY(QDir(dir.path()).entryList({"*.bin"}, QDir::Files).isEmpty());
  }

  // The memory check's fix in the workbench: on a device whose largest allocation is capped below the
  // decoder's largest buffer at 256x256, the run is refused with VAE tiling proposed; Apply writes the
  // settings and the same run then gives its image.
  void memory_refusal_offers_vae_tiling_and_apply_makes_it_run() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    qputenv("NANSCOPE_MAX_ALLOC_MB", "6");  // read when the window's engine session starts
    auto w = make_window();
    qunsetenv("NANSCOPE_MAX_ALLOC_MB");
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    RunConfig c = w->current_config();
    c.width = c.height = 256;
    c.validate();
    w->load_config(c);
    press_run(*w, 1, "a red circle");
    QVERIFY(done.wait(120000));
    const RunFinished refused = done.takeFirst().front().value<RunFinished>();
    QVERIFY(!refused.ok);
    QVERIFY2(refused.error.contains("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), qPrintable(refused.error));
    QVERIFY2(refused.fix.size() >= 2 && refused.fix.front() == "vae.tiling=on", qPrintable(refused.fix.join(' ')));
    auto* apply = w->findChild<QPushButton*>("applyFix");
    QVERIFY(apply);
    QVERIFY(apply->isVisible());
    QVERIFY2(apply->text().contains("vae.tiling=on"), qPrintable(apply->text()));
    QTest::mouseClick(apply, Qt::LeftButton);
    const RunConfig fixed = w->current_config();
    QCOMPARE(QString::fromStdString(fixed.vae_tiling), QString("on"));
    QVERIFY(fixed.vae_tile_size < 256);
    QCOMPARE(fixed.width, 256);
    auto* run = w->findChild<QToolButton*>("runButton");
    QTest::mouseClick(run, Qt::LeftButton);
    QVERIFY(done.wait(300000));
    const RunFinished ran = done.takeFirst().front().value<RunFinished>();
    QVERIFY2(ran.ok, qPrintable(ran.error));
    QVERIFY(w->result_panel()->has_image());
    QCOMPARE(w->result_panel()->current()->qimage.size(), QSize(256, 256));
  }

  void help_about_names_the_version_and_commit() {
    auto w = make_window();
    auto* about = w->findChild<QAction*>("aboutAction");
    QVERIFY(about);
    QVERIFY(about->text().contains("About"));
    const QString text = MainWindow::about_text();
    QVERIFY2(text.contains(QString::fromStdString(std::string(version()))), qPrintable(text));
    if (git_commit().empty()) {
      QVERIFY2(text.contains("without a git commit"), qPrintable(text));
    } else {
      QVERIFY2(text.contains(QString::fromStdString(std::string(git_commit()))), qPrintable(text));
    }
  }

  // A PNG from A1111 opens the reproduce dialog: no plan until a models folder
  // is chosen, then the plan with what cannot be reproduced; Apply puts the
  // settings into the panels (the folder is remembered) and Run runs them. A
  // ComfyUI graph with a cycle is refused with a message naming the node.
  void a_foreign_png_opens_the_reproduce_dialog_and_apply_runs_it() {
    if (!have_model_) QSKIP(qPrintable("no embedded model: " + model_note_));
    QTemporaryDir dir;
    // The hash cache stays in the test's folder; the variable is restored for the tests after this one.
    const QByteArray old_cache = qgetenv("XDG_CACHE_HOME");
    const bool had_cache = qEnvironmentVariableIsSet("XDG_CACHE_HOME");
    qputenv("XDG_CACHE_HOME", dir.filePath("cache").toUtf8());
    const std::shared_ptr<void> restore(nullptr, [&](void*) {
      if (had_cache) {
        qputenv("XDG_CACHE_HOME", old_cache);
      } else {
        qunsetenv("XDG_CACHE_HOME");
      }
    });
    const QString models = dir.filePath("models");
    QVERIFY(QDir().mkpath(models));
    QVERIFY(QFile::link(QString::fromStdString(pipeline::embedded_model_dir().string()), models + "/nanscope-tiny"));
    const io::RgbImage pixels{2, 2, std::vector<std::uint8_t>(12, 200)};
    const QString png = dir.filePath("from-a1111.png");
    io::write_png(png.toStdString(), pixels,
                  {{"parameters",
                    "a red circle <lora:glow:0.7>\nNegative prompt: blue\nSteps: 2, Sampler: Euler a, CFG scale: 5, "
                    "Seed: 42, Size: 32x32, Model: nanscope-tiny, RNG: CPU, Hires upscale: 2, Hires steps: 4"}});
    QSettings("NaNscope", qEnvironmentVariable("NANSCOPE_GUI_SETTINGS_SCOPE", "nanscope-test"))
        .remove("reproduce/models_dir");

    auto w = make_window();
    QVERIFY(w->open_file(png));
    auto* dialog = w->findChild<ReproduceDialog*>("reproduceDialog");
    QVERIFY(dialog);
    QVERIFY(dialog->isVisible());
    QVERIFY(!dialog->can_apply());  // no folder yet
    QSignalSpy planned(dialog, &ReproduceDialog::planned);
    dialog->set_models_dir(models);  // searched on the dialog's worker thread
    QVERIFY(planned.wait(60000));
    QVERIFY2(dialog->can_apply(), qPrintable(dialog->plan_text()));
    const QString text = dialog->plan_text();
    for (const char* want : {"--set sampler=euler_a", "nanscope-tiny (by file name)", "LoRA 'glow' not found in",
                             "--set hires.scale=2", "--set hires.steps=4"})
      QVERIFY2(text.contains(want), qPrintable(want + QString(" not in:\n") + text));
    QCoreApplication::processEvents();
    const QString shot = screenshot_path("reproduce-dialog.png");
    QVERIFY(dialog->grab().save(shot));
    qInfo("screenshot: %s", qPrintable(shot));

    QVERIFY(dialog->apply());
    QCoreApplication::processEvents();
    const RunConfig c = w->current_config();
    QCOMPARE(QString::fromStdString(c.prompt), QString("a red circle "));  // A1111 removes the tag alone
    QCOMPARE(c.hires_scale, 2.0);
    QCOMPARE(c.hires_steps, 4);
    QCOMPARE(QString::fromStdString(c.negative_prompt), QString("blue"));
    QCOMPARE(c.steps, 2);
    QCOMPARE(c.seed, std::uint64_t{42});
    QCOMPARE(c.width, 32);
    QCOMPARE(c.sampler, SamplerId::euler_a);
    QCOMPARE(c.noise, NoiseKind::torch_cpu);
    QVERIFY2(QString::fromStdString(c.model).endsWith("nanscope-tiny"), c.model.c_str());
    QCOMPARE(QSettings("NaNscope", qEnvironmentVariable("NANSCOPE_GUI_SETTINGS_SCOPE", "nanscope-test"))
                 .value("reproduce/models_dir")
                 .toString(),
             models);
    QSignalSpy done(w.get(), &MainWindow::runCompleted);
    auto* run = w->findChild<QToolButton*>("runButton");
    QVERIFY(run && run->isEnabled());
    QTest::mouseClick(run, Qt::LeftButton);
    QVERIFY(done.wait(300000));
    const RunFinished f = done.front().front().value<RunFinished>();
    QVERIFY2(f.ok, qPrintable(f.error));
    const ImageView* img = w->result_panel()->current();
    QVERIFY(img);
    QCOMPARE(img->image.image.width, 64);  // 32x32, then the hires fix's second pass at 2x

    // The folder is remembered: the next foreign image has its plan at once.
    QVERIFY(w->open_file(png));
    auto dialogs = w->findChildren<ReproduceDialog*>("reproduceDialog");
    QVERIFY(!dialogs.isEmpty());
    QTRY_VERIFY_WITH_TIMEOUT(!dialogs.back()->searching(), 60000);
    QVERIFY(dialogs.back()->can_apply());
    dialogs.back()->reject();

    // A ComfyUI graph with a cycle: refused, naming the node and input.
    const QString cyclic = dir.filePath("cycle.png");
    io::write_png(cyclic.toStdString(), pixels,
                  {{"prompt", R"({"1": {"class_type": "LoraLoader", "inputs": {"model": ["2", 0]}},
                                  "2": {"class_type": "LoraLoader", "inputs": {"model": ["1", 0]}}})"}});
    QVERIFY(!w->open_file(cyclic));
  }

  // The reproduce dialog hashes the models folder on a worker thread: the
  // window keeps handling events, the status counts the files ("Hashing 3 of
  // 40 files"), Stop cancels within a file, and the hashes finished before
  // the stop are cached. 40 sparse 48 MiB files (no disk, nothing written) whose
  // hashes match nothing: hashing them all takes seconds, a stopped search
  // hashes a few.
  void reproduce_dialog_hashes_on_a_worker_with_progress_and_stop() {
    QTemporaryDir dir;
    const QByteArray old_cache = qgetenv("XDG_CACHE_HOME");
    const bool had_cache = qEnvironmentVariableIsSet("XDG_CACHE_HOME");
    qputenv("XDG_CACHE_HOME", dir.filePath("cache").toUtf8());
    const std::shared_ptr<void> restore(nullptr, [&](void*) {
      if (had_cache) {
        qputenv("XDG_CACHE_HOME", old_cache);
      } else {
        qunsetenv("XDG_CACHE_HOME");
      }
    });
    const QString models = dir.filePath("models");
    QVERIFY(QDir().mkpath(models + "/Stable-diffusion"));
    constexpr int kFiles = 40;
    for (int i = 0; i < kFiles; ++i) {
      QFile f(models + QString("/Stable-diffusion/model-%1.safetensors").arg(i, 2, 10, QChar('0')));
      QVERIFY(f.open(QIODevice::WriteOnly));
      QVERIFY(f.resize(48ll << 20));
    }
    const auto generation = foreign_from_a1111(
        "a lighthouse\nSteps: 2, Sampler: Euler a, CFG scale: 5, Seed: 1, Size: 32x32, Model hash: 0123456789, "
        "Model: not-in-the-folder");
    ReproduceDialog dialog(generation, "lighthouse.png", {});
    dialog.show();
    QSignalSpy progress(&dialog, &ReproduceDialog::searchProgress);
    QSignalSpy planned(&dialog, &ReproduceDialog::planned);
    QElapsedTimer t;
    t.start();
    dialog.set_models_dir(models);
    const qint64 returned_ms = t.elapsed();
    QVERIFY(dialog.searching());  // set_models_dir returned while the worker hashes
    QVERIFY(!dialog.can_apply());
    // The GUI thread keeps running its event loop: a timer fires while the worker hashes.
    bool timer_fired = false;
    QTimer::singleShot(0, &dialog, [&] { timer_fired = true; });
    QTRY_VERIFY_WITH_TIMEOUT(progress.count() >= 3, 60000);
    QVERIFY(timer_fired);
    QCOMPARE(progress.at(2).at(1).toInt(), kFiles);
    QVERIFY(dialog.searching());
    const QString status = dialog.findChild<QLabel*>("reproduceStatus")->text();
    QVERIFY2(QRegularExpression(QString("^Hashing \\d+ of %1 files: model-\\d\\d\\.safetensors$").arg(kFiles))
                 .match(status)
                 .hasMatch(),
             qPrintable(status));
    QCoreApplication::processEvents();
    const QString shot = screenshot_path("reproduce-hashing.png");
    QVERIFY(dialog.grab().save(shot));
    qInfo("screenshot: %s (set_models_dir returned after %lld ms)", qPrintable(shot), returned_ms);

    QTest::mouseClick(dialog.stop_button(), Qt::LeftButton);
    QVERIFY(planned.wait(10000));
    QVERIFY(!dialog.searching());
    QVERIFY(!dialog.plan());
    QVERIFY(!dialog.can_apply());
    const QString stopped = dialog.findChild<QLabel*>("reproduceStatus")->text();
    QVERIFY2(stopped.startsWith("Search stopped after"), qPrintable(stopped));
    const int looked_up = progress.back().at(0).toInt();
    QVERIFY2(looked_up < kFiles, qPrintable(QString::number(looked_up)));
    // The hashes finished before the stop are in the cache.
    io::FileHashCache cache(io::FileHashCache::default_path());
    const auto first = std::filesystem::path(models.toStdString()) / "Stable-diffusion" / "model-00.safetensors";
    (void)cache.get(first);
    QCOMPARE(cache.hashed(), 0);

    // Closing the dialog while it hashes stops the worker at once.
    auto* again = new ReproduceDialog(generation, "lighthouse.png", models);
    QVERIFY(again->searching());
    t.restart();
    delete again;
    QVERIFY2(t.elapsed() < 5000, qPrintable(QString::number(t.elapsed())));
  }

  void screenshots_have_the_right_size() {
    auto w = make_window();
    w->resize(1280, 800);
    QCoreApplication::processEvents();
    const QImage full = w->screenshot();
    QVERIFY(!full.isNull());
    const qreal dpr = w->devicePixelRatioF();
    QCOMPARE(full.size(), w->size() * dpr);
    // Not a blank image: more than a handful of distinct colours.
    QSet<QRgb> colours;
    for (int y = 0; y < full.height(); y += 7)
      for (int x = 0; x < full.width(); x += 7) colours.insert(full.pixel(x, y));
    QVERIFY(colours.size() > 10);
    for (const QString& name : w->panel_names()) {
      const QImage panel = w->screenshot(name);
      QWidget* widget =
          name == "inspector" ? static_cast<QWidget*>(w->inspector()) : w->findChild<QDockWidget*>(name + "Dock");
      QVERIFY(widget);
      if (!widget->isVisible()) continue;  // tabbed behind another dock
      QCOMPARE(panel.size(), widget->size() * dpr);
    }
    QTemporaryDir dir;
    QVERIFY(full.save(dir.filePath("shot.png")));
    QVERIFY(QFileInfo(dir.filePath("shot.png")).size() > 1000);
  }
};

QTEST_MAIN(GuiTest)
#include "test_gui.moc"
