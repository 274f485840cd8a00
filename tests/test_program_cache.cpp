// The kernel build cache (report R4): a miss builds and stores, a hit loads
// and still runs correctly, and a corrupt, truncated or foreign entry is
// detected, logged and rebuilt, never trusted.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <spdlog/sinks/ostream_sink.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "backend/device.hpp"
#include "backend/opencl/cache_inventory.hpp"
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/kernel_builder.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "backend/opencl/program_cache.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/oracle.hpp"
#include "support/small_fs.hpp"

namespace nanscope::opencl {
namespace {

namespace fs = std::filesystem;
using test::SmallFilesystem;
using test::TempDir;

// SCALE comes from the build options, so a program built with other options
// (or loaded from another key's entry) gives visibly different numbers.
constexpr const char* kVaddSource = R"CL(
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, uint n) {
  const size_t i = get_global_id(0);
  if (i < n) c[i] = a[i] + SCALE * b[i];
}
)CL";

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// Captures the engine's log lines while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    log::logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = log::logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

class ProgramCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    list_ = enumerate_devices();
    for (const auto& d : list_.devices) {
      if (test::is_test_device(d)) {
        device_ = d;
        break;
      }
    }
    if (device_.id.empty()) GTEST_SKIP() << "no OpenCL device found (install pocl-opencl-icd to run OpenCL tests)";
    BackendOptions opts;
    opts.use_kernel_cache = false;  // the backend only provides context and queue; caches are made per test
    be_ = std::make_unique<OpenClBackend>(device_, opts);
  }

  std::unique_ptr<ProgramCache> cache(const std::string& dir) {
    return std::make_unique<ProgramCache>(be_->context(), static_cast<cl_device_id>(device_.cl_device), device_, dir);
  }

  // Runs vadd from `program` on 37 elements and checks c = a + scale * b exactly.
  void expect_vadd(cl_program program, float scale) {
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program, "vadd", &err);
    ASSERT_EQ(err, CL_SUCCESS) << cl_status_name(err);
    const std::int64_t n = 37;
    std::vector<float> a(n), b(n);
    for (std::int64_t i = 0; i < n; ++i) {
      a[i] = 0.25f * static_cast<float>(i);
      b[i] = 1.0f - static_cast<float>(i);
    }
    const Tensor ta = be_->upload(HostTensor::from_f32({n}, a));
    const Tensor tb = be_->upload(HostTensor::from_f32({n}, b));
    Tensor tc = be_->empty({n}, DType::f32);
    OpenClBackend::set_args(k, be_->buffer(ta), be_->buffer(tb), be_->buffer(tc), static_cast<cl_uint>(n));
    const size_t global = 64;
    be_->launch(k, "VADD", 1, &global, nullptr);
    const HostTensor c = be_->download(tc);
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(c.get(i), a[i] + scale * b[i]) << "element " << i;
    }
    clReleaseKernel(k);
  }

  // Builds once into dir (a miss) and returns the entry path.
  fs::path build_entry(const std::string& dir, const std::string& options) {
    auto c = cache(dir);
    c->get_source("vadd", kVaddSource, options);
    const auto recs = c->records();
    EXPECT_EQ(recs.size(), 1u);
    EXPECT_FALSE(recs.at(0).cache_hit);
    const fs::path entry = c->entry_path(c->cache_key(kVaddSource, options));
    EXPECT_TRUE(fs::exists(entry)) << entry;
    return entry;
  }

  // Loads again in a fresh cache: the entry must be rejected with `reason`, rebuilt, and work.
  void expect_rebuilt(const std::string& dir, const fs::path& entry, const std::string& options, float scale,
                      const std::string& reason) {
    LogCapture logs;
    auto c = cache(dir);
    cl_program p = c->get_source("vadd", kVaddSource, options);
    const auto recs = c->records();
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_FALSE(recs[0].cache_hit);
    EXPECT_NE(recs[0].note.find(reason), std::string::npos) << recs[0].note;
    EXPECT_NE(recs[0].note.find("rebuilt"), std::string::npos) << recs[0].note;
    const std::string text = logs.text();
    EXPECT_NE(text.find("warning"), std::string::npos) << text;
    EXPECT_NE(text.find(entry.string()), std::string::npos) << "the warning names the file:\n" << text;
    EXPECT_NE(text.find(reason), std::string::npos) << text;
    expect_vadd(p, scale);
    // The rewritten entry is valid again: the next process gets a hit.
    auto again = cache(dir);
    expect_vadd(again->get_source("vadd", kVaddSource, options), scale);
    EXPECT_TRUE(again->records().at(0).cache_hit);
  }

  DeviceList list_;
  DeviceInfo device_;
  std::unique_ptr<OpenClBackend> be_;
};

