#include "engine_controller.hpp"

#include <QElapsedTimer>
#include <exception>

#include "backend/opencl/program_cache.hpp"
#include "config/inspect_settings.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "inspect/fault_emulation.hpp"
#include "pipeline/memory_plan.hpp"
#include "pipeline/sd_model.hpp"
#include "pipeline/session.hpp"
#include "studies/ab.hpp"
#include "studies/scenario.hpp"

namespace nanscope::gui {

namespace {

// Forwards the engine's callbacks as the controller's signals (called on the engine thread).
class Forwarder final : public pipeline::RunObserver {
 public:
  Forwarder(EngineController& c, std::vector<pipeline::GeneratedImage>& keep) : c_(c), keep_(keep) {}
  void on_status(std::string_view message) override {
    emit c_.status(QString::fromUtf8(message.data(), static_cast<int>(message.size())));
  }
  void on_step(const pipeline::StepReport& s) override { emit c_.step(make_step_view(s)); }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& report) override {
    ImageView view;
    view.image = img;
    view.report = report;
    view.qimage = to_qimage(img.image);
    keep_.push_back(img);
    ++images;
    emit c_.image(view);
  }
  bool cancelled() const override { return c_.cancel_requested(); }
  int images = 0;

 private:
  EngineController& c_;
  std::vector<pipeline::GeneratedImage>& keep_;
};

}  // namespace

EngineController::EngineController() = default;
EngineController::~EngineController() = default;

pipeline::Session& EngineController::session() {
  if (!session_) session_ = std::make_unique<pipeline::Session>(backend_options());
  return *session_;
}

BackendOptions EngineController::backend_options() {
  BackendOptions o = backend_options_from_environment();
  o.on_kernel_build = [this](const KernelBuildEvent& e) {
    if (e.plan) {  // the cold-start plan, before the first build (report R4)
      emit kernelProgress(
          tr("%1 programs to build, about %2 s").arg(e.plan_count).arg(e.plan_left_ms / 1000.0, 0, 'f', 1));
      return;
    }
    emit kernelBuild(QString::fromStdString(e.program), QString::fromStdString(e.options), e.finished, e.cache_hit,
                     e.ms);
    if (e.plan_count > 0) {
      // The last planned build finished: nothing left to wait for.
      const bool done = e.finished && e.plan_index == e.plan_count;
      emit kernelProgress(done ? QString() : QString::fromStdString(e.progress()));
    }
  };
  return o;
}

void EngineController::listDevices() {
  QString model, model_error;
  try {
    model = QString::fromStdString(pipeline::embedded_model_dir().string());
  } catch (const std::exception& e) {
    model_error = QString::fromUtf8(e.what());
  }
  emit devicesReady(session().devices(), model, model_error);
}

void EngineController::emit_kernel_stats(const std::string& pin) {
  KernelStats stats;
  try {
    const Backend& be = session().backend(pin);
    if (be.device().kind == DeviceKind::reference) {
      emit kernels(stats);
      return;
    }
    stats.opencl = true;
    stats.cache_dir = QString::fromStdString(be.kernel_cache_dir());
    for (const auto& r : be.kernel_builds()) {
      if (r.failed) {
        ++stats.failed;
      } else if (r.cache_hit) {
        ++stats.loaded;
        stats.load_ms += r.ms;
      } else {
        ++stats.built;
        stats.build_ms += r.ms;
      }
    }
  } catch (const std::exception&) {
    return;  // the device failed to open: the run's error already says why
  }
  emit kernels(stats);
}

