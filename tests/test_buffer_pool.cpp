// The OpenCL backend's buffer pool: size classes, reuse of released buffers,
// the cap on what is kept, and tensors that outlive their backend.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "backend/opencl/buffer_pool.hpp"
#include "backend/opencl/opencl_backend.hpp"
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

}  // namespace
}  // namespace nanscope