TEST_F(ProgramCacheTest, MissThenHitAndTheLoadedProgramRuns) {
  TempDir dir;
  const std::string opts = "-cl-std=CL1.2 -DSCALE=2.0f";
  {
    LogCapture logs;
    auto c = cache(dir.path().string());
    cl_program p = c->get_source("vadd", kVaddSource, opts);
    expect_vadd(p, 2.0f);
    EXPECT_EQ(c->get_source("vadd", kVaddSource, opts), p) << "memoised in memory";
    const auto recs = c->records();
    ASSERT_EQ(recs.size(), 1u) << "a memoised program is not a new build";
    EXPECT_FALSE(recs[0].cache_hit);
    EXPECT_EQ(recs[0].program, "vadd");
    EXPECT_EQ(recs[0].options, opts);
    EXPECT_GT(recs[0].ms, 0.0);
    EXPECT_NE(logs.text().find("built vadd [" + opts + "] in"), std::string::npos) << logs.text();
  }
  // Only finished entries and their metadata: no temp files left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_TRUE(e.path().extension() == ".bin" || e.path().extension() == ".json") << e.path();
    ++files;
  }
  EXPECT_EQ(files, 2);
  {
    LogCapture logs;
    auto c = cache(dir.path().string());  // a fresh cache: as in the next process
    cl_program p = c->get_source("vadd", kVaddSource, opts);
    const auto recs = c->records();
    ASSERT_EQ(recs.size(), 1u);
    EXPECT_TRUE(recs[0].cache_hit);
    EXPECT_TRUE(recs[0].note.empty()) << recs[0].note;
    EXPECT_NE(logs.text().find("loaded vadd [" + opts + "] from cache in"), std::string::npos) << logs.text();
    expect_vadd(p, 2.0f);
  }
}

TEST_F(ProgramCacheTest, ListenerHearsEveryBuildAndLoadOnce) {
  TempDir dir;
  const std::string opts = "-cl-std=CL1.2 -DSCALE=3.0f";
  std::vector<KernelBuildEvent> events;
  const KernelBuildListener listen = [&events](const KernelBuildEvent& e) { events.push_back(e); };
  {
    auto c = cache(dir.path().string());
    c->set_listener(listen);
    c->get_source("vadd", kVaddSource, opts);
    c->get_source("vadd", kVaddSource, opts);  // memoised: nothing to announce
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].finished);
  EXPECT_EQ(events[0].program, "vadd");
  EXPECT_EQ(events[0].options, opts);
  EXPECT_TRUE(events[1].finished);
  EXPECT_FALSE(events[1].cache_hit);
  EXPECT_GT(events[1].ms, 0.0);
  auto again = cache(dir.path().string());
  again->set_listener(listen);
  again->get_source("vadd", kVaddSource, opts);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_FALSE(events[2].finished);
  EXPECT_TRUE(events[3].finished);
  EXPECT_TRUE(events[3].cache_hit);
}

