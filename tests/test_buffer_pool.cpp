// The OpenCL backend's buffer pool: size classes, reuse of released buffers,
// the cap on what is kept, what is given back above the high-water mark, kept weight panels counted at the sizes
// served, tensors that outlive their backend, and repeated calls served from an arena planned from their pattern.

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/device.hpp"
#include "backend/opencl/buffer_pool.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "backend/opencl/weight_panels.hpp"
#include "core/tensor.hpp"
#include "support/backends.hpp"

namespace nanscope {
namespace {

using opencl::BufferPool;

TEST(BufferPool, SizeClassesCoverTheRequestWithAtMostAnEighthSpare) {
  EXPECT_EQ(BufferPool::size_class(1), 4096u);
  EXPECT_EQ(BufferPool::size_class(4096), 4096u);
  EXPECT_EQ(BufferPool::size_class(4097), 8192u);
  EXPECT_EQ(BufferPool::size_class(65536), 65536u);
  for (std::size_t bytes : {65537u, 100000u, 1u << 20, (1u << 20) + 1, 123456789u, 3u << 30}) {
    const std::size_t c = BufferPool::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(static_cast<double>(c - bytes), bytes / 8.0) << bytes;
    EXPECT_EQ(BufferPool::size_class(c), c) << "a class maps to itself";
  }
}

class BufferPoolDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& d : enumerate_devices().devices) {
      if (test::is_test_device(d)) {
        BackendOptions opts;
        opts.use_kernel_cache = false;
        be_ = std::make_unique<opencl::OpenClBackend>(d, opts);
        return;
      }
    }
    GTEST_SKIP() << "no OpenCL device found (install pocl-opencl-icd to run OpenCL tests)";
  }
  std::unique_ptr<opencl::OpenClBackend> be_;
};

TEST_F(BufferPoolDevice, ReleasedBuffersAreHandedOutAgainForTheSameClass) {
  BufferPool pool(be_->context(), 1 << 20);
  cl_int err = CL_SUCCESS;
  cl_mem a = pool.acquire(10000, err);
  ASSERT_EQ(err, CL_SUCCESS);
  pool.release(a, 10000);
  EXPECT_EQ(pool.kept_bytes(), BufferPool::size_class(10000));
  cl_mem b = pool.acquire(9000, err);  // same class (12 KiB)
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool.reused(), 1u);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  cl_mem c = pool.acquire(20000, err);  // another class: a new buffer
  EXPECT_NE(c, a);
  pool.release(b, 9000);
  pool.release(c, 20000);
  pool.trim();
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

TEST_F(BufferPoolDevice, WhatIsKeptStaysUnderTheCap) {
  BufferPool pool(be_->context(), 64 << 10);
  cl_int err = CL_SUCCESS;
  std::vector<cl_mem> mems;
  for (int i = 0; i < 6; ++i) mems.push_back(pool.acquire(32 << 10, err));
  for (cl_mem m : mems) pool.release(m, 32 << 10);
  EXPECT_EQ(pool.kept_bytes(), std::size_t{64} << 10);  // two kept, four released to the driver
}

