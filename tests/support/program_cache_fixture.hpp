#pragma once
// The kernel cache's test fixture (tests/test_program_cache.cpp,
// tests/test_kernel_builds.cpp): a backend on the test device for its context
// and queue, caches made per test in their own folders, and a one-kernel
// program whose results tell its build options apart.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "backend/opencl/program_cache.hpp"
#include "core/log.hpp"
#include "support/backends.hpp"

namespace nanscope::opencl {

namespace fs = std::filesystem;

// SCALE comes from the build options, so a program built with other options
// (or loaded from another key's entry) gives visibly different numbers.
constexpr const char* kVaddSource = R"CL(
__kernel void vadd(__global const float* a, __global const float* b, __global float* c, uint n) {
  const size_t i = get_global_id(0);
  if (i < n) c[i] = a[i] + SCALE * b[i];
}
)CL";

inline std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_bytes(const fs::path& p, const std::vector<char>& b) {
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

}  // namespace nanscope::opencl
