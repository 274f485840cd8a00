// Native half arithmetic on the device's own half units (kernels/common.cl,
// -DHW_HALF_PTX; engine/backend/opencl/half_units.cpp).
//
// The known-answer probe runs on every OpenCL device: where the device has no
// reachable half units (PoCL, most CPUs) it runs the exact emulation, which
// must give the same answers (fma and add rounded once to half, exp within
// two half ulp). Where it has them (NVIDIA, compute capability 5.3+), the ops
// in native half run on them, and must agree with the emulation on the same
// device: GEMMs bit for bit (fma.rn.f16 is IEEE), softmax within the f16
// native tolerance (a half exp, such as CUDA's hexp, is not correctly rounded).

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "backend/opencl/opencl_backend.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/op_case.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

namespace nanscope::test {
namespace {

const Precision kNativeHalf{DType::f16, Accumulate::native, SoftmaxPrecision::native};

TEST(HalfUnits, ProbeAnswersOnEveryDevice) {
  if (opencl_backends().empty()) GTEST_SKIP() << no_opencl_message();
  for (Backend* be : opencl_backends()) {
    auto* ocl = dynamic_cast<opencl::OpenClBackend*>(be);
    ASSERT_NE(ocl, nullptr);
    const bool hw = ocl->native_half_in_hardware(kNativeHalf);
    SCOPED_TRACE("device \"" + be->device().name + "\", " + (hw ? "half units" : "emulation"));
    EXPECT_EQ(opencl::run_half_probe(*ocl, ocl->precision_options(kNativeHalf), hw), "");
  }
}

TEST(HalfUnits, AgreeWithTheEmulation) {
  int checked = 0;
  for (Backend* be : opencl_backends()) {
    auto* ocl = dynamic_cast<opencl::OpenClBackend*>(be);
    if (!ocl || !ocl->native_half_in_hardware(kNativeHalf)) continue;
    SCOPED_TRACE("device \"" + be->device().name + "\": " + ocl->half_units());
    BackendOptions o = test_backend_options();
    o.half_units = false;
    auto emu = make_backend(be->device(), o);
    ASSERT_FALSE(emu->native_half_in_hardware(kNativeHalf));
    Rng rng(7);
    // k = 700: long half sums (some rows reach 2^11, where f16 sums stall); the
    // last row's products overflow to Inf.
    HostTensor a = random_normal(rng, {3, 33, 700}, DType::f16, 0.0, 1.0);
    HostTensor b = random_normal(rng, {3, 700, 45}, DType::f16, 0.0, 1.0);
    for (int i = 0; i < 700; ++i) {  // 300 * 300 = 90000: past the largest half at the first product
      a.set(2 * 33 * 700 + 32 * 700 + i, 300.0f);
      b.set(2 * 700 * 45 + i * 45, 300.0f);
    }
    HostTensor x = random_normal(rng, {6, 1024}, DType::f16, 0.0, 4.0);
    HostTensor got_mm, want_mm, got_sm, want_sm;
    for (Backend* side : {be, emu.get()}) {
      const OpContext ctx = make_context(*side, kNativeHalf);
      HostTensor mm = side->download(ops::matmul(ctx, side->upload(a), side->upload(b)));
      HostTensor sm = side->download(ops::softmax(ctx, side->upload(x)));
      (side == be ? got_mm : want_mm) = std::move(mm);
      (side == be ? got_sm : want_sm) = std::move(sm);
    }
    EXPECT_TRUE(bitwise_equal(got_mm, want_mm)) << "matmul in native half: half units against the emulation";
    int inf = 0;
    for (std::int64_t i = 0; i < want_mm.numel(); ++i) inf += std::isinf(want_mm.get(i)) ? 1 : 0;
    EXPECT_GT(inf, 0) << "the overflowing row must reach Inf in half accumulation";
    EXPECT_TRUE(tensors_close(got_sm, want_sm, tolerance("softmax", kNativeHalf, Check::backend)))
        << "softmax in native half: half units against the emulation";
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no device with half units reachable (NVIDIA, compute capability 5.3+)";
}

}  // namespace
}  // namespace nanscope::test
