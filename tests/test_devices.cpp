// Device enumeration, the default rule and pinning (report R3), in process and
// through nanscope-cli (the ICD loader reads OCL_ICD_VENDORS once per process,
// so "no OpenCL at all" is tested in a child process).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"
#include "support/backends.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

using test::ProcessResult;
using test::run_process;
using test::TempDir;

ProcessResult run_cli(const std::vector<std::string>& env, const std::vector<std::string>& args) {
  // `env` sets variables for the child only; the test process keeps its own ICD loader state.
  std::vector<std::string> argv{"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(NANSCOPE_CLI_PATH);
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv);
}

const DeviceInfo* first_opencl(const DeviceList& list) {
  for (const auto& d : list.devices) {
    if (test::is_test_device(d)) return &d;
  }
  return nullptr;
}

// Oclgrind's ICD library where Debian installs it (tools/setup.sh), or "".
std::string oclgrind_library() {
  const char* path = "/usr/lib/oclgrind/liboclgrind-rt-icd.so";
  return std::filesystem::exists(path) ? path : "";
}

TEST(Devices, ReferenceIsAlwaysListedLast) {
  const DeviceList list = enumerate_devices();
  ASSERT_FALSE(list.devices.empty());
  const DeviceInfo& ref = list.devices.back();
  EXPECT_EQ(ref.kind, DeviceKind::reference);
  EXPECT_EQ(ref.id, "reference");
  EXPECT_EQ(ref.name, "reference");
  EXPECT_EQ(ref.cl_device, nullptr);
  int defaults = 0;
  for (std::size_t i = 0; i < list.devices.size(); ++i) {
    const DeviceInfo& d = list.devices[i];
    EXPECT_EQ(d.index, static_cast<int>(i));
    EXPECT_FALSE(d.name.empty()) << d.id;
    // Every device says why it is or is not the default, in one line.
    EXPECT_EQ(d.reason.rfind(d.is_default ? "default: " : "not default: ", 0), 0u) << d.id << ": " << d.reason;
    EXPECT_EQ(d.reason.find('\n'), std::string::npos) << d.reason;
    defaults += d.is_default ? 1 : 0;
    if (d.kind != DeviceKind::reference) {
      EXPECT_EQ(d.id.rfind("opencl:", 0), 0u) << d.id;
      EXPECT_NE(d.cl_device, nullptr) << d.id;
      EXPECT_FALSE(d.driver_version.empty()) << d.id;
      EXPECT_FALSE(d.opencl_c_version.empty()) << d.id;
      EXPECT_GT(d.global_mem_bytes, 0u) << d.id;
      EXPECT_GT(d.max_alloc_bytes, 0u) << d.id;
      EXPECT_GT(d.compute_units, 0u) << d.id;
      const bool has_fp16 = std::find(d.extensions.begin(), d.extensions.end(), "cl_khr_fp16") != d.extensions.end();
      EXPECT_EQ(d.fp16, has_fp16) << d.id << ": fp16 must be probed from the extension list";
    }
  }
  EXPECT_EQ(defaults, 1);
}

TEST(Devices, DefaultFollowsGpuAcceleratorCpuReference) {
  const DeviceList list = enumerate_devices();
  const DeviceInfo* expected = nullptr;
  for (DeviceKind k : {DeviceKind::gpu, DeviceKind::accelerator, DeviceKind::cpu, DeviceKind::reference}) {
    for (const auto& d : list.devices) {
      if (d.kind == k) {
        expected = &d;
        break;
      }
    }
    if (expected) break;
  }
  ASSERT_NE(expected, nullptr);
  EXPECT_TRUE(expected->is_default) << expected->id;
  EXPECT_EQ(&select_device(list, ""), expected);
}

