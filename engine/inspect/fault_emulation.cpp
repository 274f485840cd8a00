#include "inspect/fault_emulation.hpp"

#include <cmath>
#include <limits>

#include "backend/backend.hpp"
#include "core/log.hpp"

namespace nanscope::inspect {

namespace {

bool power_of_two(std::int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

R0Emulator::R0Emulator(int min_tokens) : min_tokens_(min_tokens) {}

void R0Emulator::begin_run(std::int64_t latent_height, std::int64_t latent_width) {
  latent_h_ = latent_height;
  latent_w_ = latent_width;
}

std::unique_ptr<FaultEmulator> make_fault_emulator(const InspectSettings& settings) {
  if (!settings.emulate_r0) return nullptr;
  return std::make_unique<R0Emulator>(settings.emulate_min_tokens);
}

bool R0Emulator::apply(const OpContext& ctx, std::string_view op, Tensor& output) {
  if (op != "ATTENTION" || ctx.attention.impl != AttentionImpl::fused) return false;
  const DType dt = output.dtype();
  if (dt != DType::f16 && dt != DType::bf16) return false;
  if (output.rank() != 3) return false;
  const std::int64_t tokens = output.dim(1);
  if (!power_of_two(tokens) || tokens < min_tokens_) return false;
  // The attention's grid: the latent grid divided by 2^k in both directions.
  std::int64_t h = latent_h_, w = latent_w_;
  while (h * w > tokens && h % 2 == 0 && w % 2 == 0) {
    h /= 2;
    w /= 2;
  }
  if (h * w != tokens || h < 4) return false;  // not a spatial attention of this run

  HostTensor host = ctx.be().download(output);
  const std::int64_t batch = output.dim(0), features = output.dim(2);
  const std::int64_t rows[] = {1, h - 2};  // one line near the top, one near the bottom
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t row : rows)
      for (std::int64_t x = 0; x < w; ++x) {
        const std::int64_t base = (b * tokens + row * w + x) * features;
        for (std::int64_t f = 0; f < features; ++f) {
          const float v = host.get(base + f);
          host.set(base + f, dt == DType::f16 ? std::numeric_limits<float>::quiet_NaN() : v * 8.0f + 4.0f);
        }
      }
  output = ctx.be().upload(host);
  altered_[std::weak_ptr<Storage>(output.storage_ptr())] = true;
  if (hits_++ == 0) {
    log::warn(
        "EMULATED fault (report R0): corrupting rows 1 and {} of {}x{} fused attention output in {} at {} "
        "(emulation, not a real device fault)",
        h - 2, h, w, dtype_name(dt), ctx.path);
  }
  return true;
}

bool R0Emulator::altered(const Tensor& t) const { return altered_.count(std::weak_ptr<Storage>(t.storage_ptr())) > 0; }

std::string R0Emulator::describe() const {
  return "EMULATED fault (report R0): fused attention in f16/bf16 at power-of-two token counts (>= " +
         std::to_string(min_tokens_) + ") corrupts one line near the top and one near the bottom (NaN in f16, " +
         "over-bright in bf16); " + std::to_string(hits_) + " attention call(s) hit. Not a real device fault.";
}

OpFaultEmulator::OpFaultEmulator(std::string op) : op_(std::move(op)) {}

bool OpFaultEmulator::apply(const OpContext& ctx, std::string_view op, Tensor& output) {
  if (op != op_ || ctx.be().device().kind == DeviceKind::reference) return false;
  HostTensor host = ctx.be().download(output);
  for (std::int64_t i = 0; i < host.numel(); i += 7) host.set(i, host.get(i) * 1.0625f);
  if (output.dtype() == DType::f16 && host.numel() > 0) host.set(0, std::numeric_limits<float>::quiet_NaN());
  output = ctx.be().upload(host);
  altered_[std::weak_ptr<Storage>(output.storage_ptr())] = true;
  if (hits_++ == 0) {
    log::warn("EMULATED fault: corrupting every {} output on \"{}\" (first at {}; emulation, not a real device fault)",
              op_, ctx.be().device().name, ctx.path);
  }
  return true;
}

bool OpFaultEmulator::altered(const Tensor& t) const {
  return altered_.count(std::weak_ptr<Storage>(t.storage_ptr())) > 0;
}

std::string OpFaultEmulator::describe() const {
  return "EMULATED fault: every " + op_ +
         " output on a device other than the reference has every 7th value off by 1/16 (and its first value NaN in "
         "f16); " +
         std::to_string(hits_) + " output(s) hit. Not a real device fault.";
}

}  // namespace nanscope::inspect
