#pragma once
// EngineController: owns the engine Session on its own QThread. Requests come
// in as queued slot calls; progress leaves as queued signals carrying value
// types (engine_types.hpp). The GUI never sees a tensor or an OpenCL object.
//
// Cancel takes effect within one step: the engine asks between steps and
// components (RunObserver::cancelled()). Requests carry ids: the GUI thread
// counts the requests it queues (note_request(), before emitting one), the
// worker counts those it starts (requests run in the order they were queued,
// so both counts name the same request), and cancel() cancels every request
// queued so far, started or not: a Cancel pressed before a queued run began
// is not lost, and cannot cancel a run requested after it.

#include <QObject>
#include <QThread>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "engine_types.hpp"
#include "probe_types.hpp"

namespace nanscope::pipeline {
class Session;
}

namespace nanscope::gui {

enum class CacheAction : int { list = 0, verify = 1, verify_remove = 2, clear = 3 };

class EngineController : public QObject {
  Q_OBJECT
 public:
  EngineController();
  ~EngineController() override;

  // GUI thread, just before queueing a run, decode, scenario or A/B request.
  void note_request() { queued_.fetch_add(1); }
  // Thread-safe: cancels every request queued so far (the running one stops at the next step).
  void cancel() { cancel_upto_.store(queued_.load()); }
  // True when the request the worker is running (or last ran) was cancelled.
  bool cancel_requested() const { return current_.load() <= cancel_upto_.load(); }

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
  // The kernel cache (report R4): list, verify (remove: delete corrupt
  // entries) or clear, for one device id ("" = all); emits kernelCacheReady.
  // action: a CacheAction (engine_controller.hpp), as int for the queued call.
  void kernelCache(int action, const QString& device_id);
  // The device probe of the config's model at its size, device and precision
  // against the reference device (studies/device_probe.hpp): probeProgress
  // per op, then probeFinished. Cancel stops it between ops.
  void probeDevice(const nanscope::RunConfig& config);
  // The f16-safety probe (pipeline/f16_safety.hpp); emits f16SafetyFinished.
  void checkF16Safety(const nanscope::RunConfig& config);

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
  void kernelCacheReady(const nanscope::gui::KernelCacheView& view);
  // While a run waits on the compiler: "building 7 of 12 programs, about 9 s left"
  // (and the plan itself before the first build: "12 programs to build, about 14 s"); "" when done.
  void kernelProgress(const QString& text);
  void probeProgress(int done, int total, const QString& last);
  void probeFinished(const nanscope::gui::ProbeResult& result);
  void f16SafetyFinished(const nanscope::gui::F16Result& result);

 private:
  pipeline::Session& session();
  void emit_kernel_stats(const std::string& pin);
  // Backend options whose build listener re-emits kernelBuild.
  BackendOptions backend_options();

  std::unique_ptr<pipeline::Session> session_;
  // Worker thread, first thing in every request slot: the request's id.
  void begin_request() { current_.store(started_.fetch_add(1) + 1); }

  std::atomic<std::uint64_t> queued_{0}, started_{0}, current_{0}, cancel_upto_{0};
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
