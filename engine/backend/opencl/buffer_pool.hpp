#pragma once
// Device buffers kept for reuse. A diffusion run allocates the same few dozen
// activation and scratch sizes at every step; creating and releasing them each
// time costs page faults on CPU devices and, through the C library's heap,
// fragmentation that held 5 GB more than the live tensors during one SD 1.5
// UNet call on PoCL (bench_unet: peak 11.6 GB against 6.6 GB with pooling-like
// behaviour). Released buffers go to per-size free lists and are handed out
// again for the same size class; what is kept unused is capped, and everything
// kept is given back when an allocation fails (then it is retried once).
//
// Kept buffers are bounded a second way, by the most ever in use at once: a
// request that no kept buffer serves first gives back kept buffers, of the
// classes asked for least recently first, until in-use plus kept plus the new
// buffer is within an eighth above that high-water mark (or is the new high;
// the eighth is for runs that repeat the same requests, see evict_for).
// Without it, kept buffers of sizes no later request asks for added to the
// peak: a VAE decode allocates new sizes at every stage, and the classes of
// its earlier stages sat next to the live tensors of its last one (bench_unet
// --component vae).
// What is given back is touched afresh when its size is asked for again (the
// next decode), so a request with no kept buffer of its own class takes one of
// a larger class up to twice its size before anything is given back.
//
// The device queue is in order, so a buffer handed out again is only written
// by kernels that run after every kernel queued on its previous owner.
//
// An exact pool (on a simulator: Oclgrind) serves every request at its own
// size, so an access past the end of a tensor or scratch buffer is outside
// its buffer, where the simulator reports it, not in a size class's slack.

#include <CL/cl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/opencl/memory_pattern.hpp"

