// Faults a run must survive: the device running out of memory in the middle
// of a run (injected through BackendOptions::fail_allocation) ends that run
// with a message naming the op, the module and the buffer; nothing stays
// allocated, and the next run works.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "pipeline/session.hpp"
#include "support/oracle.hpp"
#include "support/small_fs.hpp"

namespace nanscope {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Faults, OutOfDeviceMemoryMidRunEndsTheRunCleanlyAndTheNextRunWorks) {
  // Allocations left before the one that fails (negative: off), and a count of all of them.
  auto left = std::make_shared<std::atomic<long>>(-1);
  auto count = std::make_shared<std::atomic<long>>(0);
  BackendOptions options;
  options.fail_allocation = [left, count](std::size_t) {
    count->fetch_add(1);
    return left->fetch_sub(1) == 0;
  };
  pipeline::Session session(options);
  if (session.backend("").device().kind == DeviceKind::reference) GTEST_SKIP() << "no OpenCL device";
  RunConfig cfg;
  cfg.prompt = "a red circle on a blue background";
  cfg.steps = 3;
  (void)session.model(cfg);  // the weights are allocated: what follows is the run's own
  count->store(0);
  const auto clean = session.generate(cfg);
  ASSERT_EQ(clean.size(), 1u);
  const long per_run = count->load();
  ASSERT_GT(per_run, 100);
  const std::uint64_t resident = session.backend("").allocated_bytes();
  ASSERT_GT(resident, 0u);

  // The first allocation (the prompt), then points through the steps, and the last (the decode).
  for (long n : {0L, per_run / 4, per_run / 2, 3 * per_run / 4, per_run - 1}) {
    SCOPED_TRACE("failing allocation " + std::to_string(n));
    left->store(n);
    try {
      session.generate(cfg);
      FAIL() << "the run must end with the allocation failure";
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "cannot allocate")) << msg;
      EXPECT_TRUE(contains(msg, "CL_MEM_OBJECT_ALLOCATION_FAILURE")) << msg;
      EXPECT_TRUE(contains(msg, " f32 (")) << msg;  // the buffer: shape, dtype and size
    }
    left->store(-1);
    // What the failed run had allocated is given back (the pool may keep it for reuse).
    EXPECT_EQ(session.backend("").allocated_bytes(), resident);
    const auto again = session.generate(cfg);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].image, clean[0].image);
  }
}

TEST(Faults, AnOpsAllocationFailureNamesTheOpAndItsModule) {
  auto left = std::make_shared<std::atomic<long>>(-1);
  BackendOptions options;
  options.fail_allocation = [left](std::size_t) { return left->fetch_sub(1) == 0; };
  pipeline::Session session(options);
  if (session.backend("").device().kind == DeviceKind::reference) GTEST_SKIP() << "no OpenCL device";
  RunConfig cfg;
  cfg.steps = 1;
  (void)session.model(cfg);
  left->store(60);  // within the text encoder or the first UNet call: an op's output
  try {
    session.generate(cfg);
    FAIL() << "the run must end with the allocation failure";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    // `CONV2D down_blocks.0.resnets.0.conv1 x[...] f32 on "...": cannot allocate the output ...`
    EXPECT_TRUE(contains(msg, "cannot allocate the output")) << msg;
    EXPECT_TRUE(contains(msg, " on \"")) << msg;
    EXPECT_TRUE(std::isupper(static_cast<unsigned char>(msg.front()))) << msg;
  }
}

// Cancels once it has been asked `after` times (the pipeline asks before every
// op and every step); records what the run was doing then.
class CancelAfter final : public pipeline::RunObserver {
 public:
  explicit CancelAfter(long after) : left_(after) {}
  bool cancelled() const override {
    ++asked_;
    if (left_-- > 0) return false;
    if (asked_after_ == 0) status_at_cancel = status;
    ++asked_after_;
    return true;
  }
  void on_status(std::string_view s) override {
    status = std::string(s);
    starts.emplace_back(status, asked_);
  }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
    images.push_back(img);
    reports.push_back(r);
  }
  long asked() const { return asked_; }
  long asked_after_cancel() const { return asked_after_; }

  std::string status;
  std::vector<std::pair<std::string, long>> starts;  // each status and the query count when it began
  mutable std::string status_at_cancel;
  std::vector<pipeline::GeneratedImage> images;
  std::vector<pipeline::RunReport> reports;

 private:
  mutable long left_;
  mutable long asked_ = 0, asked_after_ = 0;
};