// In use + kept stays within an eighth above the most ever in use at once: a request
// no kept buffer serves first gives back kept buffers, of the classes asked
// for least recently first (a VAE decode's earlier stages must not add to the
// peak of its last one). Kept buffers up to twice a request's size serve it.
TEST_F(BufferPoolDevice, KeptBuffersAreGivenBackAboveTheHighWaterMark) {
  BufferPool pool(be_->context(), 1 << 20);
  cl_int err = CL_SUCCESS;
  constexpr std::size_t kK = 1024;
  cl_mem a = pool.acquire(64 * kK, err);
  cl_mem b = pool.acquire(64 * kK, err);
  cl_mem c = pool.acquire(64 * kK, err);
  EXPECT_EQ(pool.peak_asked_bytes(), 192 * kK);  // the mark: in use + kept may reach 216 KiB
  pool.release(a, 64 * kK);
  pool.release(b, 64 * kK);
  pool.release(c, 64 * kK);
  EXPECT_EQ(pool.kept_bytes(), 192 * kK);
  // 104 KiB (100000 bytes' class): 192 + 104 > 216, so two 64 KiB buffers go (the oldest releases, a and b).
  cl_mem d = pool.acquire(100000, err);
  ASSERT_EQ(err, CL_SUCCESS);
  EXPECT_EQ(pool.kept_bytes(), 64 * kK);
  EXPECT_EQ(pool.acquire(64 * kK, err), c);
  EXPECT_EQ(pool.reused(), 1u);
  pool.release(c, 64 * kK);
  pool.release(d, 100000);
  // 40 KiB has no kept buffer of its class; the 64 KiB one serves it, and counts as 64 KiB in use.
  EXPECT_EQ(pool.acquire(40 * kK, err), c);
  EXPECT_EQ(pool.in_use_bytes(), 64 * kK);
  pool.release(c, 40 * kK);
  EXPECT_EQ(pool.kept_bytes(), 168 * kK);
  // 128 KiB: 168 + 128 > 216; one buffer goes, d (its class was asked for least recently).
  cl_mem e = pool.acquire(128 * kK, err);
  ASSERT_EQ(err, CL_SUCCESS);
  EXPECT_EQ(pool.kept_bytes(), 64 * kK);
  EXPECT_EQ(pool.acquire(64 * kK, err), c);
  pool.release(c, 64 * kK);
  pool.release(e, 128 * kK);
  // Within the mark nothing is given back: the same requests again are all served from the pool.
  const std::size_t before = pool.reused();
  for (int round = 0; round < 2; ++round) {
    cl_mem x = pool.acquire(64 * kK, err);
    cl_mem y = pool.acquire(128 * kK, err);
    pool.release(x, 64 * kK);
    pool.release(y, 128 * kK);
  }
  EXPECT_EQ(pool.reused(), before + 4);
  EXPECT_EQ(pool.kept_bytes(), 192 * kK);
  // A request beyond the mark: everything kept goes, the new high is in use alone.
  cl_mem big = pool.acquire(512 * kK, err);
  ASSERT_EQ(err, CL_SUCCESS);
  EXPECT_EQ(pool.kept_bytes(), 0u);
  EXPECT_EQ(pool.peak_asked_bytes(), 512 * kK);
  pool.release(big, 512 * kK);
}

// The order of giving back is by when a class was last asked for, not by when
// its buffer came back: a class still in use keeps its spare buffers.
TEST_F(BufferPoolDevice, TheClassAskedForLeastRecentlyGoesFirst) {
  BufferPool pool(be_->context(), 1 << 20);
  cl_int err = CL_SUCCESS;
  constexpr std::size_t kK = 1024;
  cl_mem p1 = pool.acquire(256 * kK, err);
  cl_mem p2 = pool.acquire(256 * kK, err);
  cl_mem q = pool.acquire(8 * kK, err);  // the mark 520 KiB: in use + kept may reach 585 KiB
  pool.release(p1, 256 * kK);
  pool.release(q, 8 * kK);
  pool.release(p2, 256 * kK);
  EXPECT_EQ(pool.acquire(256 * kK, err), p2);  // the 256 KiB class is asked for after the 8 KiB one
  // 72 KiB (no kept class up to twice it): 256 in use + 264 kept + 72 > 585; giving back q is
  // enough, and p1 stays although it came back before q.
  cl_mem r = pool.acquire(72 * kK, err);
  ASSERT_EQ(err, CL_SUCCESS);
  EXPECT_EQ(pool.kept_bytes(), 256 * kK);
  EXPECT_EQ(pool.acquire(256 * kK, err), p1);
  pool.release(p1, 256 * kK);
  pool.release(p2, 256 * kK);
  pool.release(r, 72 * kK);
}