TEST_F(ProgramCacheTest, CorruptEntryIsDetectedAndRebuilt) {
  TempDir dir;
  const std::string opts = "-DSCALE=3.0f";
  const fs::path entry = build_entry(dir.path().string(), opts);
  auto bytes = read_bytes(entry);
  ASSERT_GT(bytes.size(), 100u);
  // Flip bytes in the payload (after the 80-byte header).
  for (std::size_t i = 80 + (bytes.size() - 80) / 2, j = 0; j < 8 && i < bytes.size(); ++i, ++j) bytes[i] ^= 0x5a;
  write_bytes(entry, bytes);
  expect_rebuilt(dir.path().string(), entry, opts, 3.0f, "checksum mismatch");
}

TEST_F(ProgramCacheTest, TruncatedEntryIsDetectedAndRebuilt) {
  TempDir dir;
  const std::string opts = "-DSCALE=0.5f";
  for (const double keep : {0.6, 0.0}) {  // cut inside the payload, then inside the header
    const fs::path entry = build_entry(dir.path().string(), opts);
    auto bytes = read_bytes(entry);
    bytes.resize(keep > 0 ? static_cast<std::size_t>(static_cast<double>(bytes.size()) * keep) : 30);
    write_bytes(entry, bytes);
    expect_rebuilt(dir.path().string(), entry, opts, 0.5f, "truncated");
    fs::remove(entry);
  }
}

TEST_F(ProgramCacheTest, ForeignEntryIsDetectedAndRebuilt) {
  TempDir dir;
  const std::string mine = "-DSCALE=2.0f";
  const std::string other = "-DSCALE=-4.0f";
  const fs::path mine_entry = build_entry(dir.path().string(), mine);
  const fs::path other_entry = build_entry(dir.path().string(), other);
  ASSERT_NE(mine_entry, other_entry);
  // A complete, self-consistent entry of another program under this key's name.
  fs::copy_file(other_entry, mine_entry, fs::copy_options::overwrite_existing);
  expect_rebuilt(dir.path().string(), mine_entry, mine, 2.0f, "foreign");
}

TEST_F(ProgramCacheTest, BinaryTheDriverRejectsIsRebuilt) {
  TempDir dir;
  const std::string opts = "-DSCALE=1.5f";
  const fs::path entry = build_entry(dir.path().string(), opts);
  // Keep the header valid (magic, version, key) but replace the payload with
  // garbage and a matching checksum: only the driver can tell.
  auto bytes = read_bytes(entry);
  std::vector<char> garbage(200);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 37 + 11);
  bytes.resize(80);
  const std::uint64_t len = garbage.size();
  std::memcpy(bytes.data() + 40, &len, 8);
  unsigned char sum[32];
  unsigned int sum_len = 0;
  ASSERT_EQ(EVP_Digest(garbage.data(), garbage.size(), sum, &sum_len, EVP_sha256(), nullptr), 1);
  std::memcpy(bytes.data() + 48, sum, 32);
  bytes.insert(bytes.end(), garbage.begin(), garbage.end());
  write_bytes(entry, bytes);
  expect_rebuilt(dir.path().string(), entry, opts, 1.5f, "rejected by the driver");
}

TEST_F(ProgramCacheTest, BuildFailureCarriesTheBuildLog) {
  TempDir dir;
  auto c = cache(dir.path().string());
  try {
    c->get_source("broken", "__kernel void broken(__global float* x) { x[0] = undefined_name; }", "-DFOO=1");
    FAIL() << "a program that does not compile must throw";
  } catch (const ClError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.status(), CL_BUILD_PROGRAM_FAILURE);
    EXPECT_NE(what.find("broken"), std::string::npos) << what;
    EXPECT_NE(what.find("-DFOO=1"), std::string::npos) << what;
    EXPECT_NE(what.find("build log"), std::string::npos) << what;
    EXPECT_NE(what.find("undefined_name"), std::string::npos) << "the compiler's message is attached:\n" << what;
  }
  EXPECT_TRUE(fs::is_empty(dir.path())) << "a failed build leaves no entry";
}

