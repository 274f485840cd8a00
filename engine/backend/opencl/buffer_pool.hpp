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
// The device queue is in order, so a buffer handed out again is only written
// by kernels that run after every kernel queued on its previous owner.
//
// An exact pool (on a simulator: Oclgrind) serves every request at its own
// size, so an access past the end of a tensor or scratch buffer is outside
// its buffer, where the simulator reports it, not in a size class's slack.

#include <CL/cl.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace nanscope::opencl {

class BufferPool {
 public:
  BufferPool(cl_context context, std::size_t max_kept_bytes, bool exact = false);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` (its size class; exactly `bytes` in an exact
  // pool); err receives the OpenCL status.
  cl_mem acquire(std::size_t bytes, cl_int& err);
  // Gives a buffer from acquire(bytes) back.
  void release(cl_mem mem, std::size_t bytes);
  // Releases every kept buffer.
  void trim();

  // The size a request is served with: multiples of 4 KiB up to 64 KiB, then
  // 8 classes per power of two (at most 12.5% unused).
  static std::size_t size_class(std::size_t bytes);

  std::size_t kept_bytes() const;
  std::size_t in_use_bytes() const;  // handed out and not yet given back (size classes)
  std::size_t reused() const;

 private:
  std::size_t served_size(std::size_t bytes) const;  // size_class(bytes), or bytes when exact

  cl_context context_;
  std::size_t max_kept_;
  bool exact_;
  mutable std::mutex mu_;
  std::map<std::size_t, std::vector<cl_mem>> free_;
  std::size_t kept_ = 0;
  std::size_t in_use_ = 0;
  std::size_t reused_ = 0;
};

}  // namespace nanscope::opencl
