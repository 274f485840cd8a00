#pragma once
// The memory pattern of a repeated call: where each of its buffers goes in
// one arena, planned from the requests a previous identical call made.
//
// A UNet call or a VAE decode asks for the same buffers in the same order at
// every step and every run. Served one by one from a pool of size classes, a
// chain like the VAE decoder (each stage's tensors larger than the last's)
// either keeps a buffer set far larger than what is alive at once, or gives
// buffers back and faults fresh memory in at every call: on a 512x512 decode
// the pool (buffer_pool.hpp) made about 1.2 GB of new buffers per call, 370
// thousand page faults and 12% of the call's time, while holding 1.17x what
// was alive at its peak. Knowing the whole call, each buffer's lifetime is
// known, and placing them in one arena is an interval-packing problem that the
// greedy order below solves to within a page of the live peak on the UNet and
// VAE calls measured (833 MB of 833 at 512x512, 2515 of 2515 at 1024x1024).
// ONNX Runtime's "memory pattern" and TensorFlow Lite's arena planner do the
// same for the same reason.
//
// Placement ("greedy by size", as TFLite's ArenaPlanner): the largest buffer
// first, each at the lowest offset where it overlaps no placed buffer whose
// lifetime overlaps its own.

#include <cstddef>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace nanscope::opencl {

// One request of a recorded call, in the order made: its size and the event
// (position in the call's sequence of requests and releases) at which it was
// made and given back; a buffer still alive when the call ended (its output,
// a cache filled during it) has released == kAlive and is left to the pool.
struct PatternRequest {
  static constexpr std::size_t kAlive = std::numeric_limits<std::size_t>::max();
  std::size_t bytes = 0;
  std::size_t acquired = 0;
  std::size_t released = kAlive;
};

struct PatternPlan {
  struct Slot {
    std::size_t bytes = 0;   // the request's size, as asked (a replay matches it exactly)
    std::size_t offset = 0;  // in the arena
    bool in_arena = false;   // false: served by the pool (alive after the call)
  };
  std::vector<Slot> places;  // one per request, in request order
  std::size_t arena_bytes = 0;
};

// A request's size in the arena: `bytes` (at least 1) rounded up to `align`, a power of two.
std::size_t pattern_bytes(std::size_t bytes, std::size_t align);

// Places every request given back within the call (each rounded up to
// `align`, a power of two) in one arena; the others get in_arena = false.
// `reserved`: [begin, end) ranges of the arena that buffers from before the
// next call still hold when it begins (the recorded call's output, placed in a
// lazy arena: buffer_pool.hpp), overlapped by no place.
PatternPlan plan_pattern(const std::vector<PatternRequest>& requests, std::size_t align,
                         std::span<const std::pair<std::size_t, std::size_t>> reserved = {});

// The most bytes alive at once among the requests the plan places (each rounded up to `align`): the least any
// arena holding them can be.
std::size_t pattern_live_peak(const std::vector<PatternRequest>& requests, std::size_t align);

}  // namespace nanscope::opencl
