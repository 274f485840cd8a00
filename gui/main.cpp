// nanscope: the workbench. With no arguments it opens on the embedded model,
// ready to press Run. Scripted documentation runs:
//   nanscope --preset FILE|--scenario R1 [--fixed] --run --screenshot OUT.png [--panel NAME]
//   nanscope [--preset FILE] --run --probe device|f16-safety --screenshot OUT.png
// wait for the run (or the probe), save the screenshot and exit 0 (non-zero on failure).

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <QTimer>
#include <cstdio>
#include <memory>
#include <string_view>

#include "core/version.hpp"
#include "engine_types.hpp"
#include "main_window.hpp"
#include "probe_dialog.hpp"

using nanscope::gui::MainWindow;

namespace {

// --help and --version answer without a display (help2man runs them at build
// time; `nanscope --version` works over ssh): no QApplication for them.
bool only_help_or_version(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "-h" || a == "--help" || a == "--help-all" || a == "-?" || a == "-v" || a == "--version") return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<QCoreApplication> app_holder;
  if (only_help_or_version(argc, argv)) {
    app_holder = std::make_unique<QCoreApplication>(argc, argv);
  } else {
    app_holder = std::make_unique<QApplication>(argc, argv);
  }
  QCoreApplication::setApplicationName("NaNscope");
  QCoreApplication::setOrganizationName("NaNscope");
  QCoreApplication::setApplicationVersion(QString::fromStdString(std::string(nanscope::version())));

  QCommandLineParser cli;
  cli.setApplicationDescription("NaNscope: a workbench for the numerics of diffusion image generation.");
  cli.addHelpOption();
  // Not addVersionOption(): it prints the settings name "NaNscope", not the
  // program's name and commit as nanscope-cli does.
  QCommandLineOption version_option({"v", "version"}, "Displays version information (and the git commit).");
  cli.addOption(version_option);
  QCommandLineOption preset("preset", "Open a preset JSON file (or a NaNscope PNG).", "FILE");
  QCommandLineOption scenario("scenario", "Open a built-in scenario preset (R0 to R4).", "NAME");
  QCommandLineOption fixed("fixed", "With --scenario: open the scenario's fixed twin.");
  QCommandLineOption run("run", "Start a run as soon as the window is ready.");
  QCommandLineOption screenshot("screenshot", "After the run, save a screenshot to FILE and exit.", "FILE");
  QCommandLineOption panel("panel", "With --screenshot: capture only this panel.", "NAME");
  QCommandLineOption ab("ab",
                        "With --run: compare the settings (A) with them changed by CHANGES (B), e.g. "
                        "'unet.dtype=f16' or 'device=reference'.",
                        "CHANGES");
  QCommandLineOption probe("probe",
                           "With --run: open the probe window and run the device probe (device) or the f16-safety "
                           "probe (f16-safety) of the settings instead of a run; --screenshot captures that window.",
                           "KIND");
  cli.addOptions({preset, scenario, fixed, run, screenshot, panel, ab, probe});
  cli.addPositionalArgument("file", "A preset or PNG to open (same as --preset).", "[file]");
  cli.process(*app_holder);
  if (cli.isSet(version_option)) {
    std::printf("%s\n", nanscope::version_line("nanscope").c_str());
    return 0;
  }

  QIcon icon(":/icons/nanscope.png");
  icon.addFile(":/icons/nanscope-48.png");
  QApplication::setWindowIcon(icon);
  // The desktop entry (packaging/nanscope.desktop): Wayland and the task bar match windows to it.
  QGuiApplication::setDesktopFileName("nanscope");

  MainWindow window;
  const bool scripted = cli.isSet(screenshot);
  if (scripted) window.set_interactive(false);

