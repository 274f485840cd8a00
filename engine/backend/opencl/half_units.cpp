// Native half arithmetic on the device's own half units (kernels/common.cl,
// -DHW_HALF_PTX). NVIDIA's OpenCL reports no cl_khr_fp16, yet every NVIDIA GPU
// of compute capability 5.3 or later has half adders and FMA units, which its
// OpenCL compiler reaches through inline PTX. Before any run uses them, a
// known-answer probe (kernels/half_probe.cl) checks that the program builds
// and that fma and add give the IEEE-rounded half (the same bits as the
// emulation), and exp within two half ulp (OpenCL's allowance for half exp;
// CUDA's hexp stays within one). A failed probe keeps the emulation
// and says why (kernel_notes, the log).
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"

namespace nanscope::opencl {

namespace {

// Half values with exponents in [-12, 8] (and both signs): the products, sums
// and fma results of such values are exact in double, so one rounding of the
// double gives the IEEE answer. Subnormal results, ties and overflow included.
struct ProbeCase {
  float a, b, c, e;
};

std::vector<ProbeCase> probe_cases() {
  std::vector<ProbeCase> cases{
      {std::ldexp(1.0f, -12), std::ldexp(1.0f, -5), 0.0f, -12.0f},                // 2^-17: a subnormal half
      {1.0f + std::ldexp(1.0f, -10), 1.0f + std::ldexp(1.0f, -10), -1.0f, 0.5f},  // a tie, rounded to even
      {256.0f, 256.0f, 0.0f, 11.0f},                                              // 65536 overflows to Inf
      {3.0f, 5.0f, -15.0f, -0.0f},                                                // exact cancellation: +0
      {-0.0f, 1.0f, -0.0f, 1.0f},                                                 // -0 * 1 + -0 = -0
      // a * b = 1 + 163 * 2^-21: 2048 + a * b lies just above the midpoint 2049, so
      // it rounds up to 2050; an f32 sum rounded again to half (double rounding)
      // lands on the midpoint and gives 2048.
      {1.0205078125f, 0.97998046875f, 2048.0f, 2.0f},
      {-1.0205078125f, 0.97998046875f, -2048.0f, -2.0f},
  };
  std::uint32_t s = 0x9e3779b9u;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return s >> 8;
  };
  auto value = [&] {
    const int exp = static_cast<int>(next() % 21) - 12;
    const float mant = 1.0f + static_cast<float>(next() % 1024) / 1024.0f;  // 11 significant bits
    return (next() & 1 ? -1.0f : 1.0f) * std::ldexp(mant, exp);
  };
  while (cases.size() < 4096) {
    // exp inputs in [-16, 11): results from subnormal to near the largest half.
    const float e = round_to(DType::f16, static_cast<float>(next() % 27000) / 1000.0f - 16.0f);
    cases.push_back({value(), value(), value(), e});
  }
  return cases;
}

// One half ulp at x (the spacing of the f16 grid around |x|).
double half_ulp(double x) {
  const double ax = std::fabs(x);
  if (ax < std::ldexp(1.0, -14)) return std::ldexp(1.0, -24);
  int e = 0;
  std::frexp(ax, &e);
  return std::ldexp(1.0, e - 11);
}

bool same(float got, float want) { return got == want ? std::signbit(got) == std::signbit(want) : false; }

}  // namespace