// Kept weight panels (weight_panels.hpp) count at the size the pool served them with, which a kept buffer of a
// larger class may be: their budget, the memory plan's room for a run, is what allocated_bytes may grow by.
TEST_F(BufferPoolDevice, KeptWeightPanelsCountAtTheSizeTheyWereServed) {
  struct Weight : Storage {
    std::size_t bytes() const override { return 0; }
    const void* owner() const override { return nullptr; }
  } w1, w2;
  constexpr std::size_t kK = 1024;
  auto pool = std::make_shared<BufferPool>(be_->context(), 1 << 20);
  cl_int err = CL_SUCCESS;
  cl_mem large = pool->acquire(64 * kK, err);
  ASSERT_EQ(err, CL_SUCCESS);
  pool->release(large, 64 * kK);  // kept: it serves requests from 32 KiB up
  {
    opencl::WeightPanels tight(pool, 48 * kK);
    EXPECT_EQ(tight.make(&w1, "view", 40 * kK), nullptr) << "40 KiB fits the budget, the 64 KiB serving it not";
    EXPECT_EQ(tight.kept_bytes(), 0u);
    EXPECT_EQ(pool->in_use_bytes(), 0u);
  }
  opencl::WeightPanels panels(pool, 72 * kK);
  EXPECT_EQ(panels.make(&w1, "view", 40 * kK), large);
  EXPECT_EQ(panels.kept_bytes(), 64 * kK);
  ASSERT_NE(panels.make(&w2, "view", 8 * kK), nullptr);
  EXPECT_EQ(panels.kept_bytes(), 72 * kK);
  EXPECT_EQ(pool->in_use_bytes(), panels.kept_bytes()) << "what allocated_bytes counts";
  EXPECT_EQ(panels.make(&w1, "other view", 4 * kK), nullptr) << "one view per weight";
  EXPECT_EQ(panels.clear(), 72 * kK);
  EXPECT_EQ(pool->in_use_bytes(), 0u);
}

TEST_F(BufferPoolDevice, TensorsReuseBuffersAndOutliveTheirBackend) {
  Tensor kept;
  {
    auto be = std::move(be_);
    HostTensor h = HostTensor::from_f32({3, 5}, std::vector<float>(15, 2.5f));
    cl_mem first = nullptr;
    {
      Tensor t = be->upload(h);
      first = be->buffer(t);
    }
    Tensor again = be->empty({5, 3}, DType::f32);  // same bytes: the same buffer back
    EXPECT_EQ(be->buffer(again), first);
    EXPECT_GT(be->pool().reused(), 0u);
    kept = be->upload(h);
  }
  // The backend is gone; its pool lives on with the tensor and takes the buffer back when it dies.
  EXPECT_EQ(kept.numel(), 15);
  kept = Tensor();
}

