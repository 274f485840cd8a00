#pragma once
// The device probe: is the device (or its driver) broken, or the model?
//
// The model's text encoder, UNet call and VAE decode run once at the run's
// size and precision on a stand-in backend (backend/dry_run_backend.hpp, the
// memory plan's mechanism) that computes nothing and records every op call:
// its kind, input and output shapes and dtypes, parameters and precision, and
// the module paths that made it. Calls that agree in all of that are one row
// (an SD 1.5 UNet makes ~1,500 op calls at 512x512 but only a few hundred
// distinct ones). Each row then runs once on the probed device and once on the
// `reference` device (plain C++, f64 accumulation) on the same seeded inputs,
// and the outputs are compared per element: normalised MSE and max |d - r|
// relative to max |r| (the op tests' notions, engine tolerance table in
// device_probe.cpp), max ulp in the output dtype, and non-finite positions.
//
// Verdict per row: "agrees", "differs beyond tolerance", or "non-finite
// where the reference is finite" (worst). Rows are sorted worst first.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/run_config.hpp"
#include "ops/op_context.hpp"

namespace nanscope::pipeline {
class Session;
}

namespace nanscope::studies {

enum class ProbeVerdict : std::uint8_t { agrees, differs, nonfinite };
// "agrees", "differs beyond tolerance", "non-finite where the reference is finite"
std::string_view probe_verdict_name(ProbeVerdict v);
// "agrees", "differs", "non-finite" (JSON, CLI column)
std::string_view probe_verdict_code(ProbeVerdict v);

// The limits a probe row is judged by, {nmse, max |d - r| / max |r|}: the op tests' Check::backend rows
// (tests/support/tolerance.cpp, which the engine does not link; a test keeps the two tables equal) for the op
// family ("matmul", "conv2d", "attention_fused", ...) at the precision, grown for reductions longer than the op
// suite's (`reduction` terms: f32 sums drift like sqrt(length)). An unknown family gets {0, 0}.
struct ProbeTolerance {
  double nmse, max_rel;
};
ProbeTolerance probe_tolerance(std::string_view family, const Precision& p, std::int64_t reduction = 0);

struct ProbeRow {
  std::string op;                    // the backend op: "CONV2D", "MATMUL", "ATTENTION", "SILU", ...
  std::vector<std::string> modules;  // every full module path whose call shares this row, in order of first use
  int calls = 0;                     // op calls of the model that this row stands for
  std::vector<Shape> inputs;         // input shapes, in argument order (weights included)
  Shape output;
  DType dtype = DType::f32;  // output dtype
  std::string precision;     // "f16/acc=native/softmax=f32" (ops without arithmetic precision: the dtype)
  std::string params;        // op parameters in words: "3x3 stride 1 pad 1", "fused, 8 heads"
  std::uint64_t seed = 0;    // the inputs' seed (reproducible per row)
  // Comparison against the reference (over positions where both are finite).
  double nmse = 0;                        // sum((d - r)^2) / sum(r^2)
  double max_rel = 0;                     // max |d - r| / max |r|
  std::uint64_t max_ulp = 0;              // in the output dtype, where |r| >= max |r| / 1024
  std::int64_t nonfinite = 0;             // positions where the reference is finite and the device is not
  std::int64_t mismatched_nonfinite = 0;  // reference non-finite, device finite or another Inf/NaN
  double tol_nmse = 0, tol_max_rel = 0;   // the limits this row was judged by
  double score = 0;                       // worst of nmse / tol_nmse and max_rel / tol_max_rel; +inf when non-finite
  ProbeVerdict verdict = ProbeVerdict::agrees;
  bool emulated = false;  // the fault emulation altered the device's output
  double seconds = 0;     // both runs and the comparison

  std::string shapes() const;  // "[2,64,16,16] [64,64,3,3] [64] -> [2,64,16,16]"
};

struct ProbeReport {
  std::string device, reference, model, vae;
  int width = 0, height = 0;
  std::string precision;       // per component, "text_encoder f32, unet f16/acc=f32/softmax=f32, vae f32"
  int recorded_calls = 0;      // op calls the model makes (text encoder, one UNet call, one decode)
  int distinct = 0;            // rows after deduplication
  std::vector<ProbeRow> rows;  // worst first (the rows probed so far when cancelled)
  int agree = 0, differ = 0, nonfinite = 0;
  double record_seconds = 0, seconds = 0;
  bool cancelled = false;
  std::string emulation;  // the fault emulation's label, "" when none
  std::string summary;    // one line
};

// What the probe reports while it runs, and how it is cancelled.
class ProbeObserver {
 public:
  virtual ~ProbeObserver() = default;
  virtual void on_status(std::string_view message) {}
  // After each row: `done` of `total` rows probed.
  virtual void on_row(int done, int total, const ProbeRow& row) {}
  // Checked between rows (and between the ops of the recording); true stops the probe.
  virtual bool cancelled() const { return false; }
};

struct ProbeOptions {
  RunConfig config;                     // model, vae, size (0: the model's default), precision, prompt, cfg, device
  std::string reference = "reference";  // the device compared against
  std::uint64_t seed = 1;               // the inputs' seed
  // A fault emulation (inspect/fault_emulation.hpp) applied to the probed
  // device's outputs only; always labelled.
  FaultEmulator* faults = nullptr;
};

// Records, deduplicates and compares (above). Throws ConfigError for a size
// the model rejects and DeviceError for a missing device.
ProbeReport probe_device(pipeline::Session& session, const ProbeOptions& options, ProbeObserver* observer = nullptr);

// The report as JSON (`nanscope-cli probe --json`): the header keys above and
// "rows", each with op, modules, calls, inputs, output, dtype, precision,
// params, seed, nmse, max_rel, max_ulp, nonfinite, mismatched_nonfinite,
// tol_nmse, tol_max_rel, score (null when infinite), verdict, emulated.
nlohmann::json probe_json(const ProbeReport& report);

}  // namespace nanscope::studies