TEST(Faults, CancelAtEveryPhaseStopsWithinOneOpAndTheNextRunWorks) {
  pipeline::Session session;
  RunConfig cfg;
  cfg.prompt = "a blue square";
  cfg.steps = 4;
  (void)session.model(cfg);
  CancelAfter never(1L << 40);
  const auto clean = session.generate(cfg, &never);
  ASSERT_EQ(clean.size(), 1u);
  const long queries = never.asked();  // one per op and step
  ASSERT_GT(queries, 100);

  // A query in the middle of every phase the clean run went through, and the very first.
  std::vector<long> points{0};
  for (std::size_t i = 0; i < never.starts.size(); ++i) {
    const long begin = never.starts[i].second;
    const long end = i + 1 < never.starts.size() ? never.starts[i + 1].second : queries;
    if (end - begin >= 2) points.push_back((begin + end) / 2);
  }
  std::set<std::string> phases;
  for (long k : points) {
    SCOPED_TRACE("cancel at query " + std::to_string(k) + " of " + std::to_string(queries));
    CancelAfter obs(k);
    std::vector<pipeline::GeneratedImage> got;
    ASSERT_NO_THROW(got = session.generate(cfg, &obs));
    phases.insert(obs.status_at_cancel);
    // Stopped within one op: after the first "cancelled", at most the image loop asks once more.
    EXPECT_LE(obs.asked_after_cancel(), 2) << obs.status_at_cancel;
    EXPECT_LT(obs.asked(), queries);
    for (const auto& r : obs.reports) {
      EXPECT_TRUE(r.cancelled);
      EXPECT_EQ(r.outcome, "cancelled");
    }
    // The next run is untouched by the cancelled one.
    const auto again = session.generate(cfg);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].image, clean[0].image);
  }
  // The Cancel landed in each phase of a run.
  std::string hit;
  for (const auto& p : phases) hit += " '" + p + "'";
  for (const char* phase : {"loading model", "encoding the prompt", "sampling", "decoding"}) {
    EXPECT_TRUE(phases.count(phase)) << phase << "; phases hit:" << hit;
  }
}

// Saving onto a full disk or a read-only file system: the command fails with
// a message that says what to do, the file that was there survives byte for
// byte, and no temporary is left behind. Then a save elsewhere works.
TEST(Faults, FullOrReadOnlyDestinationKeepsTheOldFilesAndSaysWhatToDo) {
  test::SmallFilesystem disk(256 << 10);
  if (!disk.ok()) GTEST_SKIP() << disk.reason();
  const std::string old_png = "old image bytes", old_preset = "{\"steps\": 3}\n";
  const auto write = [](const std::filesystem::path& p, const std::string& bytes) { std::ofstream(p) << bytes; };
  const auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  write(disk / "out.png", old_png);
  write(disk / "preset.json", old_preset);
  const auto generate = [&](const std::filesystem::path& png, const std::filesystem::path& preset) {
    return test::run_process({NANSCOPE_CLI_PATH, "generate", "--steps", "1", "--cfg", "1", "--size", "64x64", "-o",
                              png.string(), "--save-preset", preset.string()});
  };
  struct Case {
    const char* name;
    const char* advice;
  };
  for (const Case c : {Case{"full", "Free some disk space"}, Case{"read-only", "writable"}}) {
    SCOPED_TRACE(c.name);
    if (std::string_view(c.name) == "full") {
      disk.fill();
    } else if (!disk.make_read_only()) {
      GTEST_SKIP() << disk.reason();
    }
    test::TempDir other;
    // The image to the bad disk (the preset elsewhere), then the preset to it.
    for (const auto& [png, preset] :
         {std::pair{disk / "out.png", other / "p.json"}, std::pair{other / "o.png", disk / "preset.json"}}) {
      const auto r = generate(png, preset);
      ASSERT_LT(r.exit_code, 128) << "ended by a signal\n" << r.err;
      EXPECT_NE(r.exit_code, 0);
      EXPECT_NE(r.err.find(c.advice), std::string::npos) << r.err;
    }
    EXPECT_EQ(read(disk / "out.png"), old_png);
    EXPECT_EQ(read(disk / "preset.json"), old_preset);
    for (const auto& e : std::filesystem::directory_iterator(disk.path())) {
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
    }
  }
  test::TempDir elsewhere;
  const auto r = generate(elsewhere / "out.png", elsewhere / "preset.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(elsewhere / "out.png"));
  EXPECT_TRUE(std::filesystem::exists(elsewhere / "preset.json"));
}

}  // namespace
}  // namespace nanscope
