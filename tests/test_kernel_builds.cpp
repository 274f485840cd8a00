// Building many kernel programs at once (report R4's cold start): helper
// processes build a run's plan side by side and the run loads what they
// wrote, bit for bit what a build in the process gives; PoCL's launch-time
// specializations go into the binaries; the CPU family's programs hold only
// the kernels a default run can launch; failing helpers leave the builds to
// the run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/device.hpp"
#include "backend/opencl/cache_inventory.hpp"
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/kernel_builder.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "backend/opencl/program_cache.hpp"
#include "core/error.hpp"
#include "support/compare.hpp"
#include "support/oracle.hpp"
#include "support/program_cache_fixture.hpp"

namespace nanscope::opencl {
namespace {

using test::TempDir;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A plan of three small programs at f32 (build_planned builds what is not cached).
KernelPlan small_plan(OpenClBackend& be) {
  const Precision f32{DType::f32, Accumulate::f32, SoftmaxPrecision::f32};
  KernelPlan plan;
  for (const char* program : {"layer_norm", "elementwise", "timestep_embedding"}) {
    plan.items.push_back({program, be.program_options(program, f32), false, 0.0});
  }
  plan.to_build = plan.items.size();
  return plan;
}

// layer_norm over 3 rows of 37 values on `be`, downloaded.
HostTensor run_layer_norm(OpenClBackend& be) {
  std::vector<float> x(3 * 37);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f + 0.5f;
  const Tensor tx = be.upload(HostTensor::from_f32({3, 37}, x));
  Tensor out = be.empty({3, 37}, DType::f32);
  be.layer_norm(LayerNormArgs{tx, nullptr, nullptr, out, 3, 37, 1e-5f,
                              Precision{DType::f32, Accumulate::f32, SoftmaxPrecision::f32}});
  return be.download(out);
}

// A cold run's planned builds go to helper processes, one per core; the run
// loads the entries they wrote, and the programs compute what programs built
// in this process compute, bit for bit.
TEST_F(ProgramCacheTest, HelperProcessesBuildThePlanAndTheRunLoadsWhatTheyWrote) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: builds stay in the process";
  ASSERT_FALSE(kernel_builder_path().empty()) << "nanscope-kernel-builder is built at build/libexec/nanscope/";
  TempDir dir, here_dir;
  BackendOptions opts;
  opts.kernel_cache_dir = dir.path().string();
  OpenClBackend be(device_, opts);
  const KernelPlan plan = small_plan(be);
  EXPECT_GE(be.plan_kernels({}, {}).streams, 2u) << "the plan says the builds share the cores";
  be.build_planned(plan);
  const auto records = be.programs().records();
  ASSERT_EQ(records.size(), plan.items.size());
  for (const auto& r : records) {
    EXPECT_FALSE(r.cache_hit) << r.program;
    EXPECT_EQ(r.note, "built in a helper process") << r.program;
    const std::string key = be.programs().cache_key(ProgramCache::full_source(r.program), r.options);
    EXPECT_EQ(ProgramCache::check_entry(be.programs().entry_path(key), key), "") << r.program;
  }
  EXPECT_EQ(list_kernel_cache(dir.path().string()).size(), plan.items.size()) << "each entry with its metadata";

  HostTensor here;
  {
    ScopedEnv off("NANSCOPE_KERNEL_BUILDER", "0");
    BackendOptions here_opts;
    here_opts.kernel_cache_dir = here_dir.path().string();
    OpenClBackend in_process(device_, here_opts);
    in_process.build_planned(small_plan(in_process));
    for (const auto& r : in_process.programs().records()) EXPECT_EQ(r.note, "") << "NANSCOPE_KERNEL_BUILDER=0";
    here = run_layer_norm(in_process);
  }
  EXPECT_TRUE(test::bitwise_equal(run_layer_norm(be), here));

