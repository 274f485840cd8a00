#pragma once
// EngineController: owns the engine Session on its own QThread. Requests come
// in as queued slot calls; progress leaves as queued signals carrying value
// types (engine_types.hpp). The GUI never sees a tensor or an OpenCL object.
//
// Cancel is an atomic flag the engine checks between steps and components
// (RunObserver::cancelled()), so it takes effect within one step.

#include <QObject>
#include <QThread>
#include <atomic>
#include <memory>
#include <optional>

#include "engine_types.hpp"

namespace nanscope::pipeline {
class Session;
}

namespace nanscope::gui {

class EngineController : public QObject {
  Q_OBJECT
 public:
  EngineController();
  ~EngineController() override;

  // Thread-safe: asks the running request to stop at the next step.
  void cancel() { cancel_.store(true); }
  bool cancel_requested() const { return cancel_.load(); }

 public slots:
  // Enumerates devices (creating the Session on first use) and emits devicesReady.
  void listDevices();
  // Runs txt2img for the config; emits status/step/image and finally runFinished.
  void run(const nanscope::RunConfig& config);
  // Decodes the last kept latent of batch image `index` again with another VAE
  // folder ("" = the model's own) and dtype (f32/f16/bf16), without re-sampling.
  void redecode(int index, const QString& vae, const QString& dtype);
  // Runs a field-report scenario (R0-R4) the way the engine defines it (R1's
  // stress variant of the model, R4's cold kernel cache), with the user's
  // edits to the preset applied as key=value assignments.
  void runScenario(const QString& id, bool fixed, const QStringList& sets);
  // A/B: the config as side A, the config with `b_sets` applied as side B.
  void runAb(const nanscope::RunConfig& a, const QStringList& b_sets);

 signals:
  void devicesReady(const nanscope::DeviceList& devices, const QString& default_model, const QString& model_error);
  void status(const QString& message);
  void step(const nanscope::gui::StepView& step);
  void image(const nanscope::gui::ImageView& image);
  void kernels(const nanscope::gui::KernelStats& stats);
  // A kernel program started (finished=false) or finished loading or compiling (report R4).
  void kernelBuild(const QString& program, const QString& options, bool finished, bool cache_hit, double ms);
  void runStarted(const nanscope::RunConfig& config);
  void runFinished(const nanscope::gui::RunFinished& result);
  void abFinished(const nanscope::gui::AbView& result);

 private:
  pipeline::Session& session();
  void emit_kernel_stats(const std::string& pin);
  // Backend options whose build listener re-emits kernelBuild.
  BackendOptions backend_options();

  std::unique_ptr<pipeline::Session> session_;
  std::atomic<bool> cancel_{false};
  std::optional<RunConfig> last_config_;
  std::vector<pipeline::GeneratedImage> last_images_;
};

// Owns the worker thread and its controller; destroying it cancels any run,
// waits for the engine to stop, and deletes the Session on its own thread.
class EngineThread {
 public:
  EngineThread();
  ~EngineThread();
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  EngineController* controller() const { return controller_; }
  void shutdown();

 private:
  QThread thread_;
  EngineController* controller_;
};

}  // namespace nanscope::gui
