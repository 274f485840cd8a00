#pragma once
// Value types the engine thread hands the probe dialog (probe_dialog.hpp)
// through queued signals: the device probe's table and the f16-safety result.

#include <QMetaType>
#include <QString>

#include "pipeline/f16_safety.hpp"
#include "studies/device_probe.hpp"

namespace nanscope::gui {

struct ProbeResult {
  studies::ProbeReport report;
  QString error;  // empty when the probe ran (cancelled or not)
};

struct F16Result {
  pipeline::F16SafetyReport report;
  QString error;
  bool cancelled = false;
};

// Registers the types above for queued connections (idempotent).
void register_probe_types();

}  // namespace nanscope::gui

Q_DECLARE_METATYPE(nanscope::gui::ProbeResult)
Q_DECLARE_METATYPE(nanscope::gui::F16Result)
