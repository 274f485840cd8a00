// The reference backend's inspector reductions, on host memory:
// map_reduce and latent_preview are the plain double-sum reductions of
// backend/map_reduce.cpp.

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

StepReductions ReferenceBackend::reduce_step(std::span<const MapReduceArgs> maps, const LatentPreviewArgs* preview) {
  StepReductions out;
  for (const MapReduceArgs& a : maps) {
    const Shape& s = a.x.shape();
    const std::int64_t c = s[s.size() - 3], h = s[s.size() - 2], w = s[s.size() - 1];
    const detail::Floats v(a.x);
    out.maps.push_back(reduce_map(v.data() + a.index * c * h * w, c, h, w, a.near_limit, a.overshoot, a.mask_cells));
  }
  if (preview) {
    const Shape& s = preview->x.shape();
    const std::int64_t c = s[s.size() - 3], h = s[s.size() - 2], w = s[s.size() - 1];
    const detail::Floats v(preview->x);
    out.preview = reduce_preview(v.data() + preview->index * c * h * w, c, h, w, *preview);
  }
  return out;
}

}  // namespace nanscope::reference
