#include "studies/device_probe.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "backend/dry_run_backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/component_context.hpp"
#include "pipeline/session.hpp"

namespace nanscope::studies {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---------------------------------------------------------------------------
// Tolerances: the op tests' notion (tests/support/tolerance.cpp, Check::backend
// rows: an OpenCL device against the reference backend), repeated here because
// the engine links no test code. {nmse, max |d - r| / max |r|} per family and
// precision (f32 | f16 | f16 native | bf16 | bf16 native). They were
// calibrated at 4x the worst value seen on PoCL and an H100 over the op suite's
// cases (reductions up to ~700 terms); for longer reductions the limits grow
// with the length (below), since f32 sums drift like sqrt(length).
using Tol = ProbeTolerance;
struct TolRow {
  std::string_view family;
  Tol f32, f16, f16_native, bf16, bf16_native;
};
constexpr Tol kF16Floor{1e-9, 2e-3};
constexpr Tol kBF16Floor{5e-8, 1.6e-2};
constexpr TolRow kTolerances[] = {
    {"exact", {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}},
    {"matmul", {1e-12, 5e-6}, {1e-8, 2e-3}, kF16Floor, {1e-8, 1e-2}, kBF16Floor},
    {"conv2d", {2e-11, 1.2e-5}, {4e-8, 2e-3}, kF16Floor, {2e-9, 1.2e-2}, kBF16Floor},
    {"conv2d_winograd", {1.5e-10, 8e-5}, {4e-9, 2e-3}, kF16Floor, {3e-8, 1.6e-2}, kBF16Floor},
    {"norm", {1e-13, 1e-6}, {1e-9, 2e-3}, kF16Floor, {4e-9, 1e-2}, kBF16Floor},
    {"activation", {2e-14, 5e-7}, {1e-9, 2e-3}, {1e-9, 2e-3}, {3e-7, 2e-2}, {3e-7, 2e-2}},
    {"softmax", {4e-12, 5e-6}, {5e-10, 2e-3}, {5e-10, 2e-3}, {5e-8, 2e-2}, {5e-8, 2e-2}},
    {"timestep", {2.5e-10, 2.5e-4}, {4e-9, 1e-3}, {4e-9, 1e-3}, kBF16Floor, kBF16Floor},
    {"attention", {5e-13, 4e-6}, {2e-9, 2e-3}, {4e-9, 2e-3}, {1.5e-8, 1e-2}, kBF16Floor},
    {"attention_fused", {1e-12, 5e-6}, {1.5e-9, 2e-3}, kF16Floor, {2e-8, 1e-2}, kBF16Floor},
};
constexpr double kCalibratedLength = 700;  // the op suite's longest reductions

}  // namespace

ProbeTolerance probe_tolerance(std::string_view family, const Precision& p, std::int64_t reduction) {
  const bool native = p.native_accumulation() || p.native_softmax();
  ProbeTolerance t{0, 0};
  for (const TolRow& r : kTolerances) {
    if (r.family != family) continue;
    switch (p.dtype) {
      case DType::f32: t = r.f32; break;
      case DType::f16: t = native ? r.f16_native : r.f16; break;
      case DType::bf16: t = native ? r.bf16_native : r.bf16; break;
    }
  }
  const double grow = std::max(1.0, static_cast<double>(reduction) / kCalibratedLength);
  return {t.nmse * grow, t.max_rel * std::sqrt(grow)};
}

namespace {

// ---------------------------------------------------------------------------
// Recording.

// How one input is filled: uniform in [lo, hi], rounded to its dtype.
struct InputSpec {
  Shape shape;
  DType dtype = DType::f32;
  float lo = -1, hi = 1;
};

// Runs the recorded call again on `be` with inputs `in` (in InputSpec order) into `out`.
using Replay = std::function<void(Backend& be, std::vector<Tensor>& in, Tensor& out)>;

struct RecordedCall {
  std::string op, family, params;
  Precision precision;
  bool has_precision = true;
  std::int64_t reduction = 1;  // longest sum one output value takes (for the tolerance)
  std::vector<InputSpec> inputs;
  Shape out_shape;
  DType out_dtype = DType::f32;
  Replay replay;
  std::string key;
  std::vector<std::string> modules;
  int calls = 1;
};

std::string dims(const Shape& s) { return shape_str(s); }

InputSpec spec(const Tensor& t, float lo = -1, float hi = 1) { return {t.shape(), t.dtype(), lo, hi}; }

// A stand-in backend that records every op call (kind, shapes, parameters,
// precision) and computes nothing.
class RecordingBackend final : public DryRunBackend {
 public:
  explicit RecordingBackend(const Backend& real) : DryRunBackend(real) {}

