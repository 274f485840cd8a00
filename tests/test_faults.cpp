// Faults a run must survive: the device running out of memory in the middle
// of a run (injected through BackendOptions::fail_allocation) ends that run
// with a message naming the op, the module and the buffer; nothing stays
// allocated, and the next run works.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "pipeline/session.hpp"

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

}  // namespace
}  // namespace nanscope
