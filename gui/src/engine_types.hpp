#pragma once
// The value types that cross from the engine thread to the GUI thread through
// queued signals. Everything here is copied; nothing refers to engine state.

#include <QImage>
#include <QMetaType>
#include <QString>
#include <QVector>

#include "backend/device.hpp"
#include "backend/opencl/cache_inventory.hpp"
#include "config/run_config.hpp"
#include "inspect/inspect.hpp"
#include "pipeline/run_report.hpp"

namespace nanscope::gui {

// One sampling step as the inspector draws it: the engine's report (latent
// values dropped) plus what the engine thread derived from the latent.
// An 8-bit RGB preview from the engine as a QImage (null when empty or short).
QImage to_qimage(const inspect::Preview& preview);

struct StepView {
  pipeline::StepReport report;      // latent_values cleared
  QVector<double> channel_std;      // per latent channel, finite values only
  QVector<double> channel_max_abs;  // per latent channel
  QImage preview;                   // latent -> RGB through linear factors
  QImage decoded;                   // full decode of x0 at this step (inspect.decode_every); null otherwise
  QImage nonfinite_mask;            // latent grid: red where any channel is non-finite
  qint64 nonfinite_pixels = 0;      // latent positions with any non-finite channel
  // From the engine's inspector (pipeline::StepReport::stats).
  inspect::Verdict verdict = inspect::Verdict::clean;
  QString note;           // the latent's verdict in one line
  double band_score = 0;  // largest robust z-score of a latent row or column
};

// A finished (or cancelled/stopped) image.
struct ImageView {
  pipeline::GeneratedImage image;
  pipeline::RunReport report;
  QImage qimage;  // RGB888 copy of image.image (null when there is no image)
};

// Kernel programs the run's device built or loaded (report R4).
struct KernelStats {
  int built = 0, loaded = 0, failed = 0;
  double build_ms = 0, load_ms = 0;
  QString cache_dir;
  bool opencl = false;
};

// The kernel cache's inventory (report R4), after a list, verify or clear
// request (EngineController::kernelCache).
struct KernelCacheView {
  QString dir;
  std::vector<opencl::CacheEntryInfo> entries;  // the device's (or all), verified ones with `problem` set
  QStringList device_ids, device_labels;        // the OpenCL devices, for the dialog's filter
  QString device;                               // the filter the entries answer ("" = all)
  bool verified = false;                        // entries were re-checked (their `problem` is meaningful)
  QString message;                              // what the request did, in one line
  QString error;                                // non-empty when it failed
};

// An A/B comparison: per-step relative L2 of B's latent against A's.
struct AbView {
  QVector<double> rel_l2;         // per step; +inf where only one side is finite
  int first_divergent_step = -1;  // 1-based; -1: none
  double threshold = 0;
  double image_rel_l2 = 0;
  int image_max_diff = 0;
  QImage image_a, image_b;
  QString summary_a, summary_b;  // each side's verdict in one line
  QString error;
};

// The end of a request: how it went, in plain words.
struct RunFinished {
  QString verdict, summary, note;  // scenario runs: the engine's verdict, summary and scenario facts
  bool ok = true;
  bool cancelled = false;
  QString error;       // non-empty when the run threw
  QStringList fix;     // settings that make a refused size fit (pipeline::MemoryPlanError), "key=value"
  double seconds = 0;  // wall time of the whole request
  int images = 0;
};

// The latent -> RGB preview and the non-finite mask of one latent image (NCHW, batch 1).
StepView make_step_view(const pipeline::StepReport& report);
QImage to_qimage(const io::RgbImage& image);

}  // namespace nanscope::gui

Q_DECLARE_METATYPE(nanscope::RunConfig)
Q_DECLARE_METATYPE(nanscope::DeviceList)
Q_DECLARE_METATYPE(nanscope::gui::StepView)
Q_DECLARE_METATYPE(nanscope::gui::ImageView)
Q_DECLARE_METATYPE(nanscope::gui::KernelStats)
Q_DECLARE_METATYPE(nanscope::gui::RunFinished)
Q_DECLARE_METATYPE(nanscope::gui::AbView)
Q_DECLARE_METATYPE(nanscope::gui::KernelCacheView)

namespace nanscope::gui {
// qRegisterMetaType for every type above (call once before connecting).
void register_metatypes();
}  // namespace nanscope::gui
