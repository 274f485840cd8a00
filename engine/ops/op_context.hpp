#pragma once
// What every op call carries: the backend it runs on, the diffusers module
// path of the caller (for traces and errors), the resolved precision and the
// attention settings, and an optional tracer (the inspector's layer trace).

#include <span>
#include <string>
#include <string_view>

#include "backend/backend.hpp"
#include "core/precision.hpp"

namespace nanscope {

class OpTracer;
class FaultEmulator;

// Resolves the precision and attention settings of a module from its path
// (per-module overrides, most specific pattern wins). Applied by child().
class PrecisionPolicy {
 public:
  virtual ~PrecisionPolicy() = default;
  virtual void resolve(std::string_view module_path, Precision& precision, AttentionConfig& attention) const = 0;
};

// Asked before every op: a run the user cancelled stops within one op.
class CancelProbe {
 public:
  virtual ~CancelProbe() = default;
  virtual bool cancelled() const = 0;
};

struct OpContext {
  Backend* backend = nullptr;
  std::string path;  // e.g. "up_blocks.1.attentions.0.transformer_blocks.0.attn1"
  Precision precision;
  AttentionConfig attention;
  OpTracer* tracer = nullptr;
  const PrecisionPolicy* policy = nullptr;  // when set, child() re-resolves precision for the child's path
  FaultEmulator* faults = nullptr;          // the inspector's fault emulation; null: real numerics, untouched
  const CancelProbe* cancel = nullptr;      // when set and cancelled, the next op throws Cancelled
  // Per-module dtype overrides are in effect: an op whose inputs have another
  // dtype than precision.dtype casts them to it first (activations through the
  // traced CAST op, weights untraced), so each module computes in its own
  // dtype. Off: an input of another dtype is an error.
  bool mixed_precision = false;

  // The same context for a child module: path + "." + name.
  OpContext child(std::string_view name) const;
  Backend& be() const;  // throws OpError when no backend is set
};

// Receives every op's output (after the op ran) when set in the context.
class OpTracer {
 public:
  virtual ~OpTracer() = default;
  virtual void on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const> inputs,
                     const Tensor& output) = 0;
  // Whether the traced call must run each module's op on its own, every
  // output in a buffer of its own (the layer trace: the norm's output before
  // its SILU). A tracer that only looks at outputs as they come (the memory
  // plan) sees the call as it runs untraced: fused ops, reused buffers.
  virtual bool needs_each_module() const { return true; }
};

// ctx.tracer is set and needs each module's op on its own (OpTracer::needs_each_module).
inline bool traces_each_module(const OpContext& ctx) {
  return ctx.tracer != nullptr && ctx.tracer->needs_each_module();
}

// The key of a repeated call (Backend::begin_repeated_call) of `what` on
// `input`: its shape and dtype, the context's dtype, and whether it is traced
// module by module or has faults emulated (each asks for other buffers).
std::string repeated_call_key(const OpContext& ctx, std::string_view what, const Tensor& input);

// Fault emulation (engine/inspect/fault_emulation.hpp): device quirks
// reproduced on any device so the detectors can be demonstrated. Ops that a
// quirk can hit call apply() after the backend computed their output; it may
// replace the output with a corrupted copy. Always labelled as emulation.
class FaultEmulator {
 public:
  virtual ~FaultEmulator() = default;
  // A run (or a decode of a kept latent) starts with this latent grid (rows,
  // columns); quirks that depend on the image size read it from here.
  virtual void begin_run(std::int64_t latent_height, std::int64_t latent_width) = 0;
  // The label every output of an emulated run carries.
  virtual std::string describe() const = 0;
  // Returns true when it replaced `output`.
  virtual bool apply(const OpContext& ctx, std::string_view op, Tensor& output) = 0;
  // Whether `t` is an output this emulator corrupted (for the layer trace).
  virtual bool altered(const Tensor& t) const = 0;
};

// Builds the standard op error message:
// `GROUP_NORM up_blocks.1.resnets.0.norm1 x[2,640,32,32] f16 on "pthread-cpu": <what>`.
std::string op_message(const OpContext& ctx, std::string_view op,
                       std::initializer_list<std::pair<std::string_view, const Tensor*>> tensors,
                       std::string_view what);

}  // namespace nanscope