// A cache folder that cannot be made (what a read-only parent is to a user;
// the tests run as root, for whom permissions do not stop writes): a warning
// naming it, every program built, runs unaffected.
TEST_F(ProgramCacheTest, ACacheFolderThatCannotBeMadeWarnsAndEveryRunStillWorks) {
  TempDir dir;
  const fs::path not_a_folder = dir.path() / "not-a-folder";
  write_bytes(not_a_folder, {'x'});
  const std::string cache_dir = (not_a_folder / "kernels").string();
  for (int i = 0; i < 2; ++i) {
    LogCapture logs;
    auto c = cache(cache_dir);
    expect_vadd(c->get_source("vadd", kVaddSource, "-DSCALE=1.0f"), 1.0f);
    EXPECT_FALSE(c->records().at(0).cache_hit);
    const std::string text = logs.text();
    EXPECT_NE(text.find("kernel cache disabled"), std::string::npos) << text;
    EXPECT_NE(text.find(cache_dir), std::string::npos) << "the warning names the folder:\n" << text;
  }
}

// An entry that cannot be written (here its name is taken by a folder, as a
// full disk or a read-only folder would refuse it): a warning, and the
// program built in memory still runs.
TEST_F(ProgramCacheTest, AnEntryThatCannotBeWrittenWarnsAndTheProgramStillRuns) {
  TempDir dir;
  auto probe = cache(dir.path().string());
  const fs::path entry = probe->entry_path(probe->cache_key(kVaddSource, "-DSCALE=2.0f"));
  fs::create_directories(entry / "blocker");
  LogCapture logs;
  auto c = cache(dir.path().string());
  expect_vadd(c->get_source("vadd", kVaddSource, "-DSCALE=2.0f"), 2.0f);
  const std::string text = logs.text();
  EXPECT_NE(text.find("could not save vadd"), std::string::npos) << text;
  EXPECT_EQ(text.find(": Success"), std::string::npos) << "the warning says why it failed:\n" << text;
}

// The cache folder is on a full disk: nothing can be saved, every program is
// built and runs, with a warning saying why; nothing half-written is left.
TEST_F(ProgramCacheTest, ACacheOnAFullDiskWarnsAndProgramsStillRun) {
  SmallFilesystem disk(64 << 10);
  if (!disk.ok()) GTEST_SKIP() << disk.reason();
  const std::string dir = (disk / "kernels").string();
  fs::create_directories(dir);
  disk.fill();
  for (int i = 0; i < 2; ++i) {
    LogCapture logs;
    auto c = cache(dir);
    expect_vadd(c->get_source("vadd", kVaddSource, "-DSCALE=3.0f"), 3.0f);
    EXPECT_FALSE(c->records().at(0).cache_hit);
    const std::string text = logs.text();
    EXPECT_NE(text.find("could not save vadd"), std::string::npos) << text;
    EXPECT_NE(text.find("No space left on device"), std::string::npos) << "the warning says why:\n" << text;
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    EXPECT_FALSE(e.path().filename().string().find(".tmp") != std::string::npos) << "left behind: " << e.path();
  }
}

// A cache folder on a read-only file system (what root meets too, unlike a
// folder without write permission): the entries already there still load;
// a new program is built, runs and is not saved, with a warning.
TEST_F(ProgramCacheTest, AReadOnlyCacheStillLoadsItsEntriesAndBuildsTheRest) {
  SmallFilesystem disk(4 << 20);
  if (!disk.ok()) GTEST_SKIP() << disk.reason();
  const std::string dir = (disk / "kernels").string();
  expect_vadd(cache(dir)->get_source("vadd", kVaddSource, "-DSCALE=4.0f"), 4.0f);  // saved while writable
  if (!disk.make_read_only()) GTEST_SKIP() << disk.reason();
  LogCapture logs;
  auto c = cache(dir);
  expect_vadd(c->get_source("vadd", kVaddSource, "-DSCALE=4.0f"), 4.0f);
  EXPECT_TRUE(c->records().at(0).cache_hit) << "the entry saved before is loaded";
  expect_vadd(c->get_source("vadd", kVaddSource, "-DSCALE=5.0f"), 5.0f);
  EXPECT_FALSE(c->records().at(1).cache_hit);
  const std::string text = logs.text();
  EXPECT_NE(text.find("Read-only file system"), std::string::npos) << "the warning says why:\n" << text;
}

