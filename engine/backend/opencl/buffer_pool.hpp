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
#include <unordered_map>
#include <vector>

namespace nanscope::opencl {

class BufferPool {
 public:
  BufferPool(cl_context context, std::size_t max_kept_bytes, bool exact = false);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` (its size class or a kept one up to twice
  // that; exactly `bytes` in an exact pool); err receives the OpenCL status,
  // `served` (when given) the size it counts in in_use_bytes().
  cl_mem acquire(std::size_t bytes, cl_int& err, std::size_t* served = nullptr);
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
  // Releases every kept buffer.
  void trim();

  // The size a request is served with: multiples of 4 KiB up to 64 KiB, then
  // 8 classes per power of two (at most 12.5% unused).
  static std::size_t size_class(std::size_t bytes);
  // What a request of `bytes` is served with when no larger kept buffer serves
  // it: size_class(bytes), or bytes in an exact pool.
  std::size_t served_size(std::size_t bytes) const;

  std::size_t kept_bytes() const;
  std::size_t in_use_bytes() const;       // handed out and not yet given back (the sizes served)
  std::size_t peak_in_use_bytes() const;  // the most in use at once so far
  std::size_t reused() const;

 private:
  struct Kept {
    cl_mem mem;
    std::uint64_t released;  // order of release: of classes asked for equally long ago, the oldest goes first
  };

  // A kept buffer for a request of class `size` (the lock held): `size` or the next larger class up to twice it.
  cl_mem take_kept(std::size_t size, std::size_t& served);
  // Takes kept buffers out (the lock held) until in-use + kept + `size` fits under the high-water mark.
  std::vector<cl_mem> evict_for(std::size_t size);

  cl_context context_;
  std::size_t max_kept_;
  bool exact_;
  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<Kept>> free_;      // per class, oldest release first
  std::map<std::size_t, std::uint64_t> last_request_;  // per class: the request count when it was last asked for
  std::unordered_map<cl_mem, std::size_t> served_;     // handed out -> the size it has
  std::function<void()> drain_;
  std::function<std::size_t()> relief_;
  std::size_t kept_ = 0;
  std::size_t in_use_ = 0;
  std::size_t peak_in_use_ = 0;
  std::size_t reused_ = 0;
  std::uint64_t releases_ = 0;
  std::uint64_t requests_ = 0;
};

}  // namespace nanscope::opencl