namespace nanscope::opencl {

class BufferPool {
 public:
  // `arena`: repeated calls are served from an arena (begin_repeat); never in an exact pool. `lazy_arena_bytes`
  // (0: none), for a device whose buffers take memory only where they are written (a CPU device: PoCL's buffers
  // are malloc'd, their pages faulted in at first touch): the arena is made once with this capacity for every key,
  // and a request that no plan places (the first call of a key, the rest of a call that strayed) goes to its
  // free gaps (see begin_repeat).
  BufferPool(cl_context context, std::size_t max_kept_bytes, bool exact = false, bool arena = true,
             std::size_t lazy_arena_bytes = 0);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` (its size class or a kept one up to twice
  // that; exactly `bytes` in an exact pool); err receives the OpenCL status,
  // `served` (when given) the size it counts in in_use_bytes(). `lasting`: the caller keeps it past the repeated
  // call it is asked in (a cache filled at the first call: weight panels), so it is neither part of the call's
  // pattern nor placed in the arena, where it would hold its place for good.
  cl_mem acquire(std::size_t bytes, cl_int& err, std::size_t* served = nullptr, bool lasting = false);
  // Gives a buffer from acquire(bytes) back.
  void release(cl_mem mem, std::size_t bytes);
  // Called before kept buffers are given back to make room: a buffer that
  // queued kernels still use is only freed by the driver when they finish, so
  // without waiting for them the new buffer and the old would both be held.
  void set_drain(std::function<void()> drain);
  // Called when an allocation fails even after the kept buffers were given
  // back: gives back what other caches hold (the kept weight panels,
  // weight_panels.hpp) and returns the bytes it freed; the allocation is then
  // tried once more.
  void set_relief(std::function<std::size_t()> relief);
  // Releases every kept buffer, and the arena when no sub-buffer of it is alive.
  void trim();

  // A call that repeats (a UNet call, a VAE decode; Backend::begin_repeated_call) begins and ends. The first call
  // of a key is served by the pool and its requests recorded; a later call of the key is served from one arena,
  // a sub-buffer per request at the offset planned from the recording (memory_pattern.hpp), as long as it asks for
  // the same sizes in the same order and no live sub-buffer is where the next goes. From the first request that
  // differs, the pool serves the rest and the call's requests become the key's pattern (after kMaxStrays calls in
  // a row that differ, the key is the pool's alone). Buffers alive when the call ends in the recording (its output)
  // are the pool's in the calls that follow the plan. One arena at a time, sized for the key that needs the most; an
  // arena with sub-buffers alive when another size is needed goes with its last sub-buffer. A nested call is part
  // of the outer one; an exact pool has no arena. `completed` false (an exception ended the call): nothing is
  // planned from it.
  // With a lazy arena (the constructor), the first call of a key, and the rest of a call that strays, are served
  // from the arena too: each request in the smallest free gap that holds it, the space above the last live
  // sub-buffer counting as one more gap (no gap holds it: the pool's). Memory given back within the call is used
  // again by the next request that fits, where size classes would have taken fresh pages (a 512x512 VAE decode
  // touched 2.6 GB of them in its first call, against 1 GB alive at its peak). The arena's pages are taken only
  // where the gaps reach; planned calls then reuse them. Buffers the first call leaves alive in the arena (its
  // output, still held during the next call) are ranges the plan keeps clear. A key past kMaxStrays is the pool's
  // here too. If the lazy arena cannot be made, arenas are sized by their plans from then on. A new key's first call
  // makes the lazy arena afresh when nothing in it is alive and earlier calls reached past 1/32 of it: the pages
  // they touched are given back (kRenewShare).
  void begin_repeat(const std::string& key);
  void end_repeat(bool completed);

  // The size a request is served with: multiples of 4 KiB up to 64 KiB, then
  // 8 classes per power of two (at most 12.5% unused).
  static std::size_t size_class(std::size_t bytes);
  // What a request of `bytes` is served with when no larger kept buffer serves
  // it: size_class(bytes), or bytes in an exact pool.
  std::size_t served_size(std::size_t bytes) const;

  std::size_t kept_bytes() const;    // the pool's buffers kept for reuse (the arena apart)
  std::size_t in_use_bytes() const;  // handed out and not yet given back (the sizes served; sub-buffers included)
  // The high-water mark: the most asked for at once so far, each request at its class (a larger kept buffer that
  // served it counts as the class asked for).
  std::size_t peak_asked_bytes() const;
  std::size_t reused() const;
  std::size_t arena_bytes() const;  // the arena's size, 0 when there is none
  struct Counts {
    std::size_t created = 0;   // buffers the pool made (clCreateBuffer), arenas apart
    std::size_t replayed = 0;  // requests served from an arena
    std::size_t arenas_made = 0;
    std::size_t placed = 0;  // requests no plan placed, served from a lazy arena's free gaps
  };
  Counts counts() const;

 private:
  struct Kept {
    cl_mem mem;
    std::uint64_t released;  // order of release: of classes asked for equally long ago, the oldest goes first
  };

  // A kept buffer for a request of class `size` (the lock held): `size` or the next larger class up to twice it.
  cl_mem take_kept(std::size_t size, std::size_t& served);
  // Takes kept buffers out (the lock held) until in-use + kept + `size` fits under the high-water mark.
  std::vector<cl_mem> evict_for(std::size_t size);
  // Counts `served` bytes (serving a request of class `asked`) as handed out (the lock held), for pool and arena
  // buffers alike.
  void count_out(std::size_t served, std::size_t asked);
  // Its inverse, for a buffer given back (the lock held).
  void count_back(std::size_t served, std::size_t asked);
  // Counts a buffer from the pool as handed out (the lock held); `request`: its index in the recorded call.
  void hand_out(cl_mem m, std::size_t served, std::size_t asked, std::size_t request);
  // The arena's sub-buffer for request `request` of a replayed call (the lock held), or null: not replaying, the
  // call strayed from the pattern, the request is the pool's, or its place is still taken.
  cl_mem replay(std::size_t request, std::size_t bytes, std::size_t asked);
  // A lazy arena's sub-buffer in its smallest free gap that holds the request (the lock held), or null.
  cl_mem place(std::size_t request, std::size_t bytes, std::size_t asked);
  // A sub-buffer of the arena at [offset, offset + bytes) for request `request`, counted as handed out (the lock
  // held), or null when the driver refuses it.
  cl_mem make_sub(std::size_t offset, std::size_t bytes, std::size_t asked, std::size_t request);
  // Forgets the arena (the lock held): returned for the caller to release when no sub-buffer of it is alive,
  // otherwise it goes with its last sub-buffer (release).
  cl_mem drop_arena();
  // Makes the arena of `bytes` (the lock held; false when the driver refuses) and takes the pool's kept buffers
  // out into `release`: the arena replaces them.
  bool make_arena(std::size_t bytes, std::vector<cl_mem>& release);

  struct Served {
    std::size_t size;   // the buffer's size
    std::size_t asked;  // the class of the request it serves
  };
  struct Sub {
    cl_mem parent;       // the arena it is in
    std::size_t offset;  // in the arena
    std::size_t bytes;   // its size (the request rounded up to align_)
    std::size_t asked;   // the class of the request
  };
  struct Pattern {
    PatternPlan plan;
    std::uint64_t used = 0;  // calls_ when it was last recorded or followed
    int strays = 0;          // calls in a row that differed from it
  };

  cl_context context_;
  std::size_t max_kept_;
  bool exact_;
  bool arena_enabled_;
  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<Kept>> free_;      // per class, oldest release first
  std::map<std::size_t, std::uint64_t> last_request_;  // per class: the request count when it was last asked for
  std::unordered_map<cl_mem, Served> served_;          // handed out by the pool
  std::function<void()> drain_;
  std::function<std::size_t()> relief_;
  std::size_t kept_ = 0;
  std::size_t in_use_ = 0;
  std::size_t asked_ = 0;       // the classes asked for by the buffers handed out
  std::size_t peak_asked_ = 0;  // the most asked_ has been
  std::size_t reused_ = 0;
  std::uint64_t releases_ = 0;
  std::uint64_t requests_ = 0;
  std::size_t created_ = 0;

  // Repeated calls (begin_repeat).
  std::size_t align_;                                 // of a sub-buffer's offset and size
  int depth_ = 0;                                     // repeated calls begun and not ended
  std::string key_;                                   // the outermost one's
  std::vector<PatternRequest> recording_;             // its requests so far
  std::unordered_map<cl_mem, std::size_t> recorded_;  // handed out in it and not given back -> request index
  std::size_t events_ = 0;                            // its requests and releases so far
  bool replaying_ = false;                            // served from the arena by patterns_[key_]
  bool placing_ = false;                              // requests not replayed go to a lazy arena's gaps
  std::size_t lazy_arena_bytes_;                      // 0: the arena is sized by its plan
  std::map<std::string, Pattern> patterns_;
  std::uint64_t calls_ = 0;
  cl_mem arena_ = nullptr;
  std::size_t arena_bytes_ = 0;
  std::size_t arena_top_ = 0;                           // the end of the highest sub-buffer made in arena_
  std::map<std::size_t, std::size_t> arena_taken_;      // live sub-buffers of arena_: offset -> end
  std::unordered_map<cl_mem, Sub> subs_;                // live sub-buffers, of arena_ or a replaced arena
  std::unordered_map<cl_mem, std::size_t> arena_live_;  // arena -> its live sub-buffers (arena_ and replaced ones)
  std::size_t replayed_ = 0;
  std::size_t arenas_made_ = 0;
  std::size_t placed_ = 0;
};

}  // namespace nanscope::opencl