TEST_F(ProgramCacheTest, DisabledCacheAlwaysBuilds) {
  for (int i = 0; i < 2; ++i) {
    auto c = cache("");
    expect_vadd(c->get_source("vadd", kVaddSource, "-DSCALE=1.0f"), 1.0f);
    EXPECT_FALSE(c->records().at(0).cache_hit);
    EXPECT_EQ(c->entry_path(c->cache_key(kVaddSource, "-DSCALE=1.0f")), "");
  }
}

// Keys need no device: a cache without a context only hashes.
TEST(ProgramCacheKey, CoversSourceOptionsDeviceAndDriver) {
  DeviceInfo info;
  info.name = "Example GPU";
  info.driver_version = "1.0";
  info.platform_name = "Example platform";
  info.platform_version = "OpenCL 3.0";
  ProgramCache a(nullptr, nullptr, info, "");
  const std::string k = a.cache_key("src", "-DX=1");
  EXPECT_EQ(k.size(), 64u);
  EXPECT_EQ(k.find_first_not_of("0123456789abcdef"), std::string::npos) << k;
  EXPECT_EQ(a.cache_key("src", "-DX=1"), k) << "deterministic";
  EXPECT_NE(a.cache_key("src", "-DX=2"), k);
  EXPECT_NE(a.cache_key("src ", "-DX=1"), k);
  EXPECT_NE(a.cache_key("src-DX=1", ""), k) << "fields are length-prefixed";

  for (int field = 0; field < 4; ++field) {
    DeviceInfo other = info;
    if (field == 0) other.name = "Example GPU 2";
    if (field == 1) other.driver_version = "1.1";
    if (field == 2) other.platform_name = "Other platform";
    if (field == 3) other.platform_version = "OpenCL 2.0";
    ProgramCache b(nullptr, nullptr, other, "");
    EXPECT_NE(b.cache_key("src", "-DX=1"), k) << "field " << field;
  }
}

TEST(ProgramCacheKey, DefaultDirFollowsTheEnvironment) {
  const char* saved[3] = {std::getenv("NANSCOPE_KERNEL_CACHE"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string keep[3] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[2] ? saved[2] : ""};
  ::setenv("NANSCOPE_KERNEL_CACHE", "/tmp/ns-explicit", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  ::setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(ProgramCache::default_dir(), "/tmp/ns-explicit");
  ::unsetenv("NANSCOPE_KERNEL_CACHE");
  EXPECT_EQ(ProgramCache::default_dir(), "/tmp/xdg/nanscope/kernels");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(ProgramCache::default_dir(), "/tmp/home/.cache/nanscope/kernels");
  const char* names[3] = {"NANSCOPE_KERNEL_CACHE", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i) {
    if (saved[i]) {
      ::setenv(names[i], keep[i].c_str(), 1);
    } else {
      ::unsetenv(names[i]);
    }
  }
}

}  // namespace
}  // namespace nanscope::opencl