  std::vector<RecordedCall> calls;
  std::vector<std::size_t> pending;  // calls not yet named by the tracer

  void matmul(const MatmulArgs& a) override {
    RecordedCall c = start("MATMUL", "matmul", a.precision, a.out);
    const float wb = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(a.k, 1)));
    c.inputs = {spec(a.a), spec(a.b, -wb, wb)};
    if (a.bias) c.inputs.push_back(spec(*a.bias, -0.1f, 0.1f));
    c.reduction = a.k;
    c.params = (a.trans_b ? "b transposed" : "b plain") + std::string(a.b_broadcast ? ", shared b" : "") +
               (a.alpha != 1.0f ? ", alpha " + num(a.alpha) : "") +
               (a.epilogue == MatmulEpilogue::geglu ? ", then GEGLU" : "");
    const MatmulArgs p = a;
    const bool bias = a.bias != nullptr;
    c.replay = [p, bias](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.matmul(MatmulArgs{in[0], in[1], bias ? &in[2] : nullptr, out, p.batch, p.m, p.n, p.k, p.trans_b, p.b_broadcast,
                           p.alpha, p.precision, false, p.epilogue});
    };
    finish(std::move(c));
  }
  void conv2d(const Conv2dArgs& a) override {
    const bool winograd = real().conv2d_winograd(a);
    RecordedCall c = start("CONV2D", winograd ? "conv2d_winograd" : "conv2d", a.precision, a.out);
    const float wb = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(a.c * a.kh * a.kw, 1)));
    c.inputs = {spec(a.x), spec(a.w, -wb, wb)};
    if (a.bias) c.inputs.push_back(spec(*a.bias, -0.1f, 0.1f));
    c.reduction = a.c * a.kh * a.kw;
    c.params = std::to_string(a.kh) + "x" + std::to_string(a.kw) + " stride " + std::to_string(a.stride) + " pad " +
               std::to_string(a.padding) + (winograd ? ", Winograd F(4x4, 3x3)" : "");
    const Conv2dArgs p = a;
    const bool bias = a.bias != nullptr;
    c.replay = [p, bias](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.conv2d(Conv2dArgs{in[0], in[1], bias ? &in[2] : nullptr, out, p.n, p.c, p.h, p.w_in, p.o, p.kh, p.kw, p.oh,
                           p.ow, p.stride, p.padding, p.precision});
    };
    finish(std::move(c));
  }
  void group_norm(const GroupNormArgs& a) override {
    RecordedCall c = start(a.silu ? "GROUP_NORM+SILU" : "GROUP_NORM", "norm", a.precision, a.out);
    c.inputs = {spec(a.x, -2, 3)};
    if (a.gamma) c.inputs.push_back(spec(*a.gamma, 0.5f, 1.5f));
    if (a.beta) c.inputs.push_back(spec(*a.beta, -0.5f, 0.5f));
    c.reduction = a.c / std::max(a.groups, 1) * a.s;
    c.params = std::to_string(a.groups) + " groups, eps " + num(a.eps);
    const GroupNormArgs p = a;
    const bool g = a.gamma != nullptr, b = a.beta != nullptr;
    c.replay = [p, g, b](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.group_norm(GroupNormArgs{in[0], g ? &in[1] : nullptr, b ? &in[g ? 2 : 1] : nullptr, out, p.n, p.c, p.s,
                                  p.groups, p.eps, p.precision, p.silu});
    };
    finish(std::move(c));
  }
  void layer_norm(const LayerNormArgs& a) override {
    RecordedCall c = start("LAYER_NORM", "norm", a.precision, a.out);
    c.inputs = {spec(a.x, -2, 3)};
    if (a.gamma) c.inputs.push_back(spec(*a.gamma, 0.5f, 1.5f));
    if (a.beta) c.inputs.push_back(spec(*a.beta, -0.5f, 0.5f));
    c.reduction = a.d;
    c.params = "eps " + num(a.eps);
    const LayerNormArgs p = a;
    const bool g = a.gamma != nullptr, b = a.beta != nullptr;
    c.replay = [p, g, b](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.layer_norm(LayerNormArgs{in[0], g ? &in[1] : nullptr, b ? &in[g ? 2 : 1] : nullptr, out, p.rows, p.d, p.eps,
                                  p.precision});
    };
    finish(std::move(c));
  }
  void unary(const UnaryArgs& a) override {
    static constexpr const char* kNames[] = {"SILU", "GELU", "GELU_TANH", "QUICK_GELU", "SCALE"};
    RecordedCall c = start(kNames[static_cast<int>(a.op)], "activation", a.precision, a.out);
    c.inputs = {spec(a.x, -4, 4)};
    if (a.op == UnaryOp::scale) c.params = "x " + num(a.param);
    const UnaryArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.unary(UnaryArgs{in[0], out, p.op, p.param, p.precision});
    };
    finish(std::move(c));
  }
  void geglu(const GegluArgs& a) override {
    RecordedCall c = start("GEGLU", "activation", a.precision, a.out);
    c.inputs = {spec(a.x, -4, 4)};
    const GegluArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.geglu(GegluArgs{in[0], out, p.rows, p.d, p.precision});
    };
    finish(std::move(c));
  }
  void softmax(const SoftmaxArgs& a) override {
    RecordedCall c = start("SOFTMAX", "softmax", a.precision, a.out);
    c.inputs = {spec(a.x, -8, 8)};
    c.reduction = a.d;
    const SoftmaxArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.softmax(SoftmaxArgs{in[0], out, p.rows, p.d, p.precision});
    };
    finish(std::move(c));
  }
  void upsample_nearest2x(const UpsampleArgs& a) override {
    RecordedCall c = start("UPSAMPLE_NEAREST2X", "exact", {}, a.out);
    c.has_precision = false;
    c.inputs = {spec(a.x)};
    const UpsampleArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.upsample_nearest2x(UpsampleArgs{in[0], out, p.n, p.c, p.h, p.w});
    };
    finish(std::move(c));
  }
  void binary(const BinaryArgs& a) override {
    static constexpr const char* kNames[] = {"ADD", "SUB", "MUL"};
    RecordedCall c = start(kNames[static_cast<int>(a.op)], "exact", a.precision, a.out);
    c.inputs = {spec(a.a), spec(a.b)};
    c.params = "broadcast " + std::to_string(a.b_strides[0]) + "," + std::to_string(a.b_strides[1]) + "," +
               std::to_string(a.b_strides[2]) + "," + std::to_string(a.b_strides[3]);
    const BinaryArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.binary(BinaryArgs{in[0], in[1], out, p.op, p.shape4, p.b_strides, p.precision});
    };
    finish(std::move(c));
  }
  void concat(const ConcatArgs& a) override {
    RecordedCall c = start("CONCAT", "exact", {}, a.out);
    c.has_precision = false;
    for (const Tensor* t : a.inputs) c.inputs.push_back(spec(*t));
    c.params = "outer " + std::to_string(a.outer) + " inner " + std::to_string(a.inner);
    const std::int64_t outer = a.outer, inner = a.inner;
    const std::vector<std::int64_t> d = a.dims;
    c.replay = [outer, inner, d](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      std::vector<const Tensor*> parts;
      for (const Tensor& t : in) parts.push_back(&t);
      be.concat(ConcatArgs{parts, out, outer, inner, d});
    };
    finish(std::move(c));
  }
  void slice(const SliceArgs& a) override {
    RecordedCall c = start("SLICE", "exact", {}, a.out);
    c.has_precision = false;
    c.inputs = {spec(a.x)};
    c.params = std::to_string(a.begin) + ":" + std::to_string(a.end) + " of " + std::to_string(a.dim);
    const SliceArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.slice(SliceArgs{in[0], out, p.outer, p.dim, p.inner, p.begin, p.end});
    };
    finish(std::move(c));
  }
  void permute(const PermuteArgs& a) override {
    RecordedCall c = start("PERMUTE", "exact", {}, a.out);
    c.has_precision = false;
    c.inputs = {spec(a.x)};
    c.params = "perm " + std::to_string(a.perm[0]) + std::to_string(a.perm[1]) + std::to_string(a.perm[2]) +
               std::to_string(a.perm[3]);
    const PermuteArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.permute(PermuteArgs{in[0], out, p.in_shape, p.perm});
    };
    finish(std::move(c));
  }
  void cast(const CastArgs& a) override {
    RecordedCall c = start("CAST", "exact", {}, a.out);
    c.has_precision = false;
    c.inputs = {spec(a.x, -70000, 70000)};  // past f16's range: the overflow to Inf is part of the op
    c.params = std::string(dtype_name(a.x.dtype())) + " -> " + std::string(dtype_name(a.out.dtype()));
    c.replay = [](Backend& be, std::vector<Tensor>& in, Tensor& out) { be.cast(CastArgs{in[0], out}); };
    finish(std::move(c));
  }
  void timestep_embedding(const TimestepEmbeddingArgs& a) override {
    RecordedCall c = start("TIMESTEP_EMBEDDING", "timestep", {}, a.out);
    c.precision.dtype = a.out.dtype();
    std::string ts;
    for (float t : a.timesteps) ts += (ts.empty() ? "" : ",") + num(t);
    c.params = "t " + ts + ", dim " + std::to_string(a.dim);
    const std::vector<float> t = a.timesteps;
    const std::int64_t dim = a.dim;
    const bool flip = a.flip_sin_to_cos;
    const float shift = a.downscale_freq_shift, period = a.max_period;
    c.replay = [t, dim, flip, shift, period](Backend& be, std::vector<Tensor>&, Tensor& out) {
      be.timestep_embedding(TimestepEmbeddingArgs{t, out, dim, flip, shift, period});
    };
    finish(std::move(c));
  }
  void attention(const AttentionArgs& a) override {
    const bool fused = a.config.impl == AttentionImpl::fused;
    RecordedCall c = start("ATTENTION", fused ? "attention_fused" : "attention", a.precision, a.out);
    c.inputs = {spec(a.q, -2, 2), spec(a.k, -2, 2), spec(a.v)};
    c.reduction = std::max(a.d, a.sk);
    c.params = std::string(attention_impl_name(a.config.impl)) +
               (a.config.impl == AttentionImpl::sliced ? "(" + std::to_string(a.config.slice_size) + ")" : "") + ", " +
               std::to_string(a.heads) + " heads" + (a.causal ? ", causal" : "");
    const AttentionArgs p = a;
    c.replay = [p](Backend& be, std::vector<Tensor>& in, Tensor& out) {
      be.attention(AttentionArgs{in[0], in[1], in[2], out, p.batch, p.sq, p.sk, p.heads, p.d, p.dv, p.scale, p.causal,
                                 p.precision, p.config});
    };
    finish(std::move(c));
  }

 private:
  static std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
  }
  RecordedCall start(std::string op, std::string family, const Precision& p, const Tensor& out) const {
    RecordedCall c;
    c.op = std::move(op);
    c.family = std::move(family);
    c.precision = p;
    c.out_shape = out.shape();
    c.out_dtype = out.dtype();
    return c;
  }
  void finish(RecordedCall c) {
    c.key = c.op + "|" + c.params + "|" + (c.has_precision ? c.precision.describe() : "") + "|";
    for (const auto& in : c.inputs) c.key += dims(in.shape) + std::string(dtype_name(in.dtype)) + ";";
    c.key += dims(c.out_shape) + std::string(dtype_name(c.out_dtype));
    pending.push_back(calls.size());
    calls.push_back(std::move(c));
  }
};

