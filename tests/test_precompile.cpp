// `nanscope-cli precompile` builds what runs will ask for (report R4): on a
// GPU the GEMM tiles, the tensor cores' blocks and the flash tiles follow each
// call's shape, so precompile plans for calls of every shape those choices
// tell apart (OpenClBackend::precompile_variants, precompile_calls). Checked
// here without building anything: every variant the calls of real runs take
// (the embedded model's dry runs at two sizes, every precision and attention
// implementation; SD 1.5's UNet shapes) is among precompile's, in each kernel
// family, with the tensor cores emulated too. And the kernel plan names the
// program a convolution really builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../bench/unet_shapes.hpp"
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "ops/ops.hpp"
#include "pipeline/memory_plan.hpp"
#include "pipeline/session.hpp"
#include "support/backends.hpp"

namespace nanscope {
namespace {

using opencl::OpenClBackend;

struct Family {
  const char* name;
  KernelStyleChoice style;
  bool emulate_tensor_cores;
};
constexpr Family kFamilies[] = {{"cpu", KernelStyleChoice::cpu, false},
                                {"gpu", KernelStyleChoice::gpu, false},
                                {"gpu, tensor cores emulated", KernelStyleChoice::gpu, true}};

BackendOptions family_options(const Family& f) {
  BackendOptions o;
  o.use_kernel_cache = false;
  o.kernel_style = f.style;
  o.emulate_tensor_cores = f.emulate_tensor_cores;
  return o;
}

const std::vector<Precision>& run_precisions() {
  static const std::vector<Precision> ps = {
      {DType::f32},
      {DType::f16},
      {DType::bf16},
      {DType::f16, Accumulate::native, SoftmaxPrecision::f32},
      {DType::f16, Accumulate::f32, SoftmaxPrecision::native},
      {DType::bf16, Accumulate::native, SoftmaxPrecision::native},
  };
  return ps;
}

constexpr AttentionImpl kImpls[] = {AttentionImpl::fused, AttentionImpl::bmm, AttentionImpl::sliced};

// Every variant `calls` take that precompile does not build, as "program: options" lines.
std::vector<std::string> missing_from_precompile(OpenClBackend& be, const KernelCalls& calls) {
  std::vector<std::string> missing;
  for (const auto& [program, variants] : be.call_variants(calls)) {
    const std::vector<std::string> built = be.precompile_variants(program);
    for (const std::string& o : variants) {
      if (std::find(built.begin(), built.end(), o) == built.end()) missing.push_back(program + ": " + o);
    }
  }
  return missing;
}

// The first OpenCL test device's backend (its device for backends of other families), or null.
OpenClBackend* first_opencl_backend() {
  for (Backend* b : test::opencl_backends()) {
    if (auto* be = dynamic_cast<OpenClBackend*>(b)) return be;
  }
  return nullptr;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += "  " + l + "\n";
  return s;
}

TEST(Precompile, BuildsEveryVariantTheEmbeddedModelsRunsTake) {
  for (const Family& f : kFamilies) {
    pipeline::Session session(family_options(f));
    int checked = 0;
    for (const Precision& p : run_precisions()) {
      RunConfig cfg;
      for (Component c : kComponents) cfg.component(c).precision = p;
      pipeline::SdModel& m = session.model(cfg);  // its weights in p's dtype
      auto* be = dynamic_cast<OpenClBackend*>(&session.backend(cfg.device));
      if (be == nullptr) GTEST_SKIP() << test::no_opencl_message();
      for (AttentionImpl impl : kImpls) {
        for (int size : {64, 256}) {
          OpContext ctx;
          ctx.backend = be;
          ctx.precision = p;
          ctx.attention.impl = impl;
          pipeline::PlanRequest r{&m, ctx, ctx, size, size, true, 0};
          r.text_encoder = &ctx;
          KernelCalls calls;
          pipeline::plan_memory(r, &calls);
          ASSERT_TRUE(calls.recorded);
          ASSERT_FALSE(calls.gemm.empty() || calls.conv.empty() || calls.attention.empty());
          const std::vector<std::string> missing = missing_from_precompile(*be, calls);
          EXPECT_TRUE(missing.empty()) << f.name << " family, " << p.describe() << ", " << attention_impl_name(impl)
                                       << ", " << size << "x" << size << ": variants precompile does not build:\n"
                                       << lines(missing);
          ++checked;
        }
      }
    }
    EXPECT_EQ(checked, static_cast<int>(run_precisions().size() * std::size(kImpls) * 2));
  }
}

// SD 1.5's UNet call (bench/unet_shapes.hpp: every distinct conv, linear and attention shape) at 512x512 and
// 1024x1024, as the dry run records it.
KernelCalls sd15_calls(const Precision& p, AttentionImpl impl, std::int64_t latent) {
  KernelCalls calls;
  calls.recorded = true;
  for (const bench::OpShape& s : bench::sd15_unet_shapes(latent)) {
    const auto& q = s.p;
    if (s.kind == "conv") {  // n c h w o k stride
      const std::int64_t oh = q[2] / q[6], ow = q[3] / q[6];
      if (q[5] == 1 && q[6] == 1) {
        KernelCalls::add(calls.gemm, {p, q[0], q[4], oh * ow, q[1]});
      } else {
        KernelCalls::add(calls.conv, {p, q[0], q[4], oh * ow, q[1] * q[5] * q[5], q[1], q[5], q[5], q[6], oh, ow});
      }
    } else if (s.kind == "linear") {  // rows in out
      KernelCalls::add(calls.gemm, {p, 1, q[0], q[2], q[1]});
    } else {  // b sq sk heads d
      KernelCalls::add(calls.attention, {p, q[0], q[3], q[1], q[2], q[4], q[4], false, impl});
    }
  }
  return calls;
}

TEST(Precompile, BuildsEveryVariantAnSd15UnetCallTakes) {
  for (const Family& f : kFamilies) {
    OpenClBackend* be = first_opencl_backend();
    if (be == nullptr) GTEST_SKIP() << test::no_opencl_message();
    OpenClBackend family(be->device(), family_options(f));
    for (const Precision& p : run_precisions()) {
      for (AttentionImpl impl : kImpls) {
        for (std::int64_t latent : {64, 128}) {
          const std::vector<std::string> missing = missing_from_precompile(family, sd15_calls(p, impl, latent));
          EXPECT_TRUE(missing.empty()) << f.name << " family, " << p.describe() << ", " << attention_impl_name(impl)
                                       << ", latent " << latent << ": variants precompile does not build:\n"
                                       << lines(missing);
        }
      }
    }
  }
}

// A 3x3 convolution of 4 input channels (a UNet's first layer) in f16 on a device with tensor cores: the
// GEMM of its size would take them, the convolution runs conv_implicit_gemm (conv_implicit_mma walks whole
// blocks of 32 channels). The kernel plan lists the program it builds, so a planned run builds nothing more.
TEST(Precompile, TheKernelPlanNamesTheProgramAConvolutionOfFewChannelsBuilds) {
  OpenClBackend* any = first_opencl_backend();
  if (any == nullptr) GTEST_SKIP() << test::no_opencl_message();
  OpenClBackend be(any->device(), family_options(kFamilies[2]));
  const Precision f16{DType::f16};
  KernelCalls calls;
  calls.recorded = true;
  KernelCalls::add(calls.conv, {f16, 1, 64, 16 * 16, 4 * 9, 4, 3, 3, 1, 16, 16});
  const std::vector<std::string> planned = be.call_variants(calls)["matmul"];
  ASSERT_EQ(planned.size(), 1u);
  EXPECT_EQ(planned[0].find("-DGEMM_MMA"), std::string::npos)
      << "4 input channels never take the tensor cores: " << planned[0];

  OpContext ctx;
  ctx.backend = &be;
  ctx.precision = f16;
  std::vector<float> xs(4 * 16 * 16), ws(64 * 4 * 9);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) * 0.125f - 0.375f;
  for (std::size_t i = 0; i < ws.size(); ++i) ws[i] = static_cast<float>(i % 5) * 0.0625f - 0.125f;
  const Tensor x = be.upload(HostTensor::from_f32({1, 4, 16, 16}, xs, DType::f16));
  const Tensor w = be.upload(HostTensor::from_f32({64, 4, 3, 3}, ws, DType::f16));
  const Tensor y = ops::conv2d(ctx, x, w, nullptr, 1, 1);
  EXPECT_EQ(y.shape(), (Shape{1, 64, 16, 16}));
  be.synchronize();
  std::vector<std::string> built;
  for (const KernelBuildRecord& r : be.kernel_builds()) {
    if (r.program == "matmul") built.push_back(r.options);
  }
  EXPECT_EQ(built, planned) << "the convolution built another matmul variant than the plan lists";
}

}  // namespace
}  // namespace nanscope