namespace nanscope::opencl {
namespace {

// Report R4's inventory: what a build records beside its entry, and what
// list, verify and clear make of it (the CLI's `cache` and the workbench's
// dialog show exactly these entries).
TEST_F(ProgramCacheTest, InventoryListsDeviceOptionsSizeBuildTimeAndLastUse) {
  TempDir dir;
  const std::string opts = "-DSCALE=6.0f";
  const fs::path entry = build_entry(dir.path().string(), opts);
  auto list = list_kernel_cache(dir.path().string());
  ASSERT_EQ(list.size(), 1u);
  const CacheEntryInfo& e = list[0];
  EXPECT_TRUE(e.has_metadata);
  EXPECT_EQ(e.program, "vadd");
  EXPECT_EQ(e.options, opts);
  EXPECT_EQ(e.device, device_.name);
  EXPECT_EQ(e.driver, device_.driver_version);
  EXPECT_EQ(e.path, entry.string());
  EXPECT_EQ(e.bytes, fs::file_size(entry));
  ASSERT_TRUE(e.build_ms.has_value());
  EXPECT_GT(*e.build_ms, 0.0);
  ASSERT_TRUE(e.built_at.has_value());
  EXPECT_GT(e.last_used, 0);
  EXPECT_TRUE(entry_is_for(e, device_));
  DeviceInfo other = device_;
  other.driver_version += "-other";
  EXPECT_FALSE(entry_is_for(e, other)) << "a driver update makes entries foreign";

  // A load marks the entry used: its last use moves forward.
  const auto old_time = fs::last_write_time(entry) - std::chrono::hours(24);
  fs::last_write_time(entry, old_time);
  const std::int64_t before = list_kernel_cache(dir.path().string()).at(0).last_used;
  EXPECT_TRUE(cache(dir.path().string())->get_source("vadd", kVaddSource, opts) != nullptr);
  EXPECT_GE(list_kernel_cache(dir.path().string()).at(0).last_used, before + 23 * 3600);

  // An entry from before metadata existed still loads, and gets metadata without a build time.
  fs::remove(fs::path(entry).replace_extension(".json"));
  EXPECT_FALSE(list_kernel_cache(dir.path().string()).at(0).has_metadata);
  auto again = cache(dir.path().string());
  expect_vadd(again->get_source("vadd", kVaddSource, opts), 6.0f);
  EXPECT_TRUE(again->records().at(0).cache_hit);
  const auto relisted = list_kernel_cache(dir.path().string());
  EXPECT_TRUE(relisted.at(0).has_metadata);
  EXPECT_FALSE(relisted.at(0).build_ms.has_value()) << "the build time of an old entry is unknown, not made up";
}

TEST_F(ProgramCacheTest, VerifyFindsTheCorruptEntryAndRemovesItOnlyWhenAsked) {
  TempDir dir;
  const fs::path good = build_entry(dir.path().string(), "-DSCALE=1.5f");
  const fs::path bad = build_entry(dir.path().string(), "-DSCALE=2.5f");
  auto bytes = read_bytes(bad);
  bytes[bytes.size() - 3] ^= 0x11;
  write_bytes(bad, bytes);
  auto checked = verify_kernel_cache(dir.path().string(), &device_, false);
  ASSERT_EQ(checked.size(), 2u);
  int corrupt = 0;
  for (const auto& e : checked) {
    if (e.path == bad.string()) {
      EXPECT_NE(e.problem.find("checksum mismatch"), std::string::npos) << e.problem;
      ++corrupt;
    } else {
      EXPECT_EQ(e.problem, "") << e.path;
    }
  }
  EXPECT_EQ(corrupt, 1);
  EXPECT_TRUE(fs::exists(bad)) << "verify without remove changes nothing";
  verify_kernel_cache(dir.path().string(), nullptr, true);
  EXPECT_FALSE(fs::exists(bad));
  EXPECT_FALSE(fs::exists(fs::path(bad).replace_extension(".json")));
  EXPECT_TRUE(fs::exists(good));
  EXPECT_EQ(verify_kernel_cache(dir.path().string(), nullptr, false).at(0).problem, "");
}

TEST_F(ProgramCacheTest, ClearRemovesOneDevicesEntriesOrAll) {
  TempDir dir;
  const fs::path mine = build_entry(dir.path().string(), "-DSCALE=7.0f");
  // Another device's entry: the same bytes under another key, with that device in its metadata.
  DeviceInfo other = device_;
  other.name = "Some Other GPU";
  const std::string other_key(64, 'a');
  const fs::path theirs = dir.path() / (other_key + ".bin");
  fs::copy_file(mine, theirs);
  write_entry_metadata(theirs.string(), "vadd", "-DSCALE=7.0f", other, 1234.0);
  EXPECT_EQ(clear_kernel_cache(dir.path().string(), &device_), 1u);
  EXPECT_FALSE(fs::exists(mine));
  ASSERT_TRUE(fs::exists(theirs));
  const auto left = list_kernel_cache(dir.path().string());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].device, "Some Other GPU");
  EXPECT_EQ(left[0].build_ms.value_or(0), 1234.0);
  EXPECT_EQ(ProgramCache::check_entry(theirs.string(), other_key).rfind("foreign", 0), 0u)
      << "its header holds the other key: verify calls it foreign";
  std::ofstream(dir.path() / "x.bin.tmp.1.2") << "half";
  EXPECT_EQ(clear_kernel_cache(dir.path().string(), nullptr), 1u);
  EXPECT_TRUE(fs::is_empty(dir.path())) << "clear all leaves nothing, temporaries included";
}