// Names the recorded calls with the module path of the op that made them.
class RecordingTracer final : public OpTracer {
 public:
  RecordingTracer(RecordingBackend& be, const ProbeObserver* obs) : be_(be), obs_(obs) {}
  std::string component;
  void on_op(const OpContext& ctx, std::string_view, std::span<const Tensor* const>, const Tensor&) override {
    const std::string path = ctx.path.empty() ? component : component + "." + ctx.path;
    for (std::size_t i : be_.pending) be_.calls[i].modules = {path};
    be_.pending.clear();
    if (obs_ && obs_->cancelled()) throw Cancelled("probe cancelled while recording the model's ops");
  }

 private:
  RecordingBackend& be_;
  const ProbeObserver* obs_;
};

// The component's root as a run sets it up (its dtype, per-module overrides), with the probe's tracer.
OpContext context(Backend& be, const RunConfig& config, Component c, const pipeline::ComponentPolicy& policy,
                  OpTracer& tracer) {
  OpContext ctx = pipeline::component_context(be, config, c, &policy, config.component(c).precision.dtype);
  ctx.tracer = &tracer;
  return ctx;
}

// ---------------------------------------------------------------------------
// Comparison.

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

HostTensor make_input(const InputSpec& s, std::uint64_t& state) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(s.shape)));
  for (float& x : v) {
    const double u = static_cast<double>(splitmix(state) >> 11) * 0x1.0p-53;
    x = static_cast<float>(s.lo + (s.hi - s.lo) * u);
  }
  return HostTensor::from_f32(s.shape, v, s.dtype);
}

