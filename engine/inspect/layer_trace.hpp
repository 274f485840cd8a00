#pragma once
// The layer trace: an OpTracer that records every op's output statistics with
// its diffusers module path, for one model call (a UNet forward, a VAE
// decode). It reads every op's output back, so it runs on demand only: the
// pipeline re-runs the failing call with it (the calls are deterministic).
//
// origin: the first op whose inputs were all finite and whose output was not.
// near_limit: the first op whose output came within 10% of its dtype's largest
// finite value, or past it (overflowed to +-Inf from finite inputs).

#include <map>
#include <memory>
#include <string>

#include "inspect/inspect.hpp"
#include "ops/op_context.hpp"

namespace nanscope::inspect {

class LayerTracer final : public OpTracer {
 public:
  // component: "unet", "vae" or "text_encoder" (prefix of the module paths);
  // call: what was traced, in words ("unet step 3").
  LayerTracer(std::string component, std::string call);

  void on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const> inputs,
             const Tensor& output) override;

  // The trace so far, with origin and near_limit resolved.
  LayerTrace trace() const;
  // The ops recorded so far (no origin resolved; no copy).
  const std::vector<OpRecord>& ops() const { return trace_.ops; }

 private:
  bool finite(Backend& be, const Tensor& t);

  std::string component_;
  LayerTrace trace_;
  // Finiteness of every buffer seen (op outputs, weights, uploaded inputs),
  // keyed by owner so a freed buffer's address is never mistaken for a new one.
  std::map<std::weak_ptr<Storage>, bool, std::owner_less<std::weak_ptr<Storage>>> finite_;
};

}  // namespace nanscope::inspect