// The cold-start estimate: before a run, the programs it needs that are not
// cached, with an estimate from past builds on the device; each build then
// says where the run stands ("building 1 of N programs, about X s left").
TEST_F(ProgramCacheTest, ColdStartPlanCountsWhatIsNotCachedAndTracksEveryBuild) {
  TempDir dir;
  std::vector<KernelBuildEvent> events;
  BackendOptions opts;
  opts.kernel_cache_dir = dir.path().string();
  opts.on_kernel_build = [&events](const KernelBuildEvent& e) { events.push_back(e); };
  const Precision f32{DType::f32, Accumulate::f32, SoftmaxPrecision::f32};
  std::size_t total = 0;
  {
    OpenClBackend be(device_, opts);
    const KernelPlan plan = be.plan_kernels(std::span<const Precision>(&f32, 1), {});
    ASSERT_FALSE(plan.items.empty());
    total = plan.items.size();
    EXPECT_EQ(plan.to_build, total) << "an empty cache has nothing";
    EXPECT_EQ(plan.history_samples, 0u);
    ASSERT_GE(plan.streams, 1u);
    const double streams = plan.streams;
    // Without history each program gets a typical build time (on CPUs the large matmul and attention
    // programs more than the small ones), and the streams share the sum.
    double sum = 0.0, longest = 0.0, matmul = 0.0, small = 0.0;
    for (const KernelPlanItem& i : plan.items) {
      EXPECT_GT(i.estimate_ms, 0.0) << i.program;
      sum += i.estimate_ms, longest = std::max(longest, i.estimate_ms);
      if (i.program == "matmul") matmul = i.estimate_ms;
      if (i.program == "elementwise") small = i.estimate_ms;
    }
    EXPECT_DOUBLE_EQ(plan.estimate_ms, std::max(sum / streams, longest)) << "shared by the streams";
    if (device_.kind == DeviceKind::cpu) {
      EXPECT_GT(matmul, small) << "the matmul program builds longest on PoCL";
    }
    EXPECT_NE(plan.describe(device_.name).find("typical build times assumed"), std::string::npos)
        << plan.describe(device_.name);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_TRUE(events[0].plan);
    EXPECT_EQ(events[0].plan_count, static_cast<int>(total));
    // One planned program built: its events carry the plan's progress.
    const KernelPlanItem& item = plan.items.front();
    be.programs().get(item.program, item.options);
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[1].plan_index, 1);
    EXPECT_EQ(events[1].plan_count, static_cast<int>(total));
    EXPECT_EQ(events[1].progress().rfind("building 1 of " + std::to_string(total) + " programs, about ", 0), 0u)
        << events[1].progress();
    EXPECT_TRUE(events[2].finished);
    EXPECT_NEAR(events[2].plan_left_ms, (sum - item.estimate_ms) / streams, 1e-6);
  }
  // The next process: that program is cached, and the estimate comes from its recorded build time.
  OpenClBackend be(device_, opts);
  const KernelPlan plan = be.plan_kernels(std::span<const Precision>(&f32, 1), {});
  EXPECT_EQ(plan.items.size(), total);
  EXPECT_EQ(plan.to_build, total - 1);
  EXPECT_EQ(plan.history_samples, 1u);
  const auto recorded = list_kernel_cache(dir.path().string()).at(0).build_ms.value_or(-1);
  EXPECT_NEAR(plan.estimate_ms, std::max(recorded * static_cast<double>(total - 1) / plan.streams, recorded), 1e-6)
      << "every other program is estimated from the one past build on this device";
  EXPECT_NE(plan.describe(device_.name).find("from 1 past builds"), std::string::npos) << plan.describe(device_.name);
}

