#include "backend/opencl/buffer_pool.hpp"

#include <algorithm>
#include <bit>

#include "backend/opencl/cl_check.hpp"

namespace nanscope::opencl {

BufferPool::BufferPool(cl_context context, std::size_t max_kept_bytes, bool exact)
    : context_(context), max_kept_(max_kept_bytes), exact_(exact) {
  NS_CL_CHECK(clRetainContext(context_));
}

BufferPool::~BufferPool() {
  trim();
  NS_CL_CHECK_NOTHROW(clReleaseContext(context_));
}

std::size_t BufferPool::size_class(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  bytes = std::max<std::size_t>(bytes, 1);
  if (bytes <= 16 * kPage) return (bytes + kPage - 1) / kPage * kPage;
  const std::size_t step = std::bit_floor(bytes - 1) / 8;
  return (bytes + step - 1) / step * step;
}

std::size_t BufferPool::served_size(std::size_t bytes) const {
  return exact_ ? std::max<std::size_t>(bytes, 1) : size_class(bytes);
}

cl_mem BufferPool::acquire(std::size_t bytes, cl_int& err) {
  const std::size_t size = served_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      cl_mem m = it->second.back();
      it->second.pop_back();
      kept_ -= size;
      in_use_ += size;
      ++reused_;
      err = CL_SUCCESS;
      return m;
    }
  }
  cl_mem m = clCreateBuffer(context_, CL_MEM_READ_WRITE, size, nullptr, &err);
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY) {
    trim();  // the kept buffers may be what is missing
    m = clCreateBuffer(context_, CL_MEM_READ_WRITE, size, nullptr, &err);
  }
  if (err != CL_SUCCESS) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ += size;
  return m;
}

void BufferPool::release(cl_mem mem, std::size_t bytes) {
  if (!mem) return;
  const std::size_t size = served_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= std::min(in_use_, size);
    if (kept_ + size <= max_kept_) {
      free_[size].push_back(mem);
      kept_ += size;
      return;
    }
  }
  NS_CL_CHECK_NOTHROW(clReleaseMemObject(mem));
}

void BufferPool::trim() {
  std::map<std::size_t, std::vector<cl_mem>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(free_);
    kept_ = 0;
  }
  for (auto& [size, mems] : all)
    for (cl_mem m : mems) NS_CL_CHECK_NOTHROW(clReleaseMemObject(m));
}

std::size_t BufferPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_;
}

std::size_t BufferPool::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

std::size_t BufferPool::reused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_;
}

}  // namespace nanscope::opencl