  // On PoCL's CPU device the helpers also compile the programs' one-work-item versions (below), where the
  // user turned PoCL's launch specialization on; by default it is off and the binary's versions are the ones run.
  if (device_.platform_name == "Portable Computing Language" && be.kernel_style() == KernelStyle::cpu) {
    {
      ScopedEnv on("POCL_WORK_GROUP_SPECIALIZATION", "1");
      EXPECT_EQ(be.binary_specializations("layer_norm"), "1-1-1-goffs0-smallgrid");
      EXPECT_EQ(be.binary_specializations("elementwise"), "") << "its group sizes follow the tensor sizes";
    }
    ScopedEnv off("POCL_WORK_GROUP_SPECIALIZATION", "0");
    EXPECT_EQ(be.binary_specializations("layer_norm"), "");
  }
}

// Device enumeration turns PoCL's per-launch specialization off before PoCL
// loads (device.hpp, pocl_specializes_launches) unless the environment set it.
TEST_F(ProgramCacheTest, PoclLaunchSpecializationIsOffUnlessTheUserSetIt) {
  const char* v = std::getenv("POCL_WORK_GROUP_SPECIALIZATION");
  ASSERT_NE(v, nullptr) << "enumerate_devices (SetUp) sets it";
  if (std::string_view(v) == "0") {
    EXPECT_FALSE(pocl_specializes_launches());
  }
  ScopedEnv on("POCL_WORK_GROUP_SPECIALIZATION", "1");
  EXPECT_TRUE(pocl_specializes_launches());
  enumerate_devices();
  EXPECT_STREQ(std::getenv("POCL_WORK_GROUP_SPECIALIZATION"), "1") << "a value the user set stays";
}

// The CPU family's kernels that run one work-item per group declare it
// (common.cl CPU_ONE_ITEM): the work-group function in the binary, which every
// launch runs with PoCL's specialization off, is then built for that size. The
// GPU family's programs leave the attribute out.
TEST_F(ProgramCacheTest, CpuFamilyWholeBlockKernelsAreBuiltForGroupsOfOne) {
  const std::pair<const char*, const char*> kernels[] = {
      {"matmul", "gemm_pack_a"},        {"matmul", "gemm_pack_b"},    {"matmul", "gemm_cpu"},
      {"matmul", "gemm_cpu_direct_a"},  {"matmul", "conv_cpu"},       {"conv2d", "conv_im2col_panels"},
      {"attention", "attn_pack_kt"},    {"attention", "attn_pack_v"}, {"attention", "attention_flash_cpu"},
      {"attention", "attention_fused"},
  };
  const Precision f32{DType::f32};
  for (const KernelStyle style : {KernelStyle::cpu, KernelStyle::gpu}) {
    BackendOptions opts;
    opts.use_kernel_cache = false;
    opts.kernel_style = style == KernelStyle::cpu ? KernelStyleChoice::cpu : KernelStyleChoice::gpu;
    OpenClBackend be(device_, opts);
    for (const auto& [program, name] : kernels) {
      const std::string_view n(name);
      if (style == KernelStyle::gpu &&
          (n == "gemm_cpu_direct_a" || n == "conv_cpu" || n.starts_with("attn_pack") || n == "attention_flash_cpu")) {
        continue;  // CPU family only
      }
      // attention_fused and the packed-A kernels: in the CPU family only in programs of their own
      // (-DATTN_FUSED, as attention.cpp's fused_options; -DGEMM_PACKED_A).
      std::string options = be.program_options(program, f32);
      if (n == "attention_fused" && style == KernelStyle::cpu) options += " -DATTN_FUSED";
      if (n == "gemm_pack_a" || n == "gemm_cpu") options = opencl::gemm::packed_a_options(be, f32);
      cl_kernel k = be.kernel(program, name, options);
      size_t compiled[3] = {7, 7, 7};
      ASSERT_EQ(clGetKernelWorkGroupInfo(k, static_cast<cl_device_id>(device_.cl_device),
                                         CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof(compiled), compiled, nullptr),
                CL_SUCCESS)
          << name;
      const size_t want = style == KernelStyle::cpu ? 1 : 0;  // 0: no reqd_work_group_size
      EXPECT_EQ(compiled[0], want) << program << " " << name;
      EXPECT_EQ(compiled[1], want) << program << " " << name;
      EXPECT_EQ(compiled[2], want) << program << " " << name;
    }
  }
}

// A default run builds only the kernels it can launch: the CPU family's f32
// programs leave out attention_fused (attention_flash_cpu takes every
// f32 attention, causal too) and the packed-A GEMM kernels, which are variants
// of their own that precompile() builds too.
TEST_F(ProgramCacheTest, CpuFamilyDefaultProgramsLeaveOutKernelsADefaultRunCannotLaunch) {
  BackendOptions opts;
  opts.use_kernel_cache = false;
  opts.kernel_style = KernelStyleChoice::cpu;
  OpenClBackend be(device_, opts);
  const Precision f32{DType::f32};
  EXPECT_ANY_THROW(be.kernel("attention", "attention_fused", be.program_options("attention", f32)));
  EXPECT_ANY_THROW(be.kernel("matmul", "gemm_cpu", be.program_options("matmul", f32)));
  EXPECT_ANY_THROW(be.kernel("matmul", "gemm_pack_a", be.program_options("matmul", f32)));
  EXPECT_NE(be.kernel("attention", "attention_flash_cpu", be.program_options("attention", f32)), nullptr);
  EXPECT_NE(be.kernel("matmul", "gemm_cpu_direct_a", be.program_options("matmul", f32)), nullptr);
  // The packed-A variant holds those two kernels and nothing else.
  const std::string packed = opencl::gemm::packed_a_options(be, f32);
  EXPECT_NE(be.kernel("matmul", "gemm_cpu", packed), nullptr);
  EXPECT_ANY_THROW(be.kernel("matmul", "gemm_cpu_direct_a", packed));
  const auto has = [](const std::vector<std::string>& v, const std::string& o) {
    return std::find(v.begin(), v.end(), o) != v.end();
  };
  EXPECT_TRUE(has(be.precompile_variants("matmul"), packed)) << "precompile builds the packed-A variant";
  bool fused_f32 = false;
  for (const std::string& o : be.precompile_variants("attention")) {
    fused_f32 = fused_f32 || (o.find("-DATTN_FUSED") != std::string::npos && o.find("NATIVE") == std::string::npos);
  }
  EXPECT_TRUE(fused_f32) << "precompile builds the f32 attention_fused variant";
}

// A helper asked for PoCL's one-work-item version of a program's kernels
// builds it into the binary, where the run would otherwise compile it at the
// first launch (kernel_builder.hpp, "Specializations"). Each helper gets an
// empty PoCL cache of its own: PoCL puts every version its cache holds into a
// binary.
TEST_F(ProgramCacheTest, HelperBuildsPoclsSpecializedKernelsIntoTheBinary) {
  if (device_.platform_name != "Portable Computing Language") GTEST_SKIP() << "PoCL only";
  const std::string exe = kernel_builder_path();
  ASSERT_FALSE(exe.empty());
  const std::string options = "-cl-std=CL1.2 -DSTORE_F32";
  // Asked for where the user turned PoCL's launch specialization on (it is off by default, and PoCL then
  // builds no specialized versions); the helpers inherit the environment.
  ScopedEnv launch_specialization("POCL_WORK_GROUP_SPECIALIZATION", "1");
  auto entry_bytes = [&](const std::string& specializations) {
    TempDir dir, pocl_cache;
    ScopedEnv pocl("POCL_CACHE_DIR", pocl_cache.path().string());
    std::string why;
    auto helper = KernelBuilderProcess::start(exe, device_, dir.path().string(), why);
    EXPECT_TRUE(helper) << why;
    const std::string key = cache(dir.path().string())->cache_key(ProgramCache::full_source("layer_norm"), options);
    EXPECT_EQ(helper ? helper->build("layer_norm", options, key, specializations) : why, "");
    const auto entries = list_kernel_cache(dir.path().string());
    return entries.size() == 1 ? entries[0].bytes : std::uint64_t{0};
  };
  const std::uint64_t plain = entry_bytes("");
  const std::uint64_t specialized = entry_bytes("1-1-1-goffs0-smallgrid");
  ASSERT_GT(plain, 0u);
  EXPECT_GT(specialized, plain + 1000) << "a second compiled version of layer_norm in the binary";
}

// The run's side of the protocol against the real helper: a program that does
// not exist is that build's error (the helper stays usable), a device the
// helper cannot find ends it, and every later build says so at once.
TEST_F(ProgramCacheTest, HelperReportsABadProgramAndAMissingDevice) {
  const std::string exe = kernel_builder_path();
  ASSERT_FALSE(exe.empty());
  TempDir dir;
  std::string why;
  auto helper = KernelBuilderProcess::start(exe, device_, dir.path().string(), why);
  ASSERT_TRUE(helper) << why;
  const std::string bad = helper->build("no_such_program", "-DX", std::string(64, '0'));
  EXPECT_NE(bad.find("no kernel program 'no_such_program'"), std::string::npos) << bad;
  auto cache = this->cache(dir.path().string());
  const std::string options = "-cl-std=CL1.2 -DSTORE_F32";
  const std::string key = cache->cache_key(ProgramCache::full_source("elementwise"), options);
  EXPECT_EQ(helper->build("elementwise", options, key), "");
  EXPECT_EQ(ProgramCache::check_entry(cache->entry_path(key), key), "");
  EXPECT_EQ(helper->build("elementwise", "a\tb", key), "the program name or options hold a tab or newline");

  DeviceInfo elsewhere = device_;
  elsewhere.id = "opencl:97:0";
  auto lost = KernelBuilderProcess::start(exe, elsewhere, dir.path().string(), why);
  ASSERT_TRUE(lost) << why;
  const std::string first = lost->build("elementwise", options, key);
  EXPECT_NE(first.find("no OpenCL device opencl:97:0"), std::string::npos) << first;
  EXPECT_EQ(lost->build("layer_norm", options, key), first) << "a helper that failed is not asked again";
}

// Helpers that fail in every way the run can see: the run builds those
// programs itself, says why in its log, and loses nothing but the parallelism.
TEST_F(ProgramCacheTest, FailingHelpersLeaveTheBuildsToTheRun) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: builds stay in the process";
  TempDir scripts;
  const std::string ready = "printf 'READY\\t%s\\t%s\\n' \"$NS_TEST_DEVICE\" \"$NS_TEST_DRIVER\"\n";
  const std::vector<std::pair<std::string, std::string>> helpers = {
      {"exit 0\n", "it ended"},
      {ready + "while read line; do printf 'OK\\t%064d\\t1\\n' 0; done\n", "it wrote cache key 0000"},
      {"printf 'READY\\tSome Other GPU\\tx\\n'\nwhile read line; do :; done\n", "not \"" + device_.name + "\""},
      {ready + "while read line; do echo 'what?'; done\n", "it answered \"what?\" to a build"},
      {ready + "read line; kill -9 $$\n", "it ended while building"},
  };
  ScopedEnv device_name("NS_TEST_DEVICE", device_.name);
  ScopedEnv driver("NS_TEST_DRIVER", device_.driver_version);
  log::set_level("debug");
  for (std::size_t i = 0; i < helpers.size(); ++i) {
    const fs::path script = scripts.path() / ("helper" + std::to_string(i) + ".sh");
    std::ofstream(script) << "#!/bin/sh\n" << helpers[i].first;
    fs::permissions(script, fs::perms::owner_all);
    ScopedEnv use("NANSCOPE_KERNEL_BUILDER", script.string());
    TempDir dir;
    BackendOptions opts;
    opts.kernel_cache_dir = dir.path().string();
    OpenClBackend be(device_, opts);
    LogCapture log;
    be.build_planned(small_plan(be));
    const auto records = be.programs().records();
    EXPECT_EQ(records.size(), 3u) << helpers[i].first;
    for (const auto& r : records) EXPECT_EQ(r.note, "") << r.program << ": built here, " << helpers[i].first;
    EXPECT_NE(log.text().find(helpers[i].second), std::string::npos) << helpers[i].first << "\nlog:\n" << log.text();
    EXPECT_EQ(run_layer_norm(be).shape, (Shape{3, 37}));
  }
  log::set_level("info");
}

}  // namespace
}  // namespace nanscope::opencl