void EngineController::kernelCache(int action, const QString& device_id) {
  KernelCacheView view;
  view.device = device_id;
  try {
    const DeviceList& list = session().devices();
    const DeviceInfo* device = nullptr;
    for (const auto& d : list.devices) {
      if (d.kind == DeviceKind::reference) continue;  // plain C++: nothing cached
      view.device_ids << QString::fromStdString(d.id);
      view.device_labels << QString("%1: %2").arg(d.index).arg(QString::fromStdString(d.name));
      if (QString::fromStdString(d.id) == device_id) device = &d;
    }
    if (!device_id.isEmpty() && !device) throw std::runtime_error("no OpenCL device " + device_id.toStdString());
    const BackendOptions o = backend_options();
    const std::string dir = o.kernel_cache_dir.empty() ? opencl::ProgramCache::default_dir() : o.kernel_cache_dir;
    view.dir = QString::fromStdString(dir);
    const QString whose = device ? tr(" for %1").arg(QString::fromStdString(device->name)) : QString();
    switch (static_cast<CacheAction>(action)) {
      case CacheAction::list: break;
      case CacheAction::verify:
      case CacheAction::verify_remove: {
        const bool remove = static_cast<CacheAction>(action) == CacheAction::verify_remove;
        view.entries = opencl::verify_kernel_cache(dir, device, remove);
        view.verified = true;
        int bad = 0;
        for (const auto& e : view.entries) bad += e.problem.empty() ? 0 : 1;
        view.message = tr("Checked %1 entries%2: %3 corrupt%4.")
                           .arg(view.entries.size())
                           .arg(whose)
                           .arg(bad)
                           .arg(bad && remove ? tr(", removed (runs rebuild them)") : QString());
        if (remove) {
          std::erase_if(view.entries, [](const opencl::CacheEntryInfo& e) { return !e.problem.empty(); });
        }
        break;
      }
      case CacheAction::clear: {
        const std::size_t n = opencl::clear_kernel_cache(dir, device);
        view.message = tr("Removed %1 entries%2.").arg(n).arg(whose);
        break;
      }
    }
    if (!view.verified) {
      for (auto& e : opencl::list_kernel_cache(dir)) {
        if (!device || opencl::entry_is_for(e, *device)) view.entries.push_back(std::move(e));
      }
    }
  } catch (const std::exception& e) {
    view.error = QString::fromUtf8(e.what());
    log::error("kernel cache: {}", e.what());
  }
  emit kernelCacheReady(view);
}

void EngineController::run(const nanscope::RunConfig& config) {
  begin_request();
  QElapsedTimer timer;
  timer.start();
  RunFinished done;
  emit runStarted(config);
  last_images_.clear();
  last_config_ = config;
  Forwarder forwarder(*this, last_images_);
  try {
    const auto faults = inspect::make_fault_emulator(inspect_settings(config.inspect));
    session().generate(config, &forwarder, faults.get());
  } catch (const pipeline::MemoryPlanError& e) {
    done.ok = false;
    done.error = QString::fromUtf8(e.what());
    for (const auto& s : e.fix()) done.fix << QString::fromStdString(s);
    log::error("run failed: {}", e.what());
  } catch (const std::exception& e) {
    done.ok = false;
    done.error = QString::fromUtf8(e.what());
    log::error("run failed: {}", e.what());
  }
  emit_kernel_stats(config.device);
  done.cancelled = cancel_requested();
  done.seconds = static_cast<double>(timer.elapsed()) / 1000.0;
  done.images = forwarder.images;
  emit runFinished(done);
}

