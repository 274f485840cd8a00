#include "backend/opencl/memory_pattern.hpp"

#include <algorithm>
#include <utility>

namespace nanscope::opencl {

namespace {

bool placed_in_arena(const PatternRequest& r) { return r.released != PatternRequest::kAlive; }

}  // namespace

std::size_t pattern_bytes(std::size_t bytes, std::size_t align) {
  return (std::max<std::size_t>(bytes, 1) + align - 1) & ~(align - 1);
}

PatternPlan plan_pattern(const std::vector<PatternRequest>& requests, std::size_t align,
                         std::span<const std::pair<std::size_t, std::size_t>> reserved) {
  PatternPlan plan;
  plan.places.resize(requests.size());
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    plan.places[i].bytes = requests[i].bytes;
    if (placed_in_arena(requests[i])) order.push_back(i);
  }
  // Largest first; among equals, the earlier request (a deterministic plan for the same call).
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return requests[a].bytes > requests[b].bytes; });
  struct Placed {
    std::size_t from, to, offset, end;
  };
  std::vector<Placed> placed;
  std::vector<std::pair<std::size_t, std::size_t>> taken;  // [offset, end) of placed buffers alive with this one
  for (const std::size_t i : order) {
    const PatternRequest& r = requests[i];
    const std::size_t bytes = pattern_bytes(r.bytes, align);
    taken.assign(reserved.begin(), reserved.end());
    for (const Placed& p : placed)
      if (p.from < r.released && r.acquired < p.to) taken.emplace_back(p.offset, p.end);
    std::sort(taken.begin(), taken.end());
    std::size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + bytes <= begin) break;
      offset = std::max(offset, end);
    }
    placed.push_back({r.acquired, r.released, offset, offset + bytes});
    plan.places[i].offset = offset;
    plan.places[i].in_arena = true;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + bytes);
  }
  return plan;
}

std::size_t pattern_live_peak(const std::vector<PatternRequest>& requests, std::size_t align) {
  std::vector<std::pair<std::size_t, long long>> changes;  // (event, +bytes / -bytes)
  for (const PatternRequest& r : requests) {
    if (!placed_in_arena(r)) continue;
    const auto bytes = static_cast<long long>(pattern_bytes(r.bytes, align));
    changes.emplace_back(r.acquired, bytes);
    changes.emplace_back(r.released, -bytes);
  }
  std::sort(changes.begin(), changes.end());
  long long live = 0, peak = 0;
  for (const auto& [event, delta] : changes) peak = std::max(peak, live += delta);
  return static_cast<std::size_t>(peak);
}

}  // namespace nanscope::opencl