// Guard buffers (BackendOptions::guard_bytes, on in the op suite): a write
// past the end of a tensor, inside the pool's size-class slack where no
// driver would notice, is reported when the buffer is released, naming it.
TEST_F(BufferPoolDevice, GuardsCatchAWritePastTheEnd) {
  BackendOptions opts;
  opts.use_kernel_cache = false;
  opts.guard_bytes = 64;
  opencl::OpenClBackend be(be_->device(), opts);
  {
    const Tensor clean = be.upload(HostTensor::from_f32({3}, {1, 2, 3}));
    EXPECT_EQ(be.download(clean).to_f32(), (std::vector<float>{1, 2, 3}));
  }
  EXPECT_TRUE(be.take_guard_violations().empty());
  {
    const Tensor t = be.upload(HostTensor::from_f32({3}, {1, 2, 3}));
    const float past = 7.0f;  // one float after the tensor's 12 bytes
    ASSERT_EQ(clEnqueueWriteBuffer(be.queue(), be.buffer(t), CL_TRUE, 12 + 4, sizeof past, &past, 0, nullptr, nullptr),
              CL_SUCCESS);
  }
  const std::vector<std::string> v = be.take_guard_violations();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("[3] f32"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("out-of-bounds write"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("first at byte 4"), std::string::npos) << v[0];
  EXPECT_TRUE(be.take_guard_violations().empty()) << "the list is cleared once taken";
}

// The memory pattern (memory_pattern.hpp): buffers whose lifetimes do not overlap share offsets, the arena is the
// live peak, and a buffer alive after the call is left to the pool.
TEST(MemoryPattern, BuffersAliveAtOnceGetDisjointPlacesAndTheArenaIsTheLivePeak) {
  using opencl::PatternRequest;
  // Events: 0 A(100) 1 B(50) 2 B freed 3 A freed 4 C(100) 5 D(30, alive at the end) 6 C freed.
  const std::vector<PatternRequest> requests{{100, 0, 3}, {50, 1, 2}, {100, 4, 6}, {30, 5, PatternRequest::kAlive}};
  const opencl::PatternPlan plan = opencl::plan_pattern(requests, 1);
  ASSERT_EQ(plan.places.size(), 4u);
  EXPECT_TRUE(plan.places[0].in_arena);
  EXPECT_EQ(plan.places[0].offset, 0u);
  EXPECT_EQ(plan.places[1].offset, 100u) << "B is alive with A";
  EXPECT_EQ(plan.places[2].offset, 0u) << "C comes after A is freed: A's place";
  EXPECT_FALSE(plan.places[3].in_arena) << "alive after the call: the pool's";
  EXPECT_EQ(plan.places[3].bytes, 30u);
  EXPECT_EQ(plan.arena_bytes, 150u);
  EXPECT_EQ(opencl::pattern_live_peak(requests, 1), 150u);
  // Rounded to the alignment: 100 -> 128, 50 -> 64.
  const opencl::PatternPlan aligned = opencl::plan_pattern(requests, 64);
  EXPECT_EQ(aligned.places[1].offset, 128u);
  EXPECT_EQ(aligned.arena_bytes, 192u);
}

// A chain whose stages grow (a VAE decoder: each stage's input, its norm and conv outputs, then a larger stage):
// an online pool of size classes either holds every stage's buffers or makes them again at every call; the plan
// holds the largest stage's alone.
TEST(MemoryPattern, AGrowingChainPacksIntoItsLargestStage) {
  using opencl::PatternRequest;
  std::vector<PatternRequest> requests;
  std::size_t event = 0;
  std::size_t prev = PatternRequest::kAlive;
  for (std::size_t stage = 0; stage < 5; ++stage) {
    const std::size_t bytes = std::size_t{4096} << (2 * stage);
    for (int op = 0; op < 4; ++op) {
      requests.push_back({bytes, event++});
      if (prev != PatternRequest::kAlive) requests[prev].released = event++;  // the op's input dies
      prev = requests.size() - 1;
    }
  }
  requests[prev].released = event++;
  const opencl::PatternPlan plan = opencl::plan_pattern(requests, 4096);
  EXPECT_EQ(plan.arena_bytes, opencl::pattern_live_peak(requests, 4096));
  EXPECT_EQ(plan.arena_bytes, 2 * (std::size_t{4096} << 8)) << "two of the last stage's buffers alive at once";
}

// A range of the arena held when the next call begins (the recorded call's output, placed in a lazy arena) is
// overlapped by no place.
TEST(MemoryPattern, HeldRangesAreKeptClear) {
  using opencl::PatternRequest;
  const std::vector<PatternRequest> requests{{100, 0, 1}, {50, 2, 3}};
  const std::vector<std::pair<std::size_t, std::size_t>> held{{0, 60}};
  const opencl::PatternPlan plan = opencl::plan_pattern(requests, 1, held);
  EXPECT_EQ(plan.places[0].offset, 60u) << "placed above the held range";
  EXPECT_EQ(plan.places[1].offset, 60u) << "after the first is freed, its place";
  EXPECT_EQ(plan.arena_bytes, 160u);
  EXPECT_EQ(opencl::plan_pattern(requests, 1).places[0].offset, 0u) << "with nothing held, the arena's start";
}

class RepeatedCalls : public BufferPoolDevice {
 protected:
  static bool sub_buffer(cl_mem m) {
    cl_mem parent = nullptr;
    EXPECT_EQ(clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, nullptr), CL_SUCCESS);
    return parent != nullptr;
  }
  void fill(cl_mem m, std::size_t bytes, unsigned char v) {
    const std::vector<unsigned char> data(bytes, v);
    ASSERT_EQ(clEnqueueWriteBuffer(be_->queue(), m, CL_TRUE, 0, bytes, data.data(), 0, nullptr, nullptr), CL_SUCCESS);
  }
  static std::size_t offset(cl_mem m) {
    std::size_t at = 0;
    EXPECT_EQ(clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof at, &at, nullptr), CL_SUCCESS);
    return at;
  }
  bool holds(cl_mem m, std::size_t bytes, unsigned char v) {
    std::vector<unsigned char> data(bytes);
    EXPECT_EQ(clEnqueueReadBuffer(be_->queue(), m, CL_TRUE, 0, bytes, data.data(), 0, nullptr, nullptr), CL_SUCCESS);
    return std::all_of(data.begin(), data.end(), [v](unsigned char x) { return x == v; });
  }
};

