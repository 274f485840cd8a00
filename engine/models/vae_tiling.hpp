#pragma once
// VAE tiling: decode (and encode) in overlapping tiles whose seams are
// blended, as A1111's and ComfyUI's tiled VAE do (ComfyUI's `decode_tiled`:
// tiles of a fixed latent size stepping by size minus overlap, each output
// weighted by a mask that ramps linearly across the overlap, the sum divided
// by the summed weights). A large image then needs one tile's activations on
// the device instead of the whole image's, so the memory plan
// (pipeline/memory_plan.hpp) can offer it as the fix for a size that does
// not fit.
//
// Not bit-identical to the whole decode: each tile's group norms see only that
// tile's statistics and its convolutions see zero padding at the tile's edge.
// The blend hides the edge; the statistics differ by how much a tile's
// content differs from the whole image's (tests/test_vae_tiling.cpp measures it).
//
// The tiles' outputs are blended on the host in f32 and the result uploaded
// in the input's dtype: device memory holds one tile's decode plus the image.

#include <cstdint>
#include <vector>

#include "models/vae.hpp"

namespace nanscope::models {

// Tiles in latent pixels; tile == 0: no tiling.
struct VaeTiles {
  std::int64_t tile = 0;
  std::int64_t overlap = 0;
  bool enabled() const { return tile > 0; }
};

// The tiles of a run's settings (vae.tile_size and vae.tile_overlap, in image
// pixels) for a VAE that scales by `factor`: rounded down to whole latent
// pixels, the overlap kept below half a tile.
VaeTiles vae_tiles(int tile_px, int overlap_px, std::int64_t factor);

// Where the tiles start along an axis of `size`: 0, step, 2*step, ... with
// step = tile - overlap, the last one moved back so that it ends at `size`.
// One tile when tile >= size.
std::vector<std::int64_t> tile_starts(std::int64_t size, std::int64_t tile, std::int64_t overlap);

// vae.decode, tile by tile (untiled when the latent fits in one tile).
Tensor decode_tiled(const Vae& vae, const OpContext& ctx, const Tensor& latents, VaeTiles tiles);
// vae.encode, tile by tile; tiles in latent pixels as for decode (the image
// tiles are `factor` times larger). Image sides must be multiples of the factor.
Tensor encode_tiled(const Vae& vae, const OpContext& ctx, const Tensor& image, VaeTiles tiles);

}  // namespace nanscope::models