TEST(Devices, PinByIndexIdNameAndSubstring) {
  const DeviceList list = enumerate_devices();
  for (const auto& d : list.devices) {
    EXPECT_EQ(select_device(list, std::to_string(d.index)).index, d.index);
    EXPECT_EQ(select_device(list, d.id).index, d.index);
    EXPECT_EQ(select_device(list, "  " + d.id + " ").index, d.index) << "surrounding spaces are ignored";
    int same_name = 0;
    for (const auto& o : list.devices) same_name += o.name == d.name ? 1 : 0;
    if (same_name == 1) {
      EXPECT_EQ(select_device(list, d.name).index, d.index);
    }
  }
  // Case-insensitive substring: "REFEREN" finds the reference device unless another name contains it.
  int matches = 0;
  for (const auto& d : list.devices) {
    std::string lower = d.name;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    matches += lower.find("referen") != std::string::npos ? 1 : 0;
  }
  if (matches == 1) {
    EXPECT_EQ(select_device(list, "REFEREN").kind, DeviceKind::reference);
  }
}

TEST(Devices, MissingPinIsAnErrorListingEveryDevice) {
  const DeviceList list = enumerate_devices();
  for (const std::string pin : {"no-such-device-xyz", "99", "opencl:9:9"}) {
    try {
      select_device(list, pin);
      FAIL() << "pin '" << pin << "' must not resolve";
    } catch (const DeviceError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("\"" + pin + "\""), std::string::npos) << what;
      for (const auto& d : list.devices) {
        EXPECT_NE(what.find(d.id), std::string::npos) << what;
        EXPECT_NE(what.find(d.name), std::string::npos) << what;
      }
      EXPECT_NE(what.find("--device"), std::string::npos) << what;
      EXPECT_NE(what.find("NANSCOPE_DEVICE"), std::string::npos) << what;
    }
  }
}

TEST(Devices, AmbiguousSubstringAndDuplicateNamesAreErrors) {
  // A synthetic list: two GPUs of one model, as in a multi-GPU workstation.
  DeviceList list;
  for (int i = 0; i < 2; ++i) {
    DeviceInfo d;
    d.index = i;
    d.id = "opencl:0:" + std::to_string(i);
    d.name = "Example GPU 9000";
    d.kind = DeviceKind::gpu;
    d.is_default = i == 0;
    list.devices.push_back(d);
  }
  DeviceInfo ref;
  ref.index = 2;
  ref.id = ref.name = "reference";
  ref.kind = DeviceKind::reference;
  list.devices.push_back(ref);

  EXPECT_THROW(select_device(list, "example"), DeviceError);
  EXPECT_THROW(select_device(list, "Example GPU 9000"), DeviceError);
  try {
    select_device(list, "gpu");
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("matches 2 devices"), std::string::npos) << e.what();
  }
  // Index and id still tell the twins apart.
  EXPECT_EQ(select_device(list, "1").id, "opencl:0:1");
  EXPECT_EQ(select_device(list, "opencl:0:1").index, 1);
  EXPECT_EQ(select_device(list, "").index, 0);
}

TEST(Devices, PinFromEnvironment) {
  ::setenv("NANSCOPE_DEVICE", " reference ", 1);
  EXPECT_EQ(device_pin_from_env(), "reference");
  ::unsetenv("NANSCOPE_DEVICE");
  EXPECT_EQ(device_pin_from_env(), "");
}