constexpr std::size_t kKiB = 1024;

// The second call of a key is served from one arena, planned from the first: sub-buffers at the planned places,
// the arena the call's live peak, nothing made by the driver from the third call on, and the buffer alive after
// the call (its output) from the pool.
TEST_F(RepeatedCalls, TheSecondCallIsServedFromOneArenaPlannedFromTheFirst) {
  BufferPool pool(be_->context(), 64 << 20);
  cl_int err = CL_SUCCESS;
  std::vector<cl_mem> outputs;
  std::size_t created_after_second = 0;
  for (int call = 0; call < 4; ++call) {
    SCOPED_TRACE("call " + std::to_string(call + 1));
    pool.begin_repeat("chain");
    cl_mem a = pool.acquire(64 * kKiB, err);
    cl_mem b = pool.acquire(100 * kKiB, err);
    ASSERT_EQ(err, CL_SUCCESS);
    const bool a_sub = sub_buffer(a), b_sub = sub_buffer(b);  // asked now: a sub-buffer given back is gone
    fill(a, 64 * kKiB, 0xA1);
    fill(b, 100 * kKiB, 0xB2);
    EXPECT_TRUE(holds(a, 64 * kKiB, 0xA1)) << "a and b are alive at once: their places do not overlap";
    pool.release(a, 64 * kKiB);
    cl_mem c = pool.acquire(60 * kKiB, err);
    const bool c_sub = sub_buffer(c);
    fill(c, 60 * kKiB, 0xC3);
    EXPECT_TRUE(holds(b, 100 * kKiB, 0xB2));
    cl_mem out = pool.acquire(8 * kKiB, err);
    pool.release(b, 100 * kKiB);
    pool.release(c, 60 * kKiB);
    pool.end_repeat(true);
    EXPECT_FALSE(sub_buffer(out)) << "alive after the call: the pool's";
    if (call == 0) {
      EXPECT_FALSE(a_sub || b_sub || c_sub);
      EXPECT_EQ(pool.counts().replayed, 0u);
      EXPECT_EQ(pool.arena_bytes(), 0u) << "made when the pattern is first followed";
    } else {
      EXPECT_TRUE(a_sub && b_sub && c_sub);
      EXPECT_EQ(pool.counts().replayed, 3u * call);
      EXPECT_EQ(pool.arena_bytes(), 164 * kKiB) << "b alive with a, then with c in a's place";
      EXPECT_EQ(pool.counts().arenas_made, 1u);
    }
    if (call == 1) created_after_second = pool.counts().created;
    if (call > 1) {
      EXPECT_EQ(pool.counts().created, created_after_second) << "nothing made by the driver";
    }
    pool.release(out, 8 * kKiB);
    EXPECT_EQ(pool.in_use_bytes(), 0u);
  }
  pool.trim();
  EXPECT_EQ(pool.arena_bytes(), 0u) << "an idle arena goes with the kept buffers";
}

