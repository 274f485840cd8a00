#include "backend/opencl/buffer_pool.hpp"

#include <algorithm>
#include <bit>
#include <new>
#include <utility>

#include "backend/opencl/cl_check.hpp"
#include "core/log.hpp"

namespace nanscope::opencl {

namespace {

// The statuses with which a driver says it has no memory for a buffer (then the pool gives memory back and retries).
bool out_of_memory(cl_int err) {
  return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY;
}

// Sub-buffers start at multiples of every device's CL_DEVICE_MEM_BASE_ADDR_ALIGN, and at least of a page (the
// alignment the pool's own buffers have on CPU devices, which the kernels' vector accesses are tuned for).
std::size_t sub_buffer_alignment(cl_context context) {
  std::size_t align = 4096;
  std::size_t bytes = 0;
  if (clGetContextInfo(context, CL_CONTEXT_DEVICES, 0, nullptr, &bytes) != CL_SUCCESS) return align;
  std::vector<cl_device_id> devices(bytes / sizeof(cl_device_id));
  if (clGetContextInfo(context, CL_CONTEXT_DEVICES, bytes, devices.data(), nullptr) != CL_SUCCESS) return align;
  for (cl_device_id d : devices) {
    cl_uint bits = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, nullptr) == CL_SUCCESS)
      align = std::max<std::size_t>(align, std::bit_ceil(std::max<cl_uint>(bits / 8, 1)));
  }
  return align;
}

// Calls in a row that may stray from their key's pattern before the key is served by the pool alone: a call whose
// requests change every time would otherwise be planned anew, and its arena made again, at every call.
constexpr int kMaxStrays = 3;
// Patterns kept, of different keys (a UNet call and a VAE decode at a size or two, traced or not).
constexpr std::size_t kMaxPatterns = 8;
// A lazy arena whose calls have reached past this share of its capacity is made afresh at a new key's first call
// when nothing in it is alive (begin_repeat): 256 MiB of an 8 GiB arena.
constexpr std::size_t kRenewShare = 32;

constexpr std::size_t kNoRequest = static_cast<std::size_t>(-1);

}  // namespace

BufferPool::BufferPool(cl_context context, std::size_t max_kept_bytes, bool exact, bool arena,
                       std::size_t lazy_arena_bytes)
    : context_(context),
      max_kept_(max_kept_bytes),
      exact_(exact),
      arena_enabled_(arena && !exact && max_kept_bytes > 0),
      align_(sub_buffer_alignment(context)),
      lazy_arena_bytes_(arena_enabled_ ? lazy_arena_bytes / align_ * align_ : 0) {
  NS_CL_CHECK(clRetainContext(context_));
}