// The value's position on the number line of its dtype (adjacent values differ by 1).
std::int64_t ordinal(const HostTensor& t, std::int64_t i) {
  if (t.dtype == DType::f32) {
    std::uint32_t b;
    std::memcpy(&b, t.data.data() + i * 4, 4);
    return (b & 0x80000000u) ? -static_cast<std::int64_t>(b & 0x7fffffffu) : static_cast<std::int64_t>(b);
  }
  std::uint16_t b;
  std::memcpy(&b, t.data.data() + i * 2, 2);
  return (b & 0x8000u) ? -static_cast<std::int64_t>(b & 0x7fffu) : static_cast<std::int64_t>(b);
}

void compare(const HostTensor& dev, const HostTensor& ref, ProbeRow& row) {
  const std::vector<float> d = dev.to_f32(), r = ref.to_f32();
  double max_ref = 0, sum_sq = 0, sum_ref = 0, max_diff = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const bool rf = std::isfinite(r[i]), df = std::isfinite(d[i]);
    if (rf && !df) {
      ++row.nonfinite;
      continue;
    }
    if (!rf) {
      const bool same = std::isnan(r[i]) ? std::isnan(d[i]) : d[i] == r[i];
      if (!same) ++row.mismatched_nonfinite;
      continue;
    }
    const double diff = std::abs(static_cast<double>(d[i]) - r[i]);
    max_ref = std::max(max_ref, std::abs(static_cast<double>(r[i])));
    sum_sq += diff * diff;
    sum_ref += static_cast<double>(r[i]) * r[i];
    max_diff = std::max(max_diff, diff);
  }
  // ulp only where the value is at least 1/1024 of the largest: next to 0 a
  // cancellation makes any ulp count, and the relative error says it better.
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (!std::isfinite(r[i]) || !std::isfinite(d[i]) || std::abs(static_cast<double>(r[i])) < max_ref / 1024) continue;
    const auto k = static_cast<std::int64_t>(i);
    row.max_ulp = std::max(row.max_ulp, static_cast<std::uint64_t>(std::abs(ordinal(dev, k) - ordinal(ref, k))));
  }
  row.nmse = sum_ref > 0 ? sum_sq / sum_ref : (sum_sq > 0 ? std::numeric_limits<double>::infinity() : 0);
  row.max_rel = max_ref > 0 ? max_diff / max_ref : (max_diff > 0 ? std::numeric_limits<double>::infinity() : 0);
}