std::string run_half_probe(OpenClBackend& be, const std::string& options, bool expect_hardware) {
  const std::vector<ProbeCase> cases = probe_cases();
  const std::size_t n = cases.size();
  std::vector<float> a(n), b(n), c(n), e(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = cases[i].a;
    b[i] = cases[i].b;
    c[i] = cases[i].c;
    e[i] = cases[i].e;
  }
  cl_kernel k = be.kernel("half_probe", "half_probe", options);
  detail::ScratchBuffer ba(be, n * sizeof(float), "half probe a"), bb(be, n * sizeof(float), "half probe b"),
      bc(be, n * sizeof(float), "half probe c"), be_(be, n * sizeof(float), "half probe e"),
      bo(be, 4 * n * sizeof(float), "half probe out");
  const std::pair<cl_mem, const std::vector<float>*> inputs[] = {
      {ba.mem(), &a}, {bb.mem(), &b}, {bc.mem(), &c}, {be_.mem(), &e}};
  for (const auto& [mem, host] : inputs) {
    NS_CL_CHECK(
        clEnqueueWriteBuffer(be.queue(), mem, CL_TRUE, 0, n * sizeof(float), host->data(), 0, nullptr, nullptr));
  }
  OpenClBackend::set_args(k, ba.mem(), bb.mem(), bc.mem(), be_.mem(), bo.mem(), static_cast<cl_uint>(n));
  const size_t global = n;
  be.launch(k, "HALF_PROBE", 1, &global, nullptr);
  std::vector<float> out(4 * n);
  NS_CL_CHECK(clEnqueueReadBuffer(be.queue(), bo.mem(), CL_TRUE, 0, out.size() * sizeof(float), out.data(), 0, nullptr,
                                  nullptr));
  for (std::size_t i = 0; i < n; ++i) {
    const ProbeCase& p = cases[i];
    const float fma_want = round_to_from_double(DType::f16, double(p.a) * double(p.b) + double(p.c));
    const float add_want = round_to_from_double(DType::f16, double(p.a) + double(p.c));
    const double exp_exact = std::exp(double(p.e));
    const float got_fma = out[4 * i], got_add = out[4 * i + 1], got_exp = out[4 * i + 2];
    if ((out[4 * i + 3] != 0.0f) != expect_hardware) {
      return std::string("the probe ran the ") + (expect_hardware ? "emulation" : "half units") + " instead";
    }
    if (!same(got_fma, fma_want)) {
      return fmt::format("fma({}, {}, {}) gave {}, IEEE half rounding gives {}", p.a, p.b, p.c, got_fma, fma_want);
    }
    if (!same(got_add, add_want)) {
      return fmt::format("{} + {} gave {}, IEEE half rounding gives {}", p.a, p.c, got_add, add_want);
    }
    if (!(std::fabs(double(got_exp) - exp_exact) <= 2.0 * half_ulp(exp_exact))) {
      return fmt::format("exp({}) gave {}, more than two half ulp from {}", p.e, got_exp, exp_exact);
    }
  }
  return {};
}

void OpenClBackend::probe_half_units(const BackendOptions& options) {
  // NVIDIA: half units through inline PTX (no cl_khr_fp16 there); elsewhere
  // OpenCL C half arithmetic where the device declares cl_khr_fp16.
  std::string units, opts;
  if (info_.nv_compute_capability >= 53) {
    units = "NVIDIA half units (compute capability " + std::to_string(info_.nv_compute_capability / 10) + "." +
            std::to_string(info_.nv_compute_capability % 10) +
            ", inline PTX add.rn.f16 / fma.rn.f16, exp as CUDA's hexp)";
    opts = "-DHW_HALF_PTX -DNS_ASM=asm";
  } else if (info_.fp16) {
    units = "device's half arithmetic (cl_khr_fp16)";
    opts = "-DHW_HALF_CL";
  } else {
    return;  // no half units reachable: the emulation, as kernel_notes() says
  }
  if (!options.half_units) {
    half_units_note_ =
        "native half arithmetic emulated exactly: the " + units + " were turned off (NANSCOPE_NATIVE_HALF=emulated)";
    return;
  }
  std::string why;
  try {
    std::string probe_opts = cl_std_ + " -DSTORE_F16 -DACC_NATIVE -DSOFTMAX_NATIVE " + opts;
    if (info_.fp16) probe_opts += " -DHAS_FP16";
    why = run_half_probe(*this, probe_opts, true);
  } catch (const std::exception& e) {
    why = std::string("its probe program failed: ") + e.what();
  }
  if (!why.empty()) {
    note_fallback("native half arithmetic emulated exactly: the " + units + " did not pass the known-answer probe (" +
                  why + ")");
    return;
  }
  half_unit_options_ = opts;
  half_units_ = units + ", probe passed";
  log::info("\"{}\": native half arithmetic runs on the {}", info_.name, half_units_);
}

}  // namespace nanscope::opencl