// The engine reads no NANSCOPE_* backend variable itself: the front ends turn
// the environment into BackendOptions once, and bad values are ignored.
TEST(Devices, BackendOptionsFromTheEnvironment) {
  for (const char* v : {"NANSCOPE_POOL_MB", "NANSCOPE_WEIGHT_PANELS_MB", "NANSCOPE_PROFILE", "NANSCOPE_KERNEL_STYLE",
                        "NANSCOPE_ATTENTION_CPU_ROWS", "NANSCOPE_ATTENTION_CPU_LANES"})
    unsetenv(v);
  BackendOptions o = backend_options_from_environment();
  EXPECT_FALSE(o.pool_keep_bytes.has_value());
  EXPECT_FALSE(o.weight_panel_bytes.has_value());
  EXPECT_FALSE(o.profile);
  EXPECT_EQ(o.kernel_style, KernelStyleChoice::by_device);
  EXPECT_EQ(o.attention_cpu_rows, 0);
  EXPECT_EQ(o.attention_cpu_lanes, 0);
  setenv("NANSCOPE_POOL_MB", "12", 1);
  setenv("NANSCOPE_WEIGHT_PANELS_MB", "0", 1);
  setenv("NANSCOPE_PROFILE", "1", 1);
  setenv("NANSCOPE_KERNEL_STYLE", "gpu", 1);
  setenv("NANSCOPE_ATTENTION_CPU_ROWS", "16", 1);
  setenv("NANSCOPE_ATTENTION_CPU_LANES", "8", 1);
  BackendOptions base;
  base.kernel_cache_dir = "/somewhere";
  o = backend_options_from_environment(base);
  EXPECT_EQ(o.pool_keep_bytes, std::uint64_t{12} << 20);
  EXPECT_EQ(o.weight_panel_bytes, std::uint64_t{0});  // 0: packed at every call
  EXPECT_TRUE(o.profile);
  EXPECT_EQ(o.kernel_style, KernelStyleChoice::gpu);
  EXPECT_EQ(o.attention_cpu_rows, 16);
  EXPECT_EQ(o.attention_cpu_lanes, 8);
  EXPECT_FALSE(o.profile_grids);
  EXPECT_EQ(o.kernel_cache_dir, "/somewhere");  // the base is kept
  setenv("NANSCOPE_PROFILE", "grid", 1);
  o = backend_options_from_environment();
  EXPECT_TRUE(o.profile);
  EXPECT_TRUE(o.profile_grids);
  setenv("NANSCOPE_POOL_MB", "lots", 1);
  setenv("NANSCOPE_WEIGHT_PANELS_MB", "-3", 1);
  setenv("NANSCOPE_KERNEL_STYLE", "fast", 1);
  setenv("NANSCOPE_ATTENTION_CPU_ROWS", "12", 1);
  setenv("NANSCOPE_ATTENTION_CPU_LANES", "4", 1);
  setenv("NANSCOPE_PROFILE", "often", 1);
  o = backend_options_from_environment();
  EXPECT_FALSE(o.profile);
  EXPECT_FALSE(o.profile_grids);
  EXPECT_FALSE(o.pool_keep_bytes.has_value());
  EXPECT_FALSE(o.weight_panel_bytes.has_value());
  EXPECT_EQ(o.kernel_style, KernelStyleChoice::by_device);
  EXPECT_EQ(o.attention_cpu_rows, 0) << "12 is no geometry: by the device";
  EXPECT_EQ(o.attention_cpu_lanes, 0) << "4 lanes is no geometry: by the device";
  for (const char* v : {"NANSCOPE_POOL_MB", "NANSCOPE_WEIGHT_PANELS_MB", "NANSCOPE_PROFILE", "NANSCOPE_KERNEL_STYLE",
                        "NANSCOPE_ATTENTION_CPU_ROWS", "NANSCOPE_ATTENTION_CPU_LANES"})
    unsetenv(v);
  // NANSCOPE_TENSOR_CORES=0|1 (anything else is ignored): NVIDIA tensor cores for f16 GEMMs.
  unsetenv("NANSCOPE_TENSOR_CORES");
  EXPECT_TRUE(backend_options_from_environment().tensor_cores);
  setenv("NANSCOPE_TENSOR_CORES", "0", 1);
  EXPECT_FALSE(backend_options_from_environment().tensor_cores);
  setenv("NANSCOPE_TENSOR_CORES", "off", 1);
  EXPECT_TRUE(backend_options_from_environment().tensor_cores);
  setenv("NANSCOPE_TENSOR_CORES", "1", 1);
  BackendOptions no_tc;
  no_tc.tensor_cores = false;
  EXPECT_TRUE(backend_options_from_environment(no_tc).tensor_cores);
  unsetenv("NANSCOPE_TENSOR_CORES");
  // A backend made without options does not look at the environment.
  setenv("NANSCOPE_KERNEL_STYLE", "gpu", 1);
  for (const DeviceInfo& d : enumerate_devices().devices) {
    if (d.kind != DeviceKind::cpu) continue;
    auto be = make_backend(d);
    EXPECT_EQ(static_cast<opencl::OpenClBackend&>(*be).kernel_style(), opencl::KernelStyle::cpu) << d.name;
  }
  unsetenv("NANSCOPE_KERNEL_STYLE");
}