// The half-unit probe, built before any plan on devices with half units, is
// no run's program: its build time must not become the device's mean (on the
// H200 its 0.4 s made the estimate for 12 programs 0.6 s; they took 9 s).
TEST_F(ProgramCacheTest, TheHalfUnitProbeIsNoBuildHistory) {
  TempDir dir;
  cache(dir.path().string())->get_source("half_probe", kVaddSource, "-DSCALE=2.0f");
  EXPECT_EQ(build_history(dir.path().string(), device_).samples, 0u);
  cache(dir.path().string())->get_source("vadd", kVaddSource, "-DSCALE=3.0f");  // another key
  const BuildHistory h = build_history(dir.path().string(), device_);
  EXPECT_EQ(h.samples, 1u);
  EXPECT_EQ(h.by_program.count("half_probe"), 0u);
}

// `nanscope-cli cache list|verify|clear` on a cache this test filled.
TEST_F(ProgramCacheTest, CliListsVerifiesAndClearsTheCache) {
  TempDir dir;
  const fs::path good = build_entry(dir.path().string(), "-DSCALE=8.0f");
  const fs::path bad = build_entry(dir.path().string(), "-DSCALE=9.0f");
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{NANSCOPE_CLI_PATH, "--kernel-cache", dir.path().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run_process(argv);
  };
  const auto listed = cli({"cache", "list", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto doc = nlohmann::json::parse(listed.out);
  ASSERT_EQ(doc["entries"].size(), 2u) << listed.out;
  for (const auto& e : doc["entries"]) {
    EXPECT_EQ(e["program"], "vadd");
    EXPECT_EQ(e["device"], device_.name);
    EXPECT_EQ(e["driver"], device_.driver_version);
    EXPECT_TRUE(e["build_ms"].is_number()) << e.dump();
    EXPECT_GT(e["bytes"].get<std::uint64_t>(), 80u);
  }
  const auto table = cli({"cache", "list"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("\"" + device_.name + "\", driver " + device_.driver_version), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("-DSCALE=9.0f"), std::string::npos) << table.out;

  auto bytes = read_bytes(bad);
  bytes[bytes.size() / 2] ^= 0x42;
  write_bytes(bad, bytes);
  const auto verify = cli({"cache", "verify"});
  EXPECT_EQ(verify.exit_code, 2) << "a corrupt entry is a failed check:\n" << verify.out << verify.err;
  EXPECT_NE(verify.out.find("1 corrupt"), std::string::npos) << verify.out;
  EXPECT_NE(verify.out.find("checksum mismatch"), std::string::npos) << verify.out;
  EXPECT_TRUE(fs::exists(bad));
  const auto removed = cli({"cache", "verify", "--remove", "--json"});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_EQ(nlohmann::json::parse(removed.out)["removed"], 1) << removed.out;
  EXPECT_FALSE(fs::exists(bad));

  const auto cleared = cli({"cache", "clear", "--device", device_.id});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_NE(cleared.out.find("removed 1 kernel cache entries"), std::string::npos) << cleared.out;
  EXPECT_FALSE(fs::exists(good));
  const auto missing = cli({"cache", "clear", "--device", "no-such-device-xyz"});
  EXPECT_EQ(missing.exit_code, 1) << "a device that does not exist is an error listing the devices";
  EXPECT_NE(missing.err.find("matches no device"), std::string::npos) << missing.err;
}

// --- Helper processes (kernel_builder.hpp) ---

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
