// Workbench tests: the real window, driven through its controls, on Qt's
// offscreen platform (QT_QPA_PLATFORM=offscreen). The run tests need the
// embedded model (or NANSCOPE_MODEL_DIR) and skip with a note without it.
// This file: runs, cancels, scenarios, probes, studies; test_gui_panels.cpp: the panels and dialogs.

#include <QFontMetricsF>
#include <QtCharts/QChartView>
#include <QtCharts/QValueAxis>

#include "gui_test_support.hpp"

using namespace nanscope;
using namespace nanscope::gui;
using namespace nanscope::gui::workbench_test;

class GuiTest : public QObject {
  Q_OBJECT

 private:
  bool have_model_ = false;
  QString model_note_;

 private slots:
  void initTestCase() { have_model_ = start_clean(model_note_); }

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
    {
      // The inspector's charts in a 1400x900 window: whole (each view at least its chart's minimum, no view over
      // another: squeezed, the lower row hid the upper one's step labels) and their linear y axes with no more
      // labels than fit (Qt draws the ones that do not as "...").
      const auto views = w->inspector()->findChildren<QtCharts::QChartView*>();
      QCOMPARE(views.size(), 4);
      for (auto* v : views) {
        QVERIFY2(v->height() >= std::max<qreal>(v->minimumHeight(), v->chart()->minimumSize().height()),
                 qPrintable(v->chart()->title()));
        for (auto* u : views) {
          if (u != v)
            QVERIFY(!QRect(u->mapTo(w.get(), QPoint()), u->size())
                         .intersects(QRect(v->mapTo(w.get(), QPoint()), v->size())));
        }
        for (auto* axis : v->chart()->axes(Qt::Vertical)) {
          if (auto* linear = qobject_cast<QtCharts::QValueAxis*>(axis)) {
            const qreal line = QFontMetricsF(linear->labelsFont()).height();
            QVERIFY2(v->chart()->plotArea().height() / (linear->tickCount() - 1) >= line,
                     qPrintable(v->chart()->title()));
          }
        }
      }
    }
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
};

QTEST_MAIN(GuiTest)
#include "test_gui.moc"