// A call that asks for another size than its pattern is served by the pool from there on, and becomes the
// pattern; a buffer kept longer than in the pattern keeps its place, and the request planned over it comes from
// the pool; a call ended by an exception plans nothing.
TEST_F(RepeatedCalls, ACallThatStraysIsServedByThePoolAndBecomesThePattern) {
  BufferPool pool(be_->context(), 64 << 20);
  cl_int err = CL_SUCCESS;
  const auto call = [&](std::size_t second, bool keep_first_longer) {
    pool.begin_repeat("k");
    cl_mem a = pool.acquire(64 * kKiB, err);
    if (!keep_first_longer) pool.release(a, 64 * kKiB);
    cl_mem b = pool.acquire(second, err);
    const bool b_sub = sub_buffer(b);
    if (keep_first_longer) {
      fill(a, 64 * kKiB, 0x11);
      fill(b, second, 0x22);
      EXPECT_TRUE(holds(a, 64 * kKiB, 0x11)) << "b was planned over a, which is still alive";
      pool.release(a, 64 * kKiB);
    }
    pool.release(b, second);
    pool.end_repeat(true);
    return b_sub;
  };
  call(64 * kKiB, false);               // recorded: a then b in the same place
  EXPECT_TRUE(call(64 * kKiB, false));  // followed
  EXPECT_EQ(pool.arena_bytes(), 64 * kKiB);
  const std::size_t replayed = pool.counts().replayed;
  EXPECT_FALSE(call(32 * kKiB, false)) << "another size: the pool's";
  EXPECT_EQ(pool.counts().replayed, replayed + 1) << "a was still the pattern's";
  EXPECT_TRUE(call(32 * kKiB, false)) << "the strayed call is the pattern now";
  EXPECT_FALSE(call(32 * kKiB, true)) << "a kept past b's request: b from the pool";

  pool.begin_repeat("thrown");
  pool.release(pool.acquire(4 * kKiB, err), 4 * kKiB);
  pool.end_repeat(false);
  pool.begin_repeat("thrown");
  cl_mem m = pool.acquire(4 * kKiB, err);
  EXPECT_FALSE(sub_buffer(m)) << "nothing was planned from a call that did not complete";
  pool.release(m, 4 * kKiB);
  pool.end_repeat(true);
}

// With a lazy arena (a CPU device), the first call is served from the arena too, each request in the smallest gap
// that holds it, and nothing is made by the driver but the arena; its output, still alive during the next call
// (a UNet's noise prediction while the sampler steps), is a place the plan keeps clear, so the next call follows
// the plan; what the plan leaves to the pool comes from the pool.
TEST_F(RepeatedCalls, WithALazyArenaTheFirstCallIsPlacedInItsGaps) {
  BufferPool pool(be_->context(), 64 << 20, false, true, 16 << 20);
  cl_int err = CL_SUCCESS;
  cl_mem previous_out = nullptr;
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call + 1));
    pool.begin_repeat("chain");
    if (call == 0) {
      EXPECT_EQ(pool.arena_bytes(), std::size_t{16} << 20) << "made once, at its capacity";
    }
    cl_mem a = pool.acquire(64 * kKiB, err);
    cl_mem b = pool.acquire(100 * kKiB, err);
    ASSERT_EQ(err, CL_SUCCESS);
    ASSERT_TRUE(sub_buffer(a) && sub_buffer(b));
    fill(a, 64 * kKiB, 0xA1);
    fill(b, 100 * kKiB, 0xB2);
    const std::size_t a_at = offset(a);  // asked now: a sub-buffer given back is gone
    pool.release(a, 64 * kKiB);
    cl_mem c = pool.acquire(60 * kKiB, err);
    ASSERT_TRUE(sub_buffer(c));
    if (call == 0) {
      EXPECT_EQ(offset(c), a_at) << "a's place, given back, is the smallest gap that holds c";
    }
    fill(c, 60 * kKiB, 0xC3);
    EXPECT_TRUE(holds(b, 100 * kKiB, 0xB2));
    // 4 KiB: the gap c left in a's place. The plan puts b (the largest) at the arena's start, over it, unless
    // the output, alive when the next call begins, is kept clear.
    cl_mem out = pool.acquire(4 * kKiB, err);
    if (call == 0) {
      EXPECT_EQ(offset(out), a_at + 60 * kKiB);
    }
    fill(out, 4 * kKiB, 0xEE);
    pool.release(b, 100 * kKiB);
    pool.release(c, 60 * kKiB);
    pool.end_repeat(true);
    if (previous_out != nullptr) {
      EXPECT_TRUE(holds(previous_out, 4 * kKiB, 0xEE)) << "the last call's output, alive during this one";
      pool.release(previous_out, 4 * kKiB);
    }
    previous_out = out;
    if (call == 0) {
      EXPECT_TRUE(sub_buffer(out)) << "placed: nothing tells the first call that it outlives it";
      EXPECT_EQ(pool.counts().placed, 4u);
      EXPECT_EQ(pool.counts().created, 0u) << "nothing made by the driver but the arena";
    } else {
      EXPECT_FALSE(sub_buffer(out)) << "alive after the call in the pattern: the pool's";
      EXPECT_EQ(pool.counts().replayed, 3u * call) << "the plan followed: b's place keeps clear of the held output";
      EXPECT_EQ(pool.counts().placed, 4u);
    }
    EXPECT_EQ(pool.counts().arenas_made, 1u);
  }
  pool.release(previous_out, 4 * kKiB);
  EXPECT_EQ(pool.in_use_bytes(), 0u);
  // A buffer the caller keeps past the call (weight panels) is neither placed nor part of the pattern.
  pool.begin_repeat("chain");
  cl_mem kept = pool.acquire(32 * kKiB, err, nullptr, /*lasting=*/true);
  EXPECT_FALSE(sub_buffer(kept));
  cl_mem a = pool.acquire(64 * kKiB, err);
  EXPECT_TRUE(sub_buffer(a)) << "the lasting request did not move the call off its pattern";
  EXPECT_EQ(pool.counts().replayed, 7u) << "calls 2 and 3, and a";
  pool.release(a, 64 * kKiB);
  pool.release(kept, 32 * kKiB);
  pool.end_repeat(false);
  pool.trim();
  EXPECT_EQ(pool.arena_bytes(), 0u) << "an idle arena goes with the kept buffers";
}