TEST(Devices, ReferenceBackendFromTheList) {
  const DeviceList list = enumerate_devices();
  auto be = make_backend(select_device(list, "reference"));
  EXPECT_EQ(be->device().kind, DeviceKind::reference);
  const HostTensor h = HostTensor::from_f32({3}, {1.0f, -2.0f, 65504.0f}, DType::f16);
  EXPECT_EQ(be->download(be->upload(h)).data, h.data);
}

TEST(Devices, OpenClBackendRoundTripAndAllocationLimit) {
  const DeviceList list = enumerate_devices();
  const DeviceInfo* dev = first_opencl(list);
  if (!dev) GTEST_SKIP() << "no OpenCL device found (install pocl-opencl-icd to run OpenCL tests)";
  TempDir cache;
  BackendOptions opts;
  opts.kernel_cache_dir = cache.path().string();
  auto be = make_backend(*dev, opts);
  EXPECT_EQ(be->device().id, dev->id);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const HostTensor h = HostTensor::from_f32({2, 3}, {0.5f, -1.0f, 3.0f, 1e30f, -0.0f, 7.25f}, t);
    const Tensor d = be->upload(h);
    EXPECT_TRUE(be->owns(d));
    EXPECT_EQ(be->download(d).data, h.data) << dtype_name(t);
  }
  // An empty tensor is a valid tensor.
  EXPECT_EQ(be->download(be->empty({0, 4}, DType::f32)).data.size(), 0u);

  // Beyond CL_DEVICE_MAX_MEM_ALLOC_SIZE: a DeviceError naming size, limit and device, before any driver call.
  const std::int64_t too_many = static_cast<std::int64_t>(dev->max_alloc_bytes / 4 + 1);
  try {
    be->empty({too_many}, DType::f32);
    FAIL() << "allocation above the device limit must fail";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CL_DEVICE_MAX_MEM_ALLOC_SIZE"), std::string::npos) << what;
    EXPECT_NE(what.find(dev->name), std::string::npos) << what;
    EXPECT_NE(what.find("MiB"), std::string::npos) << what;
  }

  // Tensors never cross devices silently.
  auto ref = make_backend(list.devices.back());
  const Tensor on_ref = ref->upload(HostTensor::from_f32({2}, {1.0f, 2.0f}));
  EXPECT_THROW(be->download(on_ref), OpError);
}

