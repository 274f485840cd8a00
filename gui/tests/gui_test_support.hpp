#pragma once
// What the workbench tests share (test_gui.cpp, test_gui_panels.cpp): the includes, a window made as
// the tests drive it, a prompt typed and Run pressed, a scenario run, where screenshots go.

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

namespace nanscope::gui::workbench_test {

inline std::unique_ptr<MainWindow> make_window() {
  auto w = std::make_unique<MainWindow>();
  w->set_interactive(false);
  w->resize(1400, 900);
  w->show();
  QSignalSpy listed(w.get(), &MainWindow::devicesListed);
  if (listed.isEmpty()) listed.wait(60000);
  return w;
}

// Types a prompt and a step count into the controls and presses Run.
inline void press_run(MainWindow& w, int steps, const QString& prompt) {
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

// Runs an opened scenario to the end; the image view of the first image.
inline const ImageView* run_scenario(MainWindow& w, const QString& id, bool fixed) {
  if (!w.open_scenario(id, fixed)) return nullptr;
  QSignalSpy done(&w, &MainWindow::runCompleted);
  if (!w.start_run() || !done.wait(300000)) return nullptr;
  return w.result_panel()->current();
}

// Where a test's screenshots go: $NANSCOPE_TEST_SCREENSHOTS, else screenshots/ in the working directory.
inline QString screenshot_path(const QString& name) {
  const QString dir = qEnvironmentVariable("NANSCOPE_TEST_SCREENSHOTS", QDir::current().filePath("screenshots"));
  QDir().mkpath(dir);
  return QDir(dir).filePath(name);
}

// What each test class's initTestCase does: a clean settings scope; whether the embedded model is there (`note`
// says why not).
inline bool start_clean(QString& note) {
  QSettings("NaNscope", qEnvironmentVariable("NANSCOPE_GUI_SETTINGS_SCOPE", "nanscope-test")).clear();
  try {
    pipeline::embedded_model_dir();
    return true;
  } catch (const std::exception& e) {
    note = QString::fromUtf8(e.what());
    return false;
  }
}

// XDG_CACHE_HOME pointed at `dir` for a test's scope (the hash cache stays in its folder), restored after it for
// the tests that follow.
class ScopedCacheHome {
 public:
  explicit ScopedCacheHome(const QString& dir)
      : old_(qgetenv("XDG_CACHE_HOME")), had_(qEnvironmentVariableIsSet("XDG_CACHE_HOME")) {
    qputenv("XDG_CACHE_HOME", dir.toUtf8());
  }
  ~ScopedCacheHome() {
    if (had_) {
      qputenv("XDG_CACHE_HOME", old_);
    } else {
      qunsetenv("XDG_CACHE_HOME");
    }
  }
  ScopedCacheHome(const ScopedCacheHome&) = delete;
  ScopedCacheHome& operator=(const ScopedCacheHome&) = delete;

 private:
  QByteArray old_;
  bool had_;
};

}  // namespace nanscope::gui::workbench_test