void judge(ProbeRow& row) {
  auto ratio = [](double v, double tol) {
    if (v == 0) return 0.0;
    return tol > 0 ? v / tol : std::numeric_limits<double>::infinity();
  };
  row.score = std::max(ratio(row.nmse, row.tol_nmse), ratio(row.max_rel, row.tol_max_rel));
  if (row.nonfinite > 0) {
    row.verdict = ProbeVerdict::nonfinite;
    row.score = std::numeric_limits<double>::infinity();
  } else if (row.mismatched_nonfinite > 0 || row.score > 1) {
    row.verdict = ProbeVerdict::differs;
    if (row.mismatched_nonfinite > 0) row.score = std::max(row.score, 1e300);
  } else {
    row.verdict = ProbeVerdict::agrees;
  }
}

std::string component_precision(const RunConfig& c) {
  std::string s;
  for (Component comp : kComponents) {
    if (!s.empty()) s += ", ";
    s += std::string(component_name(comp)) + " " + c.component(comp).precision.describe() + " " +
         std::string(attention_impl_name(c.component(comp).attention.impl));
  }
  if (!c.overrides.empty()) s += ", " + std::to_string(c.overrides.size()) + " override(s)";
  return s;
}

}  // namespace

std::string_view probe_verdict_name(ProbeVerdict v) {
  switch (v) {
    case ProbeVerdict::agrees: return "agrees";
    case ProbeVerdict::differs: return "differs beyond tolerance";
    case ProbeVerdict::nonfinite: return "non-finite where the reference is finite";
  }
  return "?";
}

