// The kernel build cache (report R4): a miss builds and stores, a hit loads
// and still runs correctly, and a corrupt, truncated or foreign entry is
// detected, logged and rebuilt, never trusted; a cache that cannot be written
// warns and every run still works; the inventory, `nanscope-cli cache` and the
// cold-start plan. Building many programs at once: tests/test_kernel_builds.cpp.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/device.hpp"
#include "backend/opencl/cache_inventory.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "backend/opencl/program_cache.hpp"
#include "core/error.hpp"
#include "support/backends.hpp"
#include "support/oracle.hpp"
#include "support/program_cache_fixture.hpp"
#include "support/small_fs.hpp"

namespace nanscope::opencl {
namespace {

using test::SmallFilesystem;
using test::TempDir;

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

}  // namespace
}  // namespace nanscope::opencl