// A request no gap of a lazy arena holds comes from the pool; a lazy arena the driver refuses leaves arenas sized by
// their plans (as on a GPU).
TEST_F(RepeatedCalls, ALazyArenaFallsBackToThePool) {
  cl_int err = CL_SUCCESS;
  {
    BufferPool pool(be_->context(), 64 << 20, false, true, 256 * kKiB);
    pool.begin_repeat("k");
    cl_mem small = pool.acquire(200 * kKiB, err);
    cl_mem large = pool.acquire(100 * kKiB, err);
    EXPECT_TRUE(sub_buffer(small));
    EXPECT_FALSE(sub_buffer(large)) << "56 KiB left in the arena: the pool's";
    pool.release(small, 200 * kKiB);
    pool.release(large, 100 * kKiB);
    pool.end_repeat(true);
  }
  BufferPool pool(be_->context(), 64 << 20, false, true, std::size_t{1} << 62);  // past any device's largest buffer
  for (int call = 0; call < 2; ++call) {
    pool.begin_repeat("k");
    cl_mem m = pool.acquire(16 * kKiB, err);
    ASSERT_EQ(err, CL_SUCCESS);
    EXPECT_EQ(sub_buffer(m), call == 1) << "the first call the pool's, the second from the planned arena";
    pool.release(m, 16 * kKiB);
    pool.end_repeat(true);
  }
  EXPECT_EQ(pool.arena_bytes(), 16 * kKiB) << "the plan's size";
}

// A key that strays every call is the pool's, and leaves the arena of a key that follows its plan alone (on a GPU
// an arena's memory is committed when it is made).
TEST_F(RepeatedCalls, AKeyPastItsStraysLeavesTheArenaToOthers) {
  BufferPool pool(be_->context(), 64 << 20);
  cl_int err = CL_SUCCESS;
  const auto call = [&](const std::string& key, std::size_t bytes) {
    pool.begin_repeat(key);
    cl_mem m = pool.acquire(bytes, err);
    const bool sub = sub_buffer(m);
    pool.release(m, bytes);
    pool.end_repeat(true);
    return sub;
  };
  call("steady", 64 * kKiB);
  for (int i = 0; i < 6; ++i) call("changing", (8 + 4 * i) * kKiB);  // another size at every call
  EXPECT_TRUE(call("steady", 64 * kKiB));
  const std::size_t made = pool.counts().arenas_made;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(call("changing", (40 + 4 * i) * kKiB));
    EXPECT_TRUE(call("steady", 64 * kKiB));
  }
  EXPECT_EQ(pool.counts().arenas_made, made) << "the steady key's arena was not made again";
}

