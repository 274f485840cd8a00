// The reference backend's inspector reductions, on host memory:
// map_reduce and latent_preview are the plain double-sum reductions of
// backend/map_reduce.cpp.

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

std::vector<MapReduction> ReferenceBackend::map_reduce_batch(std::span<const MapReduceArgs> maps) {
  std::vector<MapReduction> out;
  for (const MapReduceArgs& a : maps) {
    const Shape& s = a.x.shape();
    const std::int64_t c = s[s.size() - 3], h = s[s.size() - 2], w = s[s.size() - 1];
    const detail::Floats v(a.x);
    out.push_back(reduce_map(v.data() + a.index * c * h * w, c, h, w, a.near_limit, a.overshoot, a.mask_cells));
  }
  return out;
}

PreviewReduction ReferenceBackend::latent_preview(const LatentPreviewArgs& a) {
  const Shape& s = a.x.shape();
  const std::int64_t c = s[s.size() - 3], h = s[s.size() - 2], w = s[s.size() - 1];
  const detail::Floats v(a.x);
  return reduce_preview(v.data() + a.index * c * h * w, c, h, w, a);
}

}  // namespace nanscope::reference