TEST(Devices, PrecisionOptionsAreExactAndIeee) {
  const DeviceList list = enumerate_devices();
  const DeviceInfo* dev = first_opencl(list);
  if (!dev) GTEST_SKIP() << "no OpenCL device found (install pocl-opencl-icd to run OpenCL tests)";
  BackendOptions opts;
  opts.use_kernel_cache = false;
  opencl::OpenClBackend be(*dev, opts);
  const std::string fp16 = dev->fp16 ? " -DHAS_FP16" : "";
  // What a device adds on top: its half units where native half arithmetic runs
  // on them (an NVIDIA GPU: -DHW_HALF_PTX ...), and the GPU family's f16
  // conversion instructions.
  const auto device_part = [&](const Precision& p) {
    std::string o = fp16;
    if (be.native_half_in_hardware(p)) o += " " + be.half_unit_options();
    if (be.kernel_style() == opencl::KernelStyle::gpu && p.dtype == DType::f16) o += " -DF16_CVT";
    return o;
  };
  const std::string std_opt = be.precision_options(Precision{}).substr(0, 13);
  EXPECT_EQ(std_opt.rfind("-cl-std=CL1.", 0), 0u);
  const Precision f32_native{DType::f32, Accumulate::native, SoftmaxPrecision::native};
  const Precision f16_acc_native{DType::f16, Accumulate::native, SoftmaxPrecision::f32};
  const Precision bf16_softmax_native{DType::bf16, Accumulate::f32, SoftmaxPrecision::native};
  EXPECT_EQ(be.precision_options(f32_native), std_opt + " -DSTORE_F32" + device_part(f32_native));
  EXPECT_EQ(be.precision_options(f16_acc_native), std_opt + " -DSTORE_F16 -DACC_NATIVE" + device_part(f16_acc_native));
  EXPECT_EQ(be.precision_options(bf16_softmax_native),
            std_opt + " -DSTORE_BF16 -DSOFTMAX_NATIVE" + device_part(bf16_softmax_native));
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const std::string o = be.precision_options(Precision{t, Accumulate::native, SoftmaxPrecision::native});
    EXPECT_EQ(o.find("fast-relaxed"), std::string::npos) << o;
    EXPECT_EQ(o.find("mad-enable"), std::string::npos) << o;
  }
}

// --- through the CLI ---