// Without reuse (a pool that keeps nothing, or call_arena off) and on a simulator (an exact pool: a buffer per
// request, where its bounds checks see every overrun), no arena.
// The process's resident memory in bytes (/proc/self/statm).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// A lazy arena is made afresh at a new key's first call (the image size changed) when its calls reached past 1/32
// of it and nothing in it is alive: the pages they touched are given back, on a CPU device where a buffer's pages
// are taken where it is written. Not while a buffer in it is alive (img2img's encoded latents at the UNet's first
// call), nor for a key known before, nor when its calls stayed small.
TEST_F(RepeatedCalls, ANewKeyMakesALazyArenaAfreshWhenNothingInItIsAlive) {
  const bool cpu = be_->device().kind == DeviceKind::cpu;
  cl_int err = CL_SUCCESS;
  const auto call = [&](BufferPool& pool, const std::string& key, std::size_t bytes, bool write) {
    pool.begin_repeat(key);
    cl_mem m = pool.acquire(bytes, err);
    EXPECT_EQ(err, CL_SUCCESS);
    EXPECT_TRUE(sub_buffer(m)) << key;
    if (write) fill(m, bytes, 0x5A);
    pool.release(m, bytes);
    pool.end_repeat(true);
  };
  {
    BufferPool pool(be_->context(), 64 << 20, false, true, std::size_t{256} << 20);  // renewed past 8 MiB
    call(pool, "1024", std::size_t{64} << 20, true);
    const std::size_t before = resident_bytes();
    call(pool, "512", 1 << 20, false);
    EXPECT_EQ(pool.counts().arenas_made, 2u) << "a new key, 64 MiB reached, nothing alive: made afresh";
    if (cpu) {
      EXPECT_GT(before, resident_bytes() + (std::size_t{48} << 20)) << "the 64 MiB written are given back";
    }
    call(pool, "512", 1 << 20, false);
    call(pool, "1024", std::size_t{64} << 20, false);
    EXPECT_EQ(pool.counts().arenas_made, 2u) << "keys known before: the same arena";
    EXPECT_EQ(pool.counts().replayed, 2u);
    // A buffer alive in the arena (the output of the last call) keeps it.
    pool.begin_repeat("encode");
    cl_mem held = pool.acquire(std::size_t{16} << 20, err);
    pool.end_repeat(true);
    EXPECT_EQ(pool.counts().arenas_made, 3u) << "a new key again, 64 MiB reached before it";
    call(pool, "unet", 1 << 20, false);
    EXPECT_EQ(pool.counts().arenas_made, 3u) << "a buffer in it is alive";
    pool.release(held, std::size_t{16} << 20);
  }
  BufferPool pool(be_->context(), 64 << 20, false, true, std::size_t{256} << 20);
  call(pool, "a", 4 << 20, false);
  call(pool, "b", 4 << 20, false);
  EXPECT_EQ(pool.counts().arenas_made, 1u) << "4 MiB reached: below 1/32 of the arena, kept";
}

TEST_F(RepeatedCalls, NoArenaWithoutReuseOrInAnExactPool) {
  for (const auto& [keep, exact, arena] :
       {std::tuple{std::size_t{0}, false, true}, std::tuple{std::size_t{64} << 20, true, true},
        std::tuple{std::size_t{64} << 20, false, false}}) {
    BufferPool pool(be_->context(), keep, exact, arena);
    cl_int err = CL_SUCCESS;
    for (int call = 0; call < 2; ++call) {
      pool.begin_repeat("k");
      cl_mem m = pool.acquire(16 * kKiB, err);
      EXPECT_FALSE(sub_buffer(m));
      pool.release(m, 16 * kKiB);
      pool.end_repeat(true);
    }
    EXPECT_EQ(pool.counts().replayed, 0u);
  }
}

}  // namespace
}  // namespace nanscope
