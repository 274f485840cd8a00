#pragma once
// Fault emulation: device quirks reproduced on any device, so that every
// detector can be demonstrated and tested. EMULATION ONLY: it changes no real
// numerics when off (the ops see a null OpContext::faults), and every output
// that an emulated run produces says so (RunInspection::emulation).
//
// Settings live in RunConfig::inspect (`--set inspect.emulate=r0`): the
// settings table (config/settings.cpp) lists and checks every inspect.* key,
// and config/inspect_settings.hpp reads them into InspectSettings for a run.
//
// r0 (field report R0, Intel Arc + IPEX): fused attention in f16 or bf16 at a
// power-of-two query count (1024x1024 and 2048x512 give 2^14 latent tokens in
// SD; 1080x1080 gives 18225) corrupts the output rows of one line near the top
// and one near the bottom of the attention's spatial grid: NaN in f16,
// over-bright values (x * 8 + 4) in bf16. bmm and sliced attention, f32, and
// sizes whose token count is not a power of two are untouched.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ops/op_context.hpp"

namespace nanscope::inspect {

enum class TraceMode : std::uint8_t { automatic, always, off };

// A run's inspector settings, as config/inspect_settings.hpp reads them from
// RunConfig::inspect. The defaults are the settings table's inspect.* rows
// (config/ sits above inspect/, so they are repeated here; a test holds them equal).
struct InspectSettings {
  bool emulate_r0 = false;       // inspect.emulate=r0
  int emulate_min_tokens = 256;  // R0: smallest query count that is hit
  // auto: trace the first failing UNet call and decode; always: also the last
  // step's UNet call and the first decode; off.
  TraceMode trace = TraceMode::automatic;
  // N > 0: every N steps, also decode the sampler's x0 prediction with the
  // run's VAE as a full preview (StepStats::decoded); 0: only the latent ->
  // RGB factor preview.
  int decode_every = 0;
  // Step statistics every N steps and at the last step; 0: none (the decoded
  // image is still checked; nan_policy=stop and the first bad step then see
  // only the steps with statistics).
  int stats_every = 1;
  // nan_policy=retry-layer-f32: how many modules it may upcast per image.
  int layer_retry_limit = 8;
  // Before the run, the f16-safety probe (pipeline/f16_safety.hpp), in the report.
  bool f16_safety = false;
};

class R0Emulator final : public FaultEmulator {
 public:
  explicit R0Emulator(int min_tokens);

  // The latent grid of the run (attention grids are it divided by powers of two).
  void begin_run(std::int64_t latent_height, std::int64_t latent_width) override;
  bool apply(const OpContext& ctx, std::string_view op, Tensor& output) override;
  bool altered(const Tensor& t) const override;
  int hits() const { return hits_; }
  // "EMULATED fault (report R0): ..." — the label every output carries.
  std::string describe() const override;

 private:
  std::int64_t latent_h_ = 0, latent_w_ = 0;
  int min_tokens_;
  int hits_ = 0;
  std::map<std::weak_ptr<Storage>, bool, std::owner_less<std::weak_ptr<Storage>>> altered_;
};

// op:KIND (the device probe's demonstration, `nanscope-cli probe
// --emulate-fault KIND`): a device whose KIND op ("GROUP_NORM", "CONV2D",
// "MATMUL", ... as studies/device_probe.hpp names them) is broken. Every
// output of that op on any device other than `reference` has every 7th value
// off by 1/16 of itself, and in f16 the first value NaN. The reference device
// is never hit, so a probe against it names that op and only that op.
class OpFaultEmulator final : public FaultEmulator {
 public:
  explicit OpFaultEmulator(std::string op);

  void begin_run(std::int64_t, std::int64_t) override {}
  bool apply(const OpContext& ctx, std::string_view op, Tensor& output) override;
  bool altered(const Tensor& t) const override;
  int hits() const { return hits_; }
  // "EMULATED fault: every GROUP_NORM ... Not a real device fault."
  std::string describe() const override;

 private:
  std::string op_;
  int hits_ = 0;
  std::map<std::weak_ptr<Storage>, bool, std::owner_less<std::weak_ptr<Storage>>> altered_;
};

// The fault emulation a run's inspector settings ask for (nullptr: none). The
// pipeline never builds one: the front ends (CLI, workbench, studies) call
// this and hand the emulator to Session::generate / redecode, so emulation is
// always a decision made where the run is requested, and visible there.
std::unique_ptr<FaultEmulator> make_fault_emulator(const InspectSettings& settings);

}  // namespace nanscope::inspect