TEST(Cli, VersionNamesTheProgramTheVersionAndTheCommit) {
  // The commit is linked into the programs only (core/version.hpp): this test
  // sees none itself, the CLI names the source tree's when it is a git checkout.
  const bool from_git = std::filesystem::exists(std::filesystem::path(NANSCOPE_SOURCE_DIR) / ".git");
  const std::regex line(std::string("nanscope-cli ") + NANSCOPE_VERSION + "( \\(git [0-9a-f]{7,40}\\))?\n");
  // The same line whether --version comes alone or after a subcommand.
  for (const auto& args : {std::vector<std::string>{"--version"}, std::vector<std::string>{"devices", "--version"}}) {
    const ProcessResult r = run_cli({}, args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(std::regex_match(r.out, line)) << r.out;
    if (from_git) {
      EXPECT_NE(r.out.find(" (git "), std::string::npos) << r.out;
    }
  }
}

TEST(DevicesCli, ListsDevicesAndDefault) {
  const DeviceList list = enumerate_devices();
  const ProcessResult r = run_cli({"-u", "NANSCOPE_DEVICE"}, {"devices"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& d : list.devices) {
    EXPECT_NE(r.out.find(d.id), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(d.reason), std::string::npos) << r.out;
  }

  const ProcessResult j = run_cli({"-u", "NANSCOPE_DEVICE"}, {"devices", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["devices"].size(), list.devices.size());
  for (std::size_t i = 0; i < list.devices.size(); ++i) {
    EXPECT_EQ(doc["devices"][i]["id"], list.devices[i].id);
    EXPECT_EQ(doc["devices"][i]["default"], list.devices[i].is_default);
    EXPECT_EQ(doc["devices"][i]["fp16"], list.devices[i].fp16);
  }
  EXPECT_TRUE(doc["pinned"].is_null());
}

TEST(DevicesCli, WithoutAnyOpenClPlatformOnlyReferenceAndANote) {
  TempDir empty_vendors;
  for (const std::string fmt : {"text", "json"}) {
    std::vector<std::string> args{"devices"};
    if (fmt == "json") args.push_back("--json");
    const ProcessResult r = run_cli(
        {"-u", "NANSCOPE_DEVICE", "OCL_ICD_VENDORS=" + empty_vendors.path().string(), "NANSCOPE_OCLGRIND=0"}, args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("opencl:"), std::string::npos) << r.out;
    if (fmt == "text") {
      EXPECT_NE(r.out.find("No OpenCL platform found"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("reference"), std::string::npos) << r.out;
    } else {
      const auto doc = nlohmann::json::parse(r.out);
      ASSERT_EQ(doc["devices"].size(), 1u);
      EXPECT_EQ(doc["devices"][0]["id"], "reference");
      EXPECT_EQ(doc["devices"][0]["default"], true);
      ASSERT_FALSE(doc["notes"].empty());
      EXPECT_NE(doc["notes"][0].get<std::string>().find("pocl-opencl-icd"), std::string::npos);
    }
  }
}

// Oclgrind ships no .icd file on Debian: NaNscope loads its ICD library itself,
// lists it after the loader's devices as a simulator, and never makes it the default.
TEST(Devices, ASimulatorIsListedButNeverTheDefault) {
  const DeviceList list = enumerate_devices();
  const DeviceInfo* sim = nullptr;
  for (const auto& d : list.devices) {
    if (d.kind == DeviceKind::simulator) sim = &d;
  }
  if (!sim) GTEST_SKIP() << "no simulator device (install oclgrind: tools/setup.sh)";
  EXPECT_FALSE(sim->is_default);
  EXPECT_EQ(sim->reason.rfind("not default: a simulator", 0), 0u) << sim->reason;
  EXPECT_EQ(sim->platform_name.rfind("Oclgrind", 0), 0u) << sim->platform_name;
  EXPECT_NE(select_device(list, "").kind, DeviceKind::simulator);
  EXPECT_EQ(&select_device(list, sim->id), sim);  // pinning it works
  // The real devices come first: their ids do not depend on whether Oclgrind is installed.
  for (const auto& d : list.devices) {
    if (test::is_test_device(d)) {
      EXPECT_LT(d.index, sim->index) << d.id;
    }
  }
}

TEST(DevicesCli, OclgrindIsFoundWithoutAnIcdFileAndCanBeTurnedOff) {
  const std::string lib = oclgrind_library();
  if (lib.empty()) GTEST_SKIP() << "oclgrind is not installed (tools/setup.sh installs it)";
  TempDir empty_vendors;
  const std::string vendors = "OCL_ICD_VENDORS=" + empty_vendors.path().string();
  for (const std::string& setting : {std::string(), lib}) {
    // env takes its -u options before the first NAME=VALUE.
    const std::vector<std::string> env =
        setting.empty() ? std::vector<std::string>{"-u", "NANSCOPE_DEVICE", "-u", "NANSCOPE_OCLGRIND", vendors}
                        : std::vector<std::string>{"-u", "NANSCOPE_DEVICE", vendors, "NANSCOPE_OCLGRIND=" + setting};
    const ProcessResult r = run_cli(env, {"devices", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    ASSERT_EQ(doc["devices"].size(), 2u) << r.out;
    EXPECT_EQ(doc["devices"][0]["id"], "opencl:0:0");
    EXPECT_EQ(doc["devices"][0]["kind"], "simulator");
    EXPECT_EQ(doc["devices"][0]["platform_name"], "Oclgrind");
    EXPECT_EQ(doc["devices"][0]["default"], false);
    EXPECT_EQ(doc["devices"][1]["id"], "reference");
    EXPECT_EQ(doc["devices"][1]["default"], true);
  }
  const ProcessResult text = run_cli({"-u", "NANSCOPE_DEVICE", "-u", "NANSCOPE_OCLGRIND", vendors}, {"devices"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("[simulator]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("not default: a simulator"), std::string::npos) << text.out;

  const ProcessResult off = run_cli({"-u", "NANSCOPE_DEVICE", vendors, "NANSCOPE_OCLGRIND=0"}, {"devices", "--json"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(nlohmann::json::parse(off.out)["devices"].size(), 1u) << off.out;

  const ProcessResult missing =
      run_cli({"-u", "NANSCOPE_DEVICE", vendors, "NANSCOPE_OCLGRIND=/no/such/liboclgrind.so"}, {"devices", "--json"});
  ASSERT_EQ(missing.exit_code, 0) << missing.err;
  const auto doc = nlohmann::json::parse(missing.out);
  EXPECT_EQ(doc["devices"].size(), 1u) << missing.out;
  EXPECT_NE(doc["notes"].dump().find("NANSCOPE_OCLGRIND=/no/such/liboclgrind.so"), std::string::npos) << missing.out;
}

// Report R3 through the ICD loader itself: a vendors folder with PoCL's and
// Oclgrind's .icd files (as a machine where someone added oclgrind.icd would
// have). Oclgrind reports GPU, CPU and accelerator at once; the loader lists
// it beside PoCL's CPU device, and the default must still be the real device,
// with the simulator ranked last and the reason given.
TEST(DevicesCli, ASimulatorThroughTheIcdLoaderRanksLastWithItsReason) {
  const std::string oclgrind = oclgrind_library();
  std::string pocl;
  if (std::ifstream in("/etc/OpenCL/vendors/pocl.icd"); in) std::getline(in, pocl);
  if (oclgrind.empty() || pocl.empty()) GTEST_SKIP() << "needs oclgrind and pocl-opencl-icd (tools/setup.sh)";
  TempDir vendors;
  // Named so that a loader reading the folder in order meets the simulator first.
  std::ofstream(vendors.path() / "0-oclgrind.icd") << oclgrind << "\n";
  std::ofstream(vendors.path() / "1-pocl.icd") << pocl << "\n";
  const ProcessResult r =
      run_cli({"-u", "NANSCOPE_DEVICE", "-u", "NANSCOPE_OCLGRIND", "OCL_ICD_VENDORS=" + vendors.path().string()},
              {"devices", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  const nlohmann::json* sim = nullptr;
  const nlohmann::json* chosen = nullptr;
  int simulators = 0;
  for (const auto& d : doc["devices"]) {
    if (d["kind"] == "simulator") {
      sim = &d;
      ++simulators;
    }
    if (d["default"] == true) chosen = &d;
  }
  ASSERT_NE(sim, nullptr) << "the loader did not list Oclgrind from the .icd file: " << r.out;
  EXPECT_EQ(simulators, 1) << "Oclgrind listed by the loader must not be loaded a second time: " << r.out;
  ASSERT_NE(chosen, nullptr) << r.out;
  EXPECT_NE((*chosen)["kind"], "simulator") << r.out;
  EXPECT_NE((*chosen)["kind"], "reference") << "PoCL's device is real and must be the default: " << r.out;
  EXPECT_EQ((*chosen)["suspect"], "") << r.out;
  EXPECT_EQ((*sim)["default"], false);
  const std::string reason = (*sim)["reason"];
  EXPECT_EQ(reason.rfind("not default: a simulator", 0), 0u) << reason;
  EXPECT_NE(reason.find("ranked last"), std::string::npos) << reason;
  EXPECT_NE(reason.find("GPU, CPU, accelerator at once"), std::string::npos)
      << "the reason is the type flags: " << reason;
  EXPECT_NE(std::string((*sim)["suspect"]), "") << r.out;

  const ProcessResult text = run_cli(
      {"-u", "NANSCOPE_DEVICE", "-u", "NANSCOPE_OCLGRIND", "OCL_ICD_VENDORS=" + vendors.path().string()}, {"devices"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("[simulator]  (not what it says: ranked last)"), std::string::npos) << text.out;
}

TEST(DevicesCli, MissingPinFailsWithTheListOnStderr) {
  const DeviceList list = enumerate_devices();
  for (const bool via_env : {false, true}) {
    const ProcessResult r = via_env ? run_cli({"NANSCOPE_DEVICE=no-such-device-xyz"}, {"devices"})
                                    : run_cli({"-u", "NANSCOPE_DEVICE"}, {"--device", "no-such-device-xyz", "devices"});
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    for (const auto& d : list.devices) EXPECT_NE(r.err.find(d.id), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("Devices ("), std::string::npos) << "nothing may run on a device that does not exist";
  }
}

TEST(DevicesCli, EnvironmentPinIsHonouredAndFlagWins) {
  const DeviceList list = enumerate_devices();
  const int ref_index = list.devices.back().index;
  const ProcessResult r = run_cli({"NANSCOPE_DEVICE=reference"}, {"devices", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["pinned"], ref_index);

  const ProcessResult f = run_cli({"NANSCOPE_DEVICE=no-such-device-xyz"}, {"--device", "0", "devices", "--json"});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(nlohmann::json::parse(f.out)["pinned"], 0);
}

TEST(DevicesCli, PrecompileOnReferenceHasNothingToDo) {
  const ProcessResult r = run_cli({}, {"--device", "reference", "precompile"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("nothing to compile"), std::string::npos) << r.out;
}

// nanscope-cli tune on the first OpenCL device with the GPU kernels forced, into a fresh kernel cache.
ProcessResult run_tune_cli(const std::string& cache, const std::vector<std::string>& args) {
  std::vector<std::string> all{"--device", "0", "--kernel-cache", cache};
  all.insert(all.end(), args.begin(), args.end());
  return run_cli({"NANSCOPE_KERNEL_STYLE=gpu"}, all);
}

TEST(TuneCli, TimesTheTileShapesStoresTheFastestAndLaterRunsUseIt) {
  if (!first_opencl(enumerate_devices())) GTEST_SKIP() << "no OpenCL device";
  const TempDir dir;
  const std::string cache = (dir / "kernels").string();
  const ProcessResult r = run_tune_cli(cache, {"tune", "--shape", "64x96x40", "--reps", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| 128x128x16 / 8x8 | 256 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 32x32x16 / 2x2 | 256 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fastest: "), std::string::npos) << r.out;
  const auto file = dir / "kernels" / "gemm-tuning.json";
  ASSERT_TRUE(std::filesystem::exists(file)) << r.out;
  std::ifstream in(file);
  const auto doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["devices"].size(), 1u);
  const auto& entry = doc["devices"].begin().value();
  EXPECT_GT(entry["gflops"].get<double>(), 0.0);

  // A later run on the device takes the stored tiles (and says so), and still computes right
  // (the op suite checks every tile shape's numerics through NANSCOPE_KERNEL_STYLE=gpu).
  const ProcessResult g =
      run_tune_cli(cache, {"generate", "--steps", "1", "--size", "64x64", "-o", (dir / "tuned.png").string()});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.err.find("GEMM tiles for"), std::string::npos) << g.err;
  EXPECT_NE(g.err.find(file.string()), std::string::npos) << g.err;

  const ProcessResult bad = run_tune_cli(cache, {"tune", "--shape", "64x0x3"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--shape \"64x0x3\""), std::string::npos) << bad.err;
}

TEST(TuneCli, CpuStyleAndReferenceDevicesHaveNothingToTune) {
  const ProcessResult ref = run_cli({}, {"--device", "reference", "tune"});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_NE(ref.out.find("no kernels to tune"), std::string::npos) << ref.out;
  const DeviceList list = enumerate_devices();
  const DeviceInfo* cl = first_opencl(list);
  if (!cl || cl->kind != DeviceKind::cpu) return;
  const ProcessResult cpu = run_cli({"NANSCOPE_KERNEL_STYLE=cpu"}, {"--device", "0", "tune", "--dry-run"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("no GPU tiles to tune"), std::string::npos) << cpu.out;
}

}  // namespace
}  // namespace nanscope
