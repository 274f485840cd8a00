#pragma once
// The inspector's device-side reductions (Backend::reduce_step): what one
// [C, H, W] map of a step looks like, reduced where the map lives and read
// back as a few KB. engine/inspect turns
// a MapReduction into its detectors' verdicts (band score, mask, notes); the
// reduction itself is plain data so that every backend fills the same struct.
//
// Size of what comes back for a map of C x H x W: 8 * C * (H + W) bytes of
// line moments and 48 * C of channel records; when the map holds non-finite
// values, also 4 bytes per mask cell (at most 32 x 32). SD at 512 x 512 (a
// 4 x 64 x 64 latent): 4.3 KB (8.4 KB with the mask), against 64 KB for the map.
//
// The host functions here are the reference: plain C++ with double sums. The
// OpenCL kernels (kernels/inspect.cl) sum in f32 per line (two passes: mean,
// then centred squares) and combine lines with Chan's formula.

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.hpp"

namespace nanscope {

struct MapReduceArgs {
  const Tensor& x;         // [N, C, H, W] (any storage dtype), contiguous
  std::int64_t index = 0;  // which image of the batch
  double near_limit = 0;   // |x| >= this counts as near the limit (0: none counted)
  double overshoot = 3.0;  // |x| > this counts as overshoot (image scale)
  int mask_cells = 32;     // non-finite mask: at most this many cells per side
};

// Counts and moments of the finite values of one channel.
struct ChannelReduction {
  std::int64_t count = 0;  // all values
  std::int64_t finite = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t near_limit = 0;  // finite, |x| >= near_limit
  std::int64_t over = 0;        // finite, |x| > overshoot
  std::int64_t clipped = 0;     // finite, |x| > 1
  double mean = 0, m2 = 0;      // of the finite values; m2 = sum of squared deviations
  double min = 0, max = 0;      // of the finite values (0 when there are none)
};

struct MapReduction {
  std::int64_t channels = 0, height = 0, width = 0;
  std::vector<ChannelReduction> per_channel;
  // Mean and standard deviation of the finite values of every line, channel
  // major: rows [C * H], columns [C * W]. NaN for a line without finite values.
  std::vector<float> row_mean, row_std, col_mean, col_std;
  // Non-finite values per mask cell (all channels), row-major; cells are
  // cell_h x cell_w pixels, the last row/column of cells may be smaller.
  int mask_rows = 0, mask_cols = 0;
  std::int64_t cell_h = 0, cell_w = 0;
  std::vector<std::uint32_t> mask_bad;  // all zero (and not read back) when nothing is non-finite
  bool any_nonfinite() const;
  std::size_t bytes() const;  // what a device reads back for this reduction
};

// The mask grid for an H x W plane: cells of ceil(H / cells) x ceil(W / cells).
void mask_grid(std::int64_t height, std::int64_t width, int cells, MapReduction& r);

// The reference reduction of one [C, H, W] map of floats.
MapReduction reduce_map(const float* values, std::int64_t channels, std::int64_t height, std::int64_t width,
                        double near_limit, double overshoot, int mask_cells);

// Latent -> RGB preview through linear factors:
//   rgb[k] = bias[k] + sum_c factors[c * 3 + k] * latent[c] * scale
// on the -1..1 image scale, mapped to bytes (non-finite: 0).
struct LatentPreviewArgs {
  const Tensor& x;             // [N, C, H, W] f32
  std::int64_t index = 0;      // which image of the batch
  std::vector<float> factors;  // C' x 3, C' <= C (extra channels are ignored)
  std::array<float, 3> bias{};
  double scale = 1.0;
  double overshoot = 3.0;
};
struct PreviewReduction {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // height x width x 3
  std::int64_t finite = 0;        // finite preview values (3 a pixel)
  std::int64_t over = 0;          // |v| > overshoot
  std::int64_t clipped = 0;       // |v| > 1
};
// What Backend::reduce_step returns: one reduction per map, in their order,
// and the preview when one was asked for.
struct StepReductions {
  std::vector<MapReduction> maps;
  std::optional<PreviewReduction> preview;
};
// The reference preview (double sums) of one [C, H, W] latent.
PreviewReduction reduce_preview(const float* latent, std::int64_t channels, std::int64_t height, std::int64_t width,
                                const LatentPreviewArgs& args);

}  // namespace nanscope