void EngineController::redecode(int index, const QString& vae, const QString& dtype) {
  begin_request();
  QElapsedTimer timer;
  timer.start();
  RunFinished done;
  try {
    if (!last_config_ || index < 0 || index >= static_cast<int>(last_images_.size()))
      throw std::runtime_error("there is no kept latent to decode: run first");
    const auto& kept = last_images_[static_cast<std::size_t>(index)];
    if (kept.latent.empty()) throw std::runtime_error("the run kept no latent for this image");
    const auto dt = parse_dtype(dtype.toStdString());
    if (!dt) throw std::runtime_error("unknown dtype " + dtype.toStdString());
    emit runStarted(*last_config_);
    emit status(tr("decoding the kept latent again"));
    pipeline::DecodeAttempt attempt;
    std::filesystem::path vae_path = vae.toStdString();
    if (vae_path.empty()) vae_path = session().model(kept.config).vae_folder();
    const auto faults = inspect::make_fault_emulator(inspect_settings(kept.config.inspect));
    pipeline::GeneratedImage out =
        session().redecode(kept.config, kept, vae_path, *dt, &attempt, nullptr, faults.get());
    // The image's config records what decoded it, so a saved PNG reproduces it.
    if (!vae.isEmpty()) out.config.vae = vae_path.string();
    out.config.component(Component::vae).precision.dtype = *dt;
    ImageView view;
    view.image = out;
    view.report.image = index;
    view.report.decodes.push_back(attempt);
    view.report.decode_seconds = attempt.seconds;
    view.report.outcome = attempt.nonfinite == 0
                              ? "decoded the kept latent again in " + std::string(dtype_name(*dt)) + ": clean"
                              : "decoded the kept latent again in " + std::string(dtype_name(*dt)) + ": " +
                                    std::to_string(attempt.nonfinite) + " non-finite values";
    view.qimage = to_qimage(out.image);
    last_images_[static_cast<std::size_t>(index)] = out;
    done.images = 1;
    emit image(view);
  } catch (const std::exception& e) {
    done.ok = false;
    done.error = QString::fromUtf8(e.what());
    log::error("decode failed: {}", e.what());
  }
  done.seconds = static_cast<double>(timer.elapsed()) / 1000.0;
  emit runFinished(done);
}

void EngineController::runScenario(const QString& id, bool fixed, const QStringList& sets) {
  begin_request();
  QElapsedTimer timer;
  timer.start();
  RunFinished done;
  last_images_.clear();
  Forwarder forwarder(*this, last_images_);
  try {
    const studies::Scenario* scenario = studies::find_scenario(id.toStdString());
    if (!scenario) throw std::runtime_error("no scenario " + id.toStdString());
    studies::ScenarioOptions options;
    options.backend = backend_options();
    for (const QString& s : sets) options.sets.push_back(s.toStdString());
    options.observer = &forwarder;
    emit status(tr("running scenario %1%2").arg(id, fixed ? tr(" (fixed)") : QString()));
    const studies::ScenarioRun run = studies::run_scenario(*scenario, fixed, options);
    last_config_ = run.run.config;
    if (!run.note.empty()) log::info("{}: {}", scenario->id, run.note);
    if (!run.run.error.empty()) {
      done.ok = false;
      done.error = QString::fromStdString(run.run.error);  // names every device there is (R3)
    }
    done.summary = QString::fromStdString(run.run.summary);
    done.note = QString::fromStdString(run.note);
    done.verdict = QString::fromStdString(std::string(inspect::verdict_name(run.run.verdict)));
  } catch (const std::exception& e) {
    done.ok = false;
    done.error = QString::fromUtf8(e.what());
    log::error("scenario {} failed: {}", id.toStdString(), e.what());
  }
  done.cancelled = cancel_requested();
  done.seconds = static_cast<double>(timer.elapsed()) / 1000.0;
  done.images = forwarder.images;
  emit runFinished(done);
}

namespace {
// A/B runs report only their status and honour Cancel; the inspector keeps the last normal run.
class AbObserver final : public pipeline::RunObserver {
 public:
  explicit AbObserver(EngineController& c) : c_(c) {}
  void on_status(std::string_view m) override {
    emit c_.status(QObject::tr("A/B: %1").arg(QString::fromUtf8(m.data(), static_cast<int>(m.size()))));
  }
  bool cancelled() const override { return c_.cancel_requested(); }

 private:
  EngineController& c_;
};

QString side_summary(const studies::InspectedRun& r) {
  if (!r.error.empty()) return QString::fromStdString(r.error);
  return QString::fromStdString(
      std::string(inspect::verdict_name(r.verdict)) +
      (r.summary.empty() || r.summary == inspect::verdict_name(r.verdict) ? "" : ": " + r.summary));
}
}  // namespace