std::string_view probe_verdict_code(ProbeVerdict v) {
  switch (v) {
    case ProbeVerdict::agrees: return "agrees";
    case ProbeVerdict::differs: return "differs";
    case ProbeVerdict::nonfinite: return "non-finite";
  }
  return "?";
}

std::string ProbeRow::shapes() const {
  std::string s;
  for (const Shape& in : inputs) s += (s.empty() ? "" : " ") + shape_str(in);
  return s + " -> " + shape_str(output);
}

ProbeReport probe_device(pipeline::Session& session, const ProbeOptions& options, ProbeObserver* observer) {
  ProbeObserver none;
  ProbeObserver& obs = observer ? *observer : none;
  const RunConfig& config = options.config;
  config.validate();
  const auto t0 = Clock::now();
  ProbeReport report;

  obs.on_status("loading the model");
  pipeline::SdModel& m = session.model(config);
  Backend& dev = session.backend(config.device);
  Backend& ref = session.backend(options.reference);
  report.device = dev.device().name;
  report.reference = ref.device().name;
  report.model = m.folder().string();
  report.vae = m.vae_folder().string();
  report.precision = component_precision(config);
  const int size = m.default_size();
  report.width = config.width > 0 ? config.width : size;
  report.height = config.height > 0 ? config.height : size;
  const std::int64_t f = m.vae->config().downscale();
  m.check_size(report.width, report.height, "probe: size");
  if (options.faults) {
    options.faults->begin_run(report.height / f, report.width / f);
    report.emulation = options.faults->describe();
  }

  // 1. Record: the text encoder, one UNet call and one decode on the stand-in backend.
  obs.on_status("recording the model's ops");
  const auto t_rec = Clock::now();
  RecordingBackend rec(dev);
  RecordingTracer tracer(rec, &obs);
  const auto policy = [&](Component c) {
    return pipeline::ComponentPolicy(config, c, config.component(c).precision.dtype);
  };
  const pipeline::ComponentPolicy te_policy = policy(Component::text_encoder), unet_policy = policy(Component::unet),
                                  vae_policy = policy(Component::vae);
  const bool cfg = config.cfg_scale > 1.0;
  const auto& uc = m.unet->config();
  const DType unet_dtype = config.component(Component::unet).precision.dtype;
  const DType vae_dtype = config.component(Component::vae).precision.dtype;
  // Calls no traced op claimed (none so far) keep the component's name.
  auto claim_rest = [&] {
    for (std::size_t i : rec.pending) rec.calls[i].modules = {tracer.component};
    rec.pending.clear();
  };
  const Shape latent{1, uc.in_channels, report.height / f, report.width / f};
  const auto record = [&] {
    {
      tracer.component = "text_encoder";
      const OpContext te = context(rec, config, Component::text_encoder, te_policy, tracer);
      std::vector<std::vector<int>> ids;
      if (cfg) ids.push_back(m.tokenizer.encode(config.negative_prompt).ids);
      ids.push_back(m.tokenizer.encode(config.prompt).ids);
      m.text_encoder->forward(te, ids, config.clip_skip);
      if (m.text_encoder_2 && m.tokenizer_2) {
        std::vector<std::vector<int>> ids2;
        if (cfg) ids2.push_back(m.tokenizer_2->encode(config.negative_prompt).ids);
        ids2.push_back(m.tokenizer_2->encode(config.prompt).ids);
        m.text_encoder_2->forward(te, ids2);
      }
      claim_rest();
    }
    const std::int64_t rows = cfg ? 2 : 1;
    {
      tracer.component = "unet";
      const OpContext u = context(rec, config, Component::unet, unet_policy, tracer);
      const Tensor ctx = rec.empty({rows, 77, uc.cross_attention_dim.front()}, unet_dtype);
      models::AddedConditions added;
      if (uc.text_time) {
        added.text_embeds =
            rec.empty({rows, uc.projection_class_embeddings_input_dim - 6 * uc.addition_time_embed_dim}, unet_dtype);
        added.time_ids.assign(static_cast<std::size_t>(rows * 6), 0.0f);
      }
      Shape in = latent;
      in[0] = rows;
      const std::vector<float> ts(static_cast<std::size_t>(rows), 999.0f);
      m.unet->forward(u, rec.empty(in, unet_dtype), ts, ctx, uc.text_time ? &added : nullptr);
      claim_rest();
    }
    {
      tracer.component = "vae";
      const OpContext v = context(rec, config, Component::vae, vae_policy, tracer);
      m.vae->decode(v, rec.empty(latent, vae_dtype));
      claim_rest();
    }
  };
  try {
    record();
  } catch (const Cancelled&) {
    report.cancelled = true;
    report.seconds = since(t0);
    report.summary = "device probe cancelled while recording the model's ops";
    return report;
  }
  report.record_seconds = since(t_rec);
  report.recorded_calls = static_cast<int>(rec.calls.size());

  // 2. Deduplicate: one row per op, shapes, parameters and precision.
  std::vector<RecordedCall> distinct;
  std::map<std::string, std::size_t> index;
  for (RecordedCall& c : rec.calls) {
    auto [it, fresh] = index.emplace(c.key, distinct.size());
    if (fresh) {
      distinct.push_back(std::move(c));
      continue;
    }
    RecordedCall& d = distinct[it->second];
    ++d.calls;
    for (const std::string& mod : c.modules)
      if (std::find(d.modules.begin(), d.modules.end(), mod) == d.modules.end()) d.modules.push_back(mod);
  }
  report.distinct = static_cast<int>(distinct.size());
  log::info("probe: {} op calls, {} distinct (op, shapes, parameters, precision), recorded in {:.2f} s",
            report.recorded_calls, report.distinct, report.record_seconds);

  // 3. Run each row on the device and on the reference, on the same inputs, and compare.
  obs.on_status("probing " + std::to_string(distinct.size()) + " ops on \"" + report.device + "\" against \"" +
                report.reference + "\"");
  int done = 0;
  for (const RecordedCall& c : distinct) {
    if (obs.cancelled()) {
      report.cancelled = true;
      break;
    }
    const auto t_row = Clock::now();
    ProbeRow row;
    row.op = c.op;
    row.modules = c.modules;
    row.calls = c.calls;
    for (const auto& in : c.inputs) row.inputs.push_back(in.shape);
    row.output = c.out_shape;
    row.dtype = c.out_dtype;
    row.precision = c.has_precision ? c.precision.describe() : std::string(dtype_name(c.out_dtype));
    row.params = c.params;
    row.seed = options.seed ^ fnv1a(c.key);
    std::uint64_t state = row.seed;
    std::vector<HostTensor> host;
    for (const InputSpec& s : c.inputs) host.push_back(make_input(s, state));
    auto run_on = [&](Backend& be) {
      std::vector<Tensor> in;
      for (const HostTensor& h : host) in.push_back(be.upload(h));
      Tensor out = be.empty(c.out_shape, c.out_dtype);
      c.replay(be, in, out);
      return out;
    };
    Tensor d_out = run_on(dev);
    if (options.faults) {
      OpContext fctx;
      fctx.backend = &dev;
      fctx.path = c.modules.empty() ? std::string() : c.modules.front();
      fctx.precision = c.precision;
      row.emulated = options.faults->apply(fctx, c.op, d_out);
    }
    const HostTensor d_host = dev.download(d_out);
    const HostTensor r_host = ref.download(run_on(ref));
    const Tol tol = probe_tolerance(c.family, c.precision, c.reduction);
    row.tol_nmse = tol.nmse;
    row.tol_max_rel = tol.max_rel;
    compare(d_host, r_host, row);
    judge(row);
    row.seconds = since(t_row);
    ++done;
    obs.on_row(done, static_cast<int>(distinct.size()), row);
    report.rows.push_back(std::move(row));
  }

  std::stable_sort(report.rows.begin(), report.rows.end(), [](const ProbeRow& a, const ProbeRow& b) {
    if (a.verdict != b.verdict) return static_cast<int>(a.verdict) > static_cast<int>(b.verdict);
    return a.score > b.score;
  });
  for (const ProbeRow& r : report.rows) {
    (r.verdict == ProbeVerdict::agrees    ? report.agree
     : r.verdict == ProbeVerdict::differs ? report.differ
                                          : report.nonfinite)++;
  }
  report.seconds = since(t0);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", report.seconds);
  std::string s = (report.emulation.empty() ? "" : "[EMULATION] ") + std::to_string(report.rows.size()) + " of " +
                  std::to_string(report.distinct) + " distinct ops (" + std::to_string(report.recorded_calls) +
                  " calls) on \"" + report.device + "\" against \"" + report.reference + "\" at " +
                  std::to_string(report.width) + "x" + std::to_string(report.height) + ": ";
  if (report.differ + report.nonfinite == 0) {
    s += "every op agrees";
  } else {
    s += std::to_string(report.nonfinite) + " non-finite where the reference is finite, " +
         std::to_string(report.differ) + " beyond tolerance; worst " + report.rows.front().op + " " +
         report.rows.front().modules.front();
  }
  s += std::string(report.cancelled ? " (cancelled)" : "") + ", " + secs;
  report.summary = s;
  log::info("probe: {}", s);
  return report;
}

