// `nanscope-cli demo`: a short tour of the engine on the chosen device. Seeded
// inputs go through conv2d, group_norm and attention in f32 and f16 (and f16
// with native accumulation); each result is compared with the reference
// device, and the first-call (kernel build) and warm times are shown.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "common.hpp"
#include "ops/ops.hpp"

namespace nanscope::cli {

namespace {

constexpr std::uint32_t kSeed = 1234;

HostTensor random_host(const Shape& shape, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = normal(rng);
  return HostTensor::from_f32(shape, v);
}

struct Inputs {
  HostTensor x, w, b, gamma, beta, q, k, v;
};

Inputs make_inputs() {
  std::mt19937 rng(kSeed);
  Inputs in;
  in.x = random_host({1, 32, 32, 32}, rng, 1.0f);
  in.w = random_host({32, 32, 3, 3}, rng, 1.0f / std::sqrt(32.0f * 9.0f));
  in.b = random_host({32}, rng, 0.1f);
  in.gamma = random_host({32}, rng, 0.2f);
  for (std::int64_t i = 0; i < in.gamma.numel(); ++i) in.gamma.set(i, 1.0f + in.gamma.get(i));
  in.beta = random_host({32}, rng, 0.1f);
  in.q = random_host({1, 256, 128}, rng, 1.0f);
  in.k = random_host({1, 256, 128}, rng, 1.0f);
  in.v = random_host({1, 256, 128}, rng, 1.0f);
  return in;
}

// One op on one backend: the output and the wall time of the call (synchronised).
using OpFn = std::function<Tensor(const OpContext&, const std::vector<Tensor>&)>;

struct Timed {
  HostTensor out;
  double ms = 0.0;
};

Timed run_op(Backend& be, const Precision& p, const OpFn& fn, const std::vector<const HostTensor*>& host) {
  std::vector<Tensor> args;
  for (const HostTensor* h : host) args.push_back(be.upload(h->converted(p.dtype)));
  be.synchronize();
  OpContext ctx;
  ctx.backend = &be;
  ctx.path = "demo";
  ctx.precision = p;
  const auto t0 = std::chrono::steady_clock::now();
  Tensor out = fn(ctx, args);
  be.synchronize();
  Timed r;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.out = be.download(out);
  return r;
}

struct Diff {
  double max_abs = 0.0;
  double max_ref = 0.0;
  std::int64_t nonfinite = 0;
};

Diff compare(const HostTensor& got, const HostTensor& want) {
  Diff d;
  const auto g = got.to_f32();
  const auto w = want.to_f32();
  for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
    if (!std::isfinite(g[i])) {
      ++d.nonfinite;
      continue;
    }
    d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(g[i] - w[i])));
    d.max_ref = std::max(d.max_ref, static_cast<double>(std::fabs(w[i])));
  }
  return d;
}

// Kernel builds and cache loads since `from` (OpenCL only).
std::string build_summary(Backend& be, std::size_t& from) {
  const auto recs = be.kernel_builds();
  int built = 0, loaded = 0;
  double ms = 0.0;
  for (std::size_t i = from; i < recs.size(); ++i) {
    (recs[i].cache_hit ? loaded : built) += 1;
    ms += recs[i].ms;
  }
  from = recs.size();
  if (built + loaded == 0) return "-";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%d built, %d cached, %.0f ms", built, loaded, ms);
  return buf;
}

int run_demo(const GlobalOptions& g) {
  const SelectedDevice sel = select(g);
  auto device = make_backend(sel.info, backend_options(g));
  auto reference = make_backend(sel.list.devices.back());
  std::printf("NaNscope engine demo on %d \"%s\" (%s), compared with the reference device; seed %u\n\n", sel.info.index,
              sel.info.name.c_str(), sel.info.id.c_str(), kSeed);
  const Inputs in = make_inputs();

  struct Case {
    const char* name;
    const char* shapes;
    OpFn fn;
    std::vector<const HostTensor*> inputs;
  };
  const std::vector<Case> cases = {
      {"conv2d",
       "x[1,32,32,32] w[32,32,3,3]",
       [](const OpContext& c, const std::vector<Tensor>& a) { return ops::conv2d(c, a[0], a[1], &a[2], 1, 1); },
       {&in.x, &in.w, &in.b}},
      {"group_norm",
       "x[1,32,32,32] groups 8",
       [](const OpContext& c, const std::vector<Tensor>& a) {
         return ops::group_norm(c, a[0], 8, &a[1], &a[2], 1e-5f);
       },
       {&in.x, &in.gamma, &in.beta}},
      {"attention",
       "q,k,v[1,256,128] 2 heads",
       [](const OpContext& c, const std::vector<Tensor>& a) {
         return ops::attention(c, a[0], a[1], a[2], 2, 1.0f / std::sqrt(64.0f));
       },
       {&in.q, &in.k, &in.v}},
  };
  const std::vector<Precision> precisions = {
      Precision{DType::f32, Accumulate::f32, SoftmaxPrecision::f32},
      Precision{DType::f16, Accumulate::f32, SoftmaxPrecision::f32},
      Precision{DType::f16, Accumulate::native, SoftmaxPrecision::native},
  };

  std::printf("%-11s %-26s %-28s %10s %9s %9s  %-11s %s\n", "op", "shapes", "precision", "first ms", "warm ms",
              "ref ms", "max |diff|", "kernels (first call)");
  std::size_t records_from = 0;
  for (const auto& p : precisions) {
    for (const auto& c : cases) {
      const Timed first = run_op(*device, p, c.fn, c.inputs);
      const std::string builds = build_summary(*device, records_from);
      const Timed warm = run_op(*device, p, c.fn, c.inputs);
      const Timed ref = run_op(*reference, p, c.fn, c.inputs);
      const Diff d = compare(warm.out, ref.out);
      char diff[48];
      if (d.nonfinite) {
        std::snprintf(diff, sizeof(diff), "%.2e +%lld non-finite", d.max_abs, static_cast<long long>(d.nonfinite));
      } else {
        std::snprintf(diff, sizeof(diff), "%.2e", d.max_abs);
      }
      std::printf("%-11s %-26s %-28s %10.1f %9.1f %9.1f  %-11s %s\n", c.name, c.shapes, p.describe().c_str(), first.ms,
                  warm.ms, ref.ms, diff, builds.c_str());
    }
  }
  std::printf("\nmax |diff| is against the reference device (f64 accumulation, same storage precision).\n");
  if (sel.info.kind == DeviceKind::reference) {
    std::printf("The selected device is the reference itself, so every diff is 0 by construction.\n");
  } else {
    std::printf("First-call times include kernel builds; `nanscope-cli precompile` moves them out of the first run.\n");
  }
  return 0;
}

}  // namespace

void add_demo_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* cmd =
      app.add_subcommand("demo", "Run conv2d, group_norm and attention on the device and compare with reference");
  cmd->callback([&g, &action] { action = [&g] { return run_demo(g); }; });
}

}  // namespace nanscope::cli