BufferPool::~BufferPool() {
  trim();
  // Tensors give their buffers back before the pool goes (they hold it), so no sub-buffer is left; an arena is.
  for (const auto& [mem, sub] : subs_) NS_CL_CHECK_NOTHROW(clReleaseMemObject(mem));
  for (const auto& [parent, live] : arena_live_) NS_CL_CHECK_NOTHROW(clReleaseMemObject(parent));
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
  // The mark counts the classes asked for, not the (up to twice larger) kept buffers that served them: counted as
  // served, each larger buffer handed out raised the mark and with it what may be kept, a ratchet that let a
  // 512x512 VAE decode's kept buffers grow by 180 MB over three calls.
  const std::size_t ceiling = std::max(peak_asked_ + peak_asked_ / 8, in_use_ + size);
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

cl_mem BufferPool::acquire(std::size_t bytes, cl_int& err, std::size_t* served_out, bool lasting) {
  const std::size_t size = served_size(bytes);
  std::vector<cl_mem> evicted;
  std::function<void()> drain;
  std::size_t request = kNoRequest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_request_[size] = ++requests_;
    if (depth_ > 0 && !lasting) {
      request = recording_.size();
      recording_.push_back(PatternRequest{bytes, events_++});
      cl_mem m = replay(request, bytes, size);
      // What a followed plan leaves to the pool (alive after the call) is the pool's: placed in a gap, it would be
      // alive where the next call's plan puts its buffers.
      if (m == nullptr && !replaying_) m = place(request, bytes, size);
      if (m != nullptr) {
        err = CL_SUCCESS;
        if (served_out) *served_out = subs_.at(m).bytes;
        return m;
      }
    }
    std::size_t served = size;
    if (cl_mem m = take_kept(size, served)) {
      hand_out(m, served, size, request);
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
  ++created_;
  hand_out(m, size, size, request);
  if (served_out) *served_out = size;
  return m;
}

void BufferPool::count_out(std::size_t served, std::size_t asked) {
  in_use_ += served;
  asked_ += asked;
  peak_asked_ = std::max(peak_asked_, asked_);
}

void BufferPool::count_back(std::size_t served, std::size_t asked) {
  in_use_ -= std::min(in_use_, served);
  asked_ -= std::min(asked_, asked);
}

void BufferPool::hand_out(cl_mem m, std::size_t served, std::size_t asked, std::size_t request) {
  served_[m] = Served{served, asked};
  count_out(served, asked);
  if (request != kNoRequest && depth_ > 0) recorded_[m] = request;
}

cl_mem BufferPool::make_sub(std::size_t offset, std::size_t bytes, std::size_t asked, std::size_t request) {
  const cl_buffer_region region{offset, bytes};
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateSubBuffer(arena_, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  if (err != CL_SUCCESS || m == nullptr) return nullptr;
  try {
    subs_[m] = Sub{arena_, offset, bytes, asked};
    arena_taken_[offset] = offset + bytes;
    recorded_[m] = request;
  } catch (...) {  // no memory for the bookkeeping: nothing of the sub-buffer is left counted
    subs_.erase(m);
    arena_taken_.erase(offset);
    recorded_.erase(m);
    NS_CL_CHECK_NOTHROW(clReleaseMemObject(m));
    throw;
  }
  ++arena_live_[arena_];  // the arena's entry exists (make_arena): no allocation
  arena_top_ = std::max(arena_top_, offset + bytes);
  count_out(bytes, asked);
  return m;
}

cl_mem BufferPool::place(std::size_t request, std::size_t bytes, std::size_t asked) {
  if (!placing_ || arena_ == nullptr) return nullptr;
  const std::size_t rounded = pattern_bytes(bytes, align_);
  // The smallest gap that holds it: the large gaps stay whole for the larger buffers a growing chain asks for
  // next. The space above the last live sub-buffer is one more gap, usually the largest (and the one whose pages
  // past the highest offset used so far are not yet touched), so it is usually taken last.
  std::size_t best = kNoRequest, best_size = 0;
  const auto consider = [&](std::size_t begin, std::size_t end) {
    if (end >= begin + rounded && (best == kNoRequest || end - begin < best_size)) {
      best = begin;
      best_size = end - begin;
    }
  };
  std::size_t free_from = 0;
  for (const auto& [offset, end] : arena_taken_) {
    if (offset > free_from) consider(free_from, offset);
    free_from = std::max(free_from, end);
  }
  if (arena_bytes_ > free_from) consider(free_from, arena_bytes_);
  if (best == kNoRequest) return nullptr;  // no gap holds it: the pool's
  cl_mem m = make_sub(best, rounded, asked, request);
  if (m == nullptr) {
    placing_ = false;  // the driver refuses sub-buffers: the pool serves the rest of the call
    return nullptr;
  }
  ++placed_;
  return m;
}

cl_mem BufferPool::replay(std::size_t request, std::size_t bytes, std::size_t asked) {
  if (!replaying_) return nullptr;
  const PatternPlan& plan = patterns_.at(key_).plan;
  if (request >= plan.places.size() || plan.places[request].bytes != bytes || arena_ == nullptr) {
    replaying_ = false;  // the call strayed from the pattern: the pool serves the rest of it
    return nullptr;
  }
  const PatternPlan::Slot& slot = plan.places[request];
  if (!slot.in_arena) return nullptr;  // alive after the call in the recording: the pool's
  const std::size_t rounded = pattern_bytes(bytes, align_);
  // A buffer that lives longer than in the recording (kept by a caller, or the call strayed in when it gives
  // buffers back) still holds its part of the arena: nothing is placed over a live sub-buffer.
  const std::size_t end = slot.offset + rounded;
  if (auto it = arena_taken_.lower_bound(end); it != arena_taken_.begin() && (--it)->second > slot.offset) {
    replaying_ = false;
    return nullptr;
  }
  cl_mem m = make_sub(slot.offset, rounded, asked, request);
  if (m == nullptr) {
    replaying_ = false;
    return nullptr;
  }
  ++replayed_;
  return m;
}

cl_mem BufferPool::drop_arena() {
  cl_mem idle = nullptr;
  if (arena_ != nullptr && arena_live_.at(arena_) == 0) {
    arena_live_.erase(arena_);
    idle = arena_;
  }
  arena_ = nullptr;
  arena_bytes_ = 0;
  arena_top_ = 0;
  arena_taken_.clear();
  replaying_ = placing_ = false;
  return idle;
}

bool BufferPool::make_arena(std::size_t bytes, std::vector<cl_mem>& release) {
  cl_int err = CL_SUCCESS;
  cl_mem arena = clCreateBuffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &err);
  if (err != CL_SUCCESS || arena == nullptr) return false;  // the pool serves the call, as before there was one
  arena_ = arena;
  arena_bytes_ = bytes;
  arena_top_ = 0;
  arena_live_[arena_] = 0;
  ++arenas_made_;
  // The buffers the pool keeps are what the arena replaces (a recording's, or those of the work before the call).
  for (auto& [size, kept] : free_)
    for (const Kept& k : kept) release.push_back(k.mem);
  free_.clear();
  kept_ = 0;
  return true;
}

void BufferPool::begin_repeat(const std::string& key) {
  // A simulator's bounds checks need a buffer per request (see the header); a pool that keeps nothing reuses nothing.
  if (!arena_enabled_) return;
  std::vector<cl_mem> release;
  std::function<void()> drain;
  std::size_t make = 0;    // an arena to make once the old one is freed
  bool make_lazy = false;  // it is the lazy arena, made afresh
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (depth_ > 0) {
      ++depth_;  // a repeated call inside another is part of the outer one's pattern
      return;
    }
    key_ = key;
    recording_.clear();
    recorded_.clear();
    events_ = 0;
    replaying_ = placing_ = false;
    ++depth_;
    const auto it = patterns_.find(key);
    if (it != patterns_.end() && it->second.strays >= kMaxStrays) return;  // the pool's: the arena stays for others
    // The arena the key's plan needs; 0: none to follow (not recorded yet, or nothing to reuse).
    const std::size_t need = it != patterns_.end() ? it->second.plan.arena_bytes : std::size_t{0};
    if (lazy_arena_bytes_ > 0 && it == patterns_.end() && arena_ != nullptr && arena_live_.at(arena_) == 0 &&
        arena_top_ > lazy_arena_bytes_ / kRenewShare) {
      // A key's first call (the image size, the model or a precision changed) with nothing alive in the arena:
      // the pages the earlier keys' calls touched go with it (a 1024x1024 run left 2.5-3 GB resident through the
      // 512x512 runs after it), and a fresh arena takes only what the calls from now on reach. A key known
      // before faults its pages in once more, at its next call.
      release.push_back(drop_arena());
      drain = drain_;
      make = lazy_arena_bytes_;
      make_lazy = true;
    } else if (lazy_arena_bytes_ > 0 && arena_ == nullptr && !make_arena(lazy_arena_bytes_, release)) {
      // Refused (overcommit off, an address-space limit): arenas sized by their plans from now on.
      log::debug("the repeated calls' {} MiB arena was refused; sized by each call's plan instead",
                 lazy_arena_bytes_ >> 20);
      lazy_arena_bytes_ = 0;
    }
    if (make > 0) {
      // Made below, once the old arena is freed.
    } else if (lazy_arena_bytes_ > 0) {
      // One arena for every key, its pages taken where requests reach: what the plan does not place goes to its
      // gaps (a key's first call, the rest of a call that strays).
      replaying_ = need > 0 && need <= arena_bytes_;
      placing_ = true;
    } else if (need > 0 && arena_ != nullptr && arena_bytes_ >= need) {
      replaying_ = true;
    } else {
      // Another size of arena is needed, or none (a call being recorded is served by the pool, which must have
      // the room an idle arena holds). An arena with sub-buffers still alive is released with its last one.
      if (cl_mem idle = drop_arena()) {
        release.push_back(idle);
        drain = drain_;  // released below, the lock not held: the drain waits for the queue
      }
      make = need;
    }
  }
  if (drain) drain();
  for (cl_mem m : release) NS_CL_CHECK_NOTHROW(clReleaseMemObject(m));
  release.clear();
  if (make == 0) return;
  {
    // The new arena is made once the old one is freed (a device may not have room for both).
    std::lock_guard<std::mutex> lock(mu_);
    if (arena_ != nullptr) return;
    if (make_lazy) {
      if (!make_arena(make, release)) {
        lazy_arena_bytes_ = 0;  // refused this time: arenas sized by their plans from now on; this call the pool's
        return;
      }
      placing_ = true;  // a first call: nothing to replay
    } else {
      if (!make_arena(make, release)) return;
      replaying_ = true;
    }
  }
  // The pool's kept buffers the arena replaces: made before they go, so that a failed arena costs nothing.
  for (cl_mem m : release) NS_CL_CHECK_NOTHROW(clReleaseMemObject(m));
}

void BufferPool::end_repeat(bool completed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (depth_ == 0 || --depth_ > 0) return;
  const auto it = patterns_.find(key_);
  const bool followed = replaying_ && it != patterns_.end() && recording_.size() == it->second.plan.places.size();
  replaying_ = placing_ = false;
  recorded_.clear();  // buffers alive after the call are the callers' now
  if (completed && followed) {
    it->second.used = ++calls_;
    it->second.strays = 0;
  } else if (completed && (it == patterns_.end() || it->second.strays < kMaxStrays)) {
    // Called from RepeatedCall's destructor: no exception may leave. Without the memory to plan, the key has no
    // pattern, and its next call is recorded again.
    try {
      Pattern& p = patterns_[key_];
      if (p.used > 0) ++p.strays;
      // Live sub-buffers of a lazy arena (this call's output, placed) are held when the next call begins: its
      // places keep clear of them. A plan-sized arena holds none of this call's outputs (they are the pool's).
      std::vector<std::pair<std::size_t, std::size_t>> held;
      if (lazy_arena_bytes_ > 0) held.assign(arena_taken_.begin(), arena_taken_.end());
      p.plan = plan_pattern(recording_, align_, held);
      p.used = ++calls_;
    } catch (const std::bad_alloc&) {
      patterns_.erase(key_);
    }
    if (patterns_.size() > kMaxPatterns) {
      auto oldest = patterns_.begin();
      for (auto i = patterns_.begin(); i != patterns_.end(); ++i)
        if (i->second.used < oldest->second.used) oldest = i;
      patterns_.erase(oldest);
    }
  }
  recording_.clear();
}

void BufferPool::release(cl_mem mem, std::size_t bytes) {
  if (!mem) return;
  cl_mem retired = nullptr;  // an arena whose last sub-buffer this was, replaced while it was alive
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = recorded_.find(mem); it != recorded_.end()) {
      recording_[it->second].released = events_++;
      recorded_.erase(it);
    }
    if (const auto it = subs_.find(mem); it != subs_.end()) {
      const Sub sub = it->second;
      subs_.erase(it);
      count_back(sub.bytes, sub.asked);
      if (sub.parent == arena_) arena_taken_.erase(sub.offset);
      if (--arena_live_.at(sub.parent) == 0 && sub.parent != arena_) {
        arena_live_.erase(sub.parent);
        retired = sub.parent;
      }
    } else {
      std::size_t size = served_size(bytes);
      std::size_t asked = size;
      if (const auto s = served_.find(mem); s != served_.end()) {
        size = s->second.size;
        asked = s->second.asked;
        served_.erase(s);
      }
      count_back(size, asked);
      if (kept_ + size <= max_kept_) {
        free_[size].push_back(Kept{mem, releases_++});
        kept_ += size;
        return;
      }
    }
  }
  NS_CL_CHECK_NOTHROW(clReleaseMemObject(mem));
  if (retired) NS_CL_CHECK_NOTHROW(clReleaseMemObject(retired));
}

void BufferPool::trim() {
  std::map<std::size_t, std::vector<Kept>> all;
  cl_mem idle_arena = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(free_);
    kept_ = 0;
    // An arena with nothing in it goes too (the next call of its pattern makes it again).
    if (arena_ != nullptr && arena_live_.at(arena_) == 0) idle_arena = drop_arena();
  }
  for (auto& [size, kept] : all)
    for (const Kept& k : kept) NS_CL_CHECK_NOTHROW(clReleaseMemObject(k.mem));
  if (idle_arena) NS_CL_CHECK_NOTHROW(clReleaseMemObject(idle_arena));
}

std::size_t BufferPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_;
}

std::size_t BufferPool::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

std::size_t BufferPool::peak_asked_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_asked_;
}

std::size_t BufferPool::arena_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return arena_bytes_;
}

BufferPool::Counts BufferPool::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Counts{created_, replayed_, arenas_made_, placed_};
}

std::size_t BufferPool::reused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reused_;
}

}  // namespace nanscope::opencl