nlohmann::json probe_json(const ProbeReport& r) {
  using nlohmann::json;
  auto finite_or_null = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json rows = json::array();
  for (const ProbeRow& row : r.rows) {
    json inputs = json::array();
    for (const Shape& s : row.inputs) inputs.push_back(s);
    rows.push_back({{"op", row.op},
                    {"modules", row.modules},
                    {"calls", row.calls},
                    {"inputs", inputs},
                    {"output", row.output},
                    {"dtype", dtype_name(row.dtype)},
                    {"precision", row.precision},
                    {"params", row.params},
                    {"seed", row.seed},
                    {"nmse", finite_or_null(row.nmse)},
                    {"max_rel", finite_or_null(row.max_rel)},
                    {"max_ulp", row.max_ulp},
                    {"nonfinite", row.nonfinite},
                    {"mismatched_nonfinite", row.mismatched_nonfinite},
                    {"tol_nmse", row.tol_nmse},
                    {"tol_max_rel", row.tol_max_rel},
                    {"score", finite_or_null(row.score)},
                    {"verdict", probe_verdict_code(row.verdict)},
                    {"emulated", row.emulated},
                    {"seconds", row.seconds}});
  }
  return {{"device", r.device},
          {"reference", r.reference},
          {"model", r.model},
          {"vae", r.vae},
          {"width", r.width},
          {"height", r.height},
          {"precision", r.precision},
          {"recorded_calls", r.recorded_calls},
          {"distinct", r.distinct},
          {"agree", r.agree},
          {"differ", r.differ},
          {"nonfinite", r.nonfinite},
          {"record_seconds", r.record_seconds},
          {"seconds", r.seconds},
          {"cancelled", r.cancelled},
          {"emulation", r.emulation},
          {"summary", r.summary},
          {"rows", rows}};
}

}  // namespace nanscope::studies