  QString open = cli.value(preset);
  if (open.isEmpty() && !cli.positionalArguments().isEmpty()) open = cli.positionalArguments().front();
  if (cli.isSet(scenario)) {
    if (!window.open_scenario(cli.value(scenario), cli.isSet(fixed))) {
      std::fprintf(stderr, "nanscope: cannot open scenario '%s'; scenarios: %s\n", qPrintable(cli.value(scenario)),
                   qPrintable(MainWindow::scenario_ids().join(", ")));
      return 2;
    }
  } else if (!open.isEmpty() && !window.open_file(open)) {
    return 2;
  }
  if (scripted && !cli.value(panel).isEmpty() && cli.value(panel) != "window" &&
      !window.panel_names().contains(cli.value(panel))) {
    std::fprintf(stderr, "nanscope: no panel '%s'; panels: %s\n", qPrintable(cli.value(panel)),
                 qPrintable(window.panel_names().join(", ")));
    return 2;
  }
  window.show();

  int exit_code = 0;
  const bool failure_expected = cli.isSet(scenario) && !cli.isSet(fixed);
  const QString out = cli.value(screenshot);
  const QString panel_name = cli.value(panel);
  auto save_and_quit = [&window, &exit_code, out, panel_name] {
    // Let the charts and docks paint their last state before grabbing.
    QTimer::singleShot(300, &window, [&window, &exit_code, out, panel_name] {
      const QImage img = window.screenshot(panel_name);
      if (img.isNull() || !img.save(out, "PNG")) {
        std::fprintf(stderr, "nanscope: could not write the screenshot %s\n", qPrintable(out));
        exit_code = 1;
      } else {
        std::printf("%s  %dx%d\n", qPrintable(out), img.width(), img.height());
      }
      window.close();
    });
  };
  if (cli.isSet(run) && cli.isSet(probe)) {
    const QString kind = cli.value(probe);
    if (kind != "device" && kind != "f16-safety") {
      std::fprintf(stderr, "nanscope: --probe takes device or f16-safety, not '%s'\n", qPrintable(kind));
      return 2;
    }
    QObject::connect(&window, &MainWindow::devicesListed, &window, [&, kind, scripted, started = false]() mutable {
      if (started) return;
      started = true;
      if (!window.open_probe(kind == "f16-safety")) {
        exit_code = 1;
        if (scripted) window.close();
        return;
      }
      QObject::connect(window.probe_dialog(), &nanscope::gui::ProbeDialog::finishedProbe, &window,
                       [&, scripted](bool ok) {
                         if (!ok) exit_code = 1;
                         if (!scripted) return;
                         QTimer::singleShot(300, &window, [&] {
                           const QImage img = window.probe_dialog()->grab().toImage();
                           if (img.isNull() || !img.save(out, "PNG")) {
                             std::fprintf(stderr, "nanscope: could not write the screenshot %s\n", qPrintable(out));
                             exit_code = 1;
                           } else {
                             std::printf("%s  %dx%d\n", qPrintable(out), img.width(), img.height());
                           }
                           window.close();
                         });
                       });
    });
  } else if (cli.isSet(run)) {
    QObject::connect(&window, &MainWindow::runCompleted, &window,
                     [&, scripted, failure_expected](const nanscope::gui::RunFinished& f) {
                       if (!f.ok) {
                         std::fprintf(stderr, "nanscope: the run failed: %s\n", qPrintable(f.error));
                         // A broken scenario (R3: the pinned device is missing) is meant to fail.
                         if (!failure_expected) exit_code = 1;
                       }
                       if (scripted) save_and_quit();
                     });
    // Start once the device list is in, so the status bar names the device.
    QObject::connect(&window, &MainWindow::devicesListed, &window, [&, started = false]() mutable {
      if (started) return;
      started = true;
      const bool ok =
          cli.isSet(ab) ? window.start_ab(cli.value(ab).split(';', Qt::SkipEmptyParts)) : window.start_run();
      if (!ok) {
        exit_code = 1;
        if (scripted) window.close();
      }
    });
  } else if (scripted) {
    QObject::connect(&window, &MainWindow::devicesListed, &window, save_and_quit);
  }
  const int rc = QApplication::exec();
  return exit_code != 0 ? exit_code : rc;
}