void EngineController::runAb(const nanscope::RunConfig& a, const QStringList& b_sets) {
  begin_request();
  QElapsedTimer timer;
  timer.start();
  RunFinished done;
  AbView view;
  emit runStarted(a);
  try {
    RunConfig b = a;
    for (const QString& s : b_sets) b.set(s.toStdString());
    b.validate();
    AbObserver observer(*this);
    const studies::AbResult r = studies::run_ab(a, b, 1e-2, &observer);
    for (const auto& s : r.steps) view.rel_l2.push_back(s.latent_rel_l2);
    view.first_divergent_step = r.first_divergent_step;
    view.threshold = r.threshold;
    view.image_rel_l2 = r.image_rel_l2;
    view.image_max_diff = r.image_max_diff;
    if (!r.a.images.empty()) view.image_a = to_qimage(r.a.images.front().image);
    if (!r.b.images.empty()) view.image_b = to_qimage(r.b.images.front().image);
    view.summary_a = side_summary(r.a);
    view.summary_b = side_summary(r.b);
    log::info("A/B ({}): first divergent step {}, image relative L2 {:.3g}", b_sets.join("; ").toStdString(),
              r.first_divergent_step, r.image_rel_l2);
  } catch (const std::exception& e) {
    view.error = QString::fromUtf8(e.what());
    done.ok = false;
    done.error = view.error;
    log::error("A/B failed: {}", e.what());
  }
  emit abFinished(view);
  done.cancelled = cancel_requested();
  done.seconds = static_cast<double>(timer.elapsed()) / 1000.0;
  emit runFinished(done);
}

namespace {
// The probe's progress as the controller's signals, and the controller's Cancel.
class ProbeForwarder final : public studies::ProbeObserver, public CancelProbe {
 public:
  explicit ProbeForwarder(EngineController& c) : c_(c) {}
  void on_status(std::string_view m) override {
    emit c_.status(QString::fromUtf8(m.data(), static_cast<int>(m.size())));
  }
  void on_row(int done, int total, const studies::ProbeRow& row) override {
    emit c_.probeProgress(done, total,
                          QString::fromStdString(row.op + " " + (row.modules.empty() ? "" : row.modules.front())));
  }
  bool cancelled() const override { return c_.cancel_requested(); }

 private:
  EngineController& c_;
};
}  // namespace

void EngineController::probeDevice(const nanscope::RunConfig& config) {
  begin_request();
  ProbeResult result;
  ProbeForwarder forwarder(*this);
  try {
    studies::ProbeOptions options;
    options.config = config;
    result.report = studies::probe_device(session(), options, &forwarder);
  } catch (const std::exception& e) {
    result.error = QString::fromUtf8(e.what());
    log::error("device probe failed: {}", e.what());
  }
  emit_kernel_stats(config.device);
  emit probeFinished(result);
}

void EngineController::checkF16Safety(const nanscope::RunConfig& config) {
  begin_request();
  F16Result result;
  ProbeForwarder forwarder(*this);
  try {
    emit status(tr("f16 safety: one UNet call and one decode in f32"));
    result.report = pipeline::check_f16_safety(session(), config, &forwarder);
  } catch (const Cancelled&) {
    result.cancelled = true;
  } catch (const std::exception& e) {
    result.error = QString::fromUtf8(e.what());
    log::error("f16 safety probe failed: {}", e.what());
  }
  emit f16SafetyFinished(result);
}

EngineThread::EngineThread() : controller_(new EngineController) {
  thread_.setObjectName("nanscope-engine");
  controller_->moveToThread(&thread_);
  // The controller (and the Session with its OpenCL context) dies on the engine thread.
  QObject::connect(&thread_, &QThread::finished, controller_, &QObject::deleteLater);
  thread_.start();
}

EngineThread::~EngineThread() { shutdown(); }

void EngineThread::shutdown() {
  if (!thread_.isRunning()) return;
  controller_->cancel();
  thread_.quit();
  thread_.wait();
}

}  // namespace nanscope::gui
