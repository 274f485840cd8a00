#include "backend/opencl/buffer_pool.hpp"

#include <algorithm>
#include <bit>

#include "backend/opencl/cl_check.hpp"

namespace nanscope::opencl {

namespace {

// The statuses with which a driver says it has no memory for a buffer (then the pool gives memory back and retries).
bool out_of_memory(cl_int err) {
  return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY;
}

}  // namespace

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

void BufferPool::set_drain(std::function<void()> drain) {
  std::lock_guard<std::mutex> lock(mu_);
  drain_ = std::move(drain);
}

void BufferPool::set_relief(std::function<std::size_t()> relief) {
  std::lock_guard<std::mutex> lock(mu_);
  relief_ = std::move(relief);
}

cl_mem BufferPool::take_kept(std::size_t size, std::size_t& served) {
  auto it = free_.find(size);
  // An exact pool serves every request at its own size (see the header).
  if (it == free_.end() && !exact_) {
    it = free_.upper_bound(size);
    if (it != free_.end() && it->first > 2 * size) it = free_.end();
  }
  if (it == free_.end()) return nullptr;
  served = it->first;
  cl_mem m = it->second.back().mem;
  it->second.pop_back();
  if (it->second.empty()) free_.erase(it);
  kept_ -= served;
  return m;
}

std::vector<cl_mem> BufferPool::evict_for(std::size_t size) {
  std::vector<cl_mem> out;
  // An eighth above the mark: repeated runs whose weights dominate the mark (a
  // UNet's 3.4 GB against ~100 MB of activations) would otherwise give back and
  // touch afresh buffers of every step.
  const std::size_t ceiling = std::max(peak_in_use_ + peak_in_use_ / 8, in_use_ + size);
  while (kept_ > 0 && in_use_ + kept_ + size > ceiling) {
    // The class asked for least recently; among equals, the oldest release.
    auto victim = free_.end();
    std::uint64_t victim_request = 0;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const auto r = last_request_.find(it->first);
      const std::uint64_t request = r == last_request_.end() ? 0 : r->second;
      if (victim == free_.end() || request < victim_request ||
          (request == victim_request && it->second.front().released < victim->second.front().released)) {
        victim = it;
        victim_request = request;
      }
    }
    out.push_back(victim->second.front().mem);
    victim->second.erase(victim->second.begin());
    kept_ -= victim->first;
    if (victim->second.empty()) free_.erase(victim);
  }
  return out;
}

cl_mem BufferPool::acquire(std::size_t bytes, cl_int& err, std::size_t* served_out) {
  const std::size_t size = served_size(bytes);
  std::vector<cl_mem> evicted;
  std::function<void()> drain;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_request_[size] = ++requests_;
    std::size_t served = size;
    if (cl_mem m = take_kept(size, served)) {
      served_[m] = served;
      in_use_ += served;
      peak_in_use_ = std::max(peak_in_use_, in_use_);
      ++reused_;
      err = CL_SUCCESS;
      if (served_out) *served_out = served;
      return m;
    }
    evicted = evict_for(size);
    if (!evicted.empty()) drain = drain_;
  }
  if (drain) drain();
  for (cl_mem m : evicted) NS_CL_CHECK_NOTHROW(clReleaseMemObject(m));
  cl_mem m = clCreateBuffer(context_, CL_MEM_READ_WRITE, size, nullptr, &err);
  if (out_of_memory(err)) {
    trim();  // the kept buffers may be what is missing
    m = clCreateBuffer(context_, CL_MEM_READ_WRITE, size, nullptr, &err);
  }
  if (out_of_memory(err)) {
    std::function<std::size_t()> relief;
    {
      std::lock_guard<std::mutex> lock(mu_);
      relief = relief_;
    }
    if (relief && relief() > 0) {  // other caches' buffers, given back to this pool: free them too
      trim();
      m = clCreateBuffer(context_, CL_MEM_READ_WRITE, size, nullptr, &err);
    }
  }
  if (err != CL_SUCCESS) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  served_[m] = size;
  in_use_ += size;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  if (served_out) *served_out = size;
  return m;
}

void BufferPool::release(cl_mem mem, std::size_t bytes) {
  if (!mem) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::size_t size = served_size(bytes);
    if (const auto it = served_.find(mem); it != served_.end()) {
      size = it->second;
      served_.erase(it);
    }
    in_use_ -= std::min(in_use_, size);
    if (kept_ + size <= max_kept_) {
      free_[size].push_back(Kept{mem, releases_++});
      kept_ += size;
      return;
    }
  }
  NS_CL_CHECK_NOTHROW(clReleaseMemObject(mem));
}

void BufferPool::trim() {
  std::map<std::size_t, std::vector<Kept>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(free_);
    kept_ = 0;
  }
  for (auto& [size, kept] : all)
    for (const Kept& k : kept) NS_CL_CHECK_NOTHROW(clReleaseMemObject(k.mem));
}

std::size_t BufferPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_;
}

std::size_t BufferPool::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

std::size_t BufferPool::peak_in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_in_use_;
}

std::size_t BufferPool::reused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_;
}

}  // namespace nanscope::opencl
