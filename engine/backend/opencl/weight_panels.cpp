#include "backend/opencl/weight_panels.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace nanscope::opencl {

WeightPanels::WeightPanels(std::shared_ptr<BufferPool> pool, std::size_t budget_bytes)
    : pool_(std::move(pool)), configured_(budget_bytes), budget_(budget_bytes) {}

WeightPanels::~WeightPanels() { clear(); }

cl_mem WeightPanels::find(const Storage* weight, const std::string& key) {
  std::lock_guard lock(mu_);
  const auto it = kept_.find(weight);
  if (it == kept_.end() || it->second.key != key) return nullptr;
  it->second.ahead = false;
  return it->second.mem;
}

cl_mem WeightPanels::make(const Storage* weight, const std::string& key, std::size_t bytes, bool ahead) {
  Entry unused;  // panels packed ahead under another key, given back
  {
    std::lock_guard lock(mu_);
    if (const auto it = kept_.find(weight); it != kept_.end()) {
      if (ahead || !it->second.ahead) return nullptr;
      unused = std::move(it->second);
      kept_.erase(it);
      kept_bytes_ -= unused.bytes;
    }
  }
  if (unused.mem) pool_->release(unused.mem, unused.bytes);
  // Counted at the size the pool serves (what allocated_bytes counts): the budget is the memory plan's room.
  const std::size_t reserved = pool_->served_size(bytes);
  {
    std::lock_guard lock(mu_);
    if (kept_bytes_ + reserved > budget_) return nullptr;
    kept_bytes_ += reserved;  // reserved while the buffer is made
  }
  cl_int err = CL_SUCCESS;
  std::size_t served = reserved;
  cl_mem mem = pool_->acquire(bytes, err, &served, /*lasting=*/true);  // kept with the weight, past any call
  {
    std::lock_guard lock(mu_);
    kept_bytes_ -= reserved;
    // A kept buffer of a larger class may serve the request: kept only if that still fits the budget.
    if (err == CL_SUCCESS && mem && kept_bytes_ + served <= budget_ &&
        kept_.emplace(weight, Entry{mem, served, key, ahead}).second) {
      kept_bytes_ += served;
      return mem;
    }
    // No room on the device or in the budget (or another thread kept this weight's panels first).
  }
  if (mem) pool_->release(mem, bytes);
  return nullptr;  // packed per call, as without the cache
}

void WeightPanels::forget(const Storage* weight) {
  Entry e;
  {
    std::lock_guard lock(mu_);
    const auto it = kept_.find(weight);
    if (it == kept_.end()) return;
    e = std::move(it->second);
    kept_.erase(it);
    kept_bytes_ -= e.bytes;
  }
  pool_->release(e.mem, e.bytes);
}

std::size_t WeightPanels::clear() {
  std::vector<Entry> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [weight, e] : kept_) all.push_back(std::move(e));
    kept_.clear();
    kept_bytes_ = 0;
  }
  std::size_t freed = 0;
  for (const Entry& e : all) {
    pool_->release(e.mem, e.bytes);
    freed += e.bytes;
  }
  return freed;
}

void WeightPanels::limit_growth(std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  const std::uint64_t room = std::min<std::uint64_t>(bytes, configured_);
  budget_ = static_cast<std::size_t>(std::min<std::uint64_t>(configured_, kept_bytes_ + room));
}

std::size_t WeightPanels::budget_bytes() const {
  std::lock_guard lock(mu_);
  return budget_;
}

std::size_t WeightPanels::kept_bytes() const {
  std::lock_guard lock(mu_);
  return kept_bytes_;
}

}  // namespace nanscope::opencl
