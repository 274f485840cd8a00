// Workbench tests: the real window, driven through its controls, on Qt's
// offscreen platform (QT_QPA_PLATFORM=offscreen). The run tests need the
// embedded model (or NANSCOPE_MODEL_DIR) and skip with a note without it.
// This file: the panels, dialogs, presets and screenshots; test_gui.cpp: runs and studies.

#include "gui_test_support.hpp"

using namespace nanscope;
using namespace nanscope::gui;
using namespace nanscope::gui::workbench_test;

class GuiPanelsTest : public QObject {
  Q_OBJECT

 private:
  bool have_model_ = false;
  QString model_note_;

 private slots:
  void initTestCase() { have_model_ = start_clean(model_note_); }

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
    const ScopedCacheHome cache_home(dir.filePath("cache"));
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
    const ScopedCacheHome cache_home(dir.filePath("cache"));
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

QTEST_MAIN(GuiPanelsTest)
#include "test_gui_panels.moc"
