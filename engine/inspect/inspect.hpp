#pragma once
// The inspector's public value types and detectors: what a front end (GUI,
// CLI, JSON report) draws or prints. Value types only: copyable across
// threads, no references into engine state, no Qt.
//
// Detectors. Their inputs are reductions (backend/map_reduce.hpp) computed
// where the maps live: on the run's device for the step statistics
// (analyze_step's Backend form), by the reference reduction for host data
// (decoded images, the span forms). Everything below is a function of those:
//   - tensor statistics per channel (min/max/mean/std over finite values,
//     NaN/+Inf/-Inf counts, max |x|, share of values within 10% of the
//     dtype's largest finite value);
//   - a downsampled non-finite mask;
//   - a row/column band score: for every row (column) of each channel of a
//     [C, H, W] map, its mean and its standard deviation; a line scores when
//     it stands out from the lines 1..kBandReach away on both sides in the
//     same direction (an isolated line up to 3 lines thick: report R0), the
//     height divided by the typical line-to-line change (at least a minimum
//     deviation). Shape edges, gradients and noise score low; more than
//     kBandMaxLines (or 1/8 of the lines) scoring is a pattern (stripes), not bands;
//   - saturation: the share of values (on the VAE's -1..1 image scale, or of
//     the latent preview) beyond kOvershoot, well outside what a decoder
//     produces; plus the clipped share (outside -1..1) for images;
//   - a latent -> RGB preview through linear factors fitted per model family.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/map_reduce.hpp"
#include "core/dtype.hpp"
#include "core/tensor.hpp"

namespace nanscope {
class Backend;
}

namespace nanscope::inspect {

// What a step, an image or a run looks like. Ordered by severity (a run's
// verdict is the most severe one seen); names are the JSON/CLI spelling.
enum class Verdict : std::uint8_t {
  clean,           // "clean"
  slow_start,      // "slow-start": most of the run's time went into compiling kernels (cold cache, R4)
  near_limit,      // "near-limit": values within 10% of the dtype's largest finite value
  saturated,       // "saturated": many values far beyond the image range
  bands,           // "bands": rows or columns that stand out from their neighbours (R0)
  non_finite,      // "non-finite": NaN or Inf
  device_missing,  // "device-missing": the pinned device does not exist (R3)
};
std::string_view verdict_name(Verdict v);
std::optional<Verdict> parse_verdict(std::string_view s);
// The more severe of two verdicts.
Verdict worst(Verdict a, Verdict b);

inline constexpr double kNearLimitFraction = 0.9;  // |x| >= 0.9 * dtype_max counts as near the limit
inline constexpr int kBandReach = 2;               // a band line is compared with the lines 1..2 away
inline constexpr int kBandMaxLines = 4;
// Decoded images: lines this close to an edge are not judged. A VAE decoder's
// last 3x3 convolutions see the zero padding up to 3 pixels in, and the
// embedded model's decoder draws a dark frame there that scored 8.1-8.9 on
// clean pictures. R0's corrupted lines lie further in (one latent row in: 4-7
// pixels at the embedded VAE's factor 4, 8-15 at SD's 8).
inline constexpr int kImageBandBorder = 4;     // more scoring lines than this (and than 1/8) is a pattern
inline constexpr double kBandThreshold = 8.0;  // robust z-score that makes "bands"
// |x| beyond this on the -1..1 image scale is saturated. The embedded model's
// VAE overshoots on flat colours (clean 8-step images reach -3.2; 2-step ones
// -5.6); the R0 emulation reaches -8.
inline constexpr double kOvershoot = 3.0;
// Share of overshooting values that makes "saturated".
inline constexpr double kSaturatedShare = 0.05;
inline constexpr int kMaskCells = 32;  // non-finite mask: at most this many cells per side

// Statistics of a set of values: min/max/mean/std over the finite ones.
struct Stats {
  double min = 0, max = 0, mean = 0, std = 0, max_abs = 0;
  std::int64_t count = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t near_limit = 0;  // finite values with |x| >= kNearLimitFraction * dtype_max
  double near_limit_share = 0;  // near_limit / count
  std::int64_t nonfinite() const { return nan + pos_inf + neg_inf; }
  // Folds other into this (counts add; mean/std combine exactly).
  void merge(const Stats& other);
};
// `limit`: the dtype's largest finite value (dtype_max); 0 disables the near-limit count.
Stats compute_stats(std::span<const float> values, double limit);

// Share of non-finite values per cell of a grid laid over the [H, W] plane
// (all channels together). Cells are ceil(H / rows) x ceil(W / cols) pixels.
struct NonFiniteMask {
  int rows = 0, cols = 0;
  std::vector<float> share;  // rows * cols, row-major, 0..1
  bool any() const;
  float at(int r, int c) const { return share[static_cast<std::size_t>(r * cols + c)]; }
};

// Row/column band detector result.
struct BandScore {
  double row_score = 0, col_score = 0;    // largest robust z-score over rows / columns
  int worst_row = -1, worst_col = -1;     // where it was (-1: none)
  std::vector<float> row_z, col_z;        // z-score of every row / column
  std::vector<int> band_rows, band_cols;  // rows / columns whose z >= kBandThreshold
  bool pattern = false;                   // so many lines score that it is a pattern (stripes), not bands
  double score() const { return row_score > col_score ? row_score : col_score; }
  bool bands() const { return !pattern && score() >= kBandThreshold; }
};

// Latent -> RGB linear preview factors: rgb[k] = bias[k] + sum_c factors[c][k] * latent[c],
// on the -1..1 image scale. `family` names the set they were fitted for.
struct LatentRgbFactors {
  std::string family;
  std::vector<std::array<float, 3>> factors;  // one row per latent channel
  std::array<float, 3> bias{};
};
// Factors for "sd1", "sd2", "sdxl" (published community fits) and "nanscope-tiny"
// (fitted by tools/fit_latent_rgb.py on the embedded model). nullopt for an unknown family.
std::optional<LatentRgbFactors> latent_rgb_factors(std::string_view family);

// An 8-bit RGB preview (row-major, 3 bytes a pixel) of a latent's height x width.
struct Preview {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
};

// Everything the inspector says about one [C, H, W] map (one latent or one
// UNet output branch of one image).
struct MapStats {
  Stats all;                    // over every value
  std::vector<Stats> channels;  // per channel
  NonFiniteMask mask;
  BandScore bands;
  double saturation = 0;  // share of values beyond kOvershoot (latent: of the preview; image: of pixels)
  double clipped = 0;     // share of values outside -1..1 (images and previews)
  Verdict verdict = Verdict::clean;
  std::string note;  // plain English, one line: why the verdict
};

struct MapOptions {
  double limit = 0;  // dtype_max of the storage dtype; 0: no near-limit count ("near-limit": any such value)
  // Saturation: analyze_map counts values beyond kOvershoot itself (image
  // scale); for latents the caller passes the preview's share instead.
  bool image_scale = true;
  std::optional<double> saturation;  // overrides the measured share (latents: the preview's)
  bool saturation_verdict = true;    // let saturation decide the verdict (off for noise predictions, noisy latents)
  bool band_verdict = true;          // let bands decide the verdict (off for noise predictions, noisy latents)
  // A line must stand out by at least this (in value units: a row mean 0.5
  // off on the -1..1 image scale) to reach kBandThreshold in a flat picture.
  double band_min_deviation = 0.5;
  // Lines within this many of an edge are not judged (at least kBandReach; images: kImageBandBorder).
  int band_border = kBandReach;
};
// What a reduction (Backend::map_reduce) says under these options.
MapStats analyze_reduction(const MapReduction& r, const MapOptions& options);
// values: [C, H, W] (one image of a batch), row-major; the reference reduction, then analyze_reduction.
MapStats analyze_map(std::span<const float> values, std::int64_t channels, std::int64_t height, std::int64_t width,
                     const MapOptions& options);
// The pieces on their own (analyze_map uses them).
NonFiniteMask nonfinite_mask(std::span<const float> values, std::int64_t channels, std::int64_t height,
                             std::int64_t width, int max_cells = kMaskCells);
BandScore band_score(std::span<const float> values, std::int64_t channels, std::int64_t height, std::int64_t width,
                     double min_deviation = 0.5, int border = kBandReach);

// The latent preview: factors applied to latent / sqrt(1 + sigma^2) (the
// sampler's latent at noise level sigma, scaled to unit variance), mapped
// from -1..1 to bytes. Also returns, through overshoot/clipped, the shares
// used for saturation.
Preview latent_preview(std::span<const float> latent, std::int64_t channels, std::int64_t height, std::int64_t width,
                       const LatentRgbFactors& factors, double sigma, double* overshoot = nullptr,
                       double* clipped = nullptr);

// One sampling step of one image, as the observer receives it
// (pipeline::StepReport::stats).
struct StepStats {
  MapStats latent;                       // after the step
  MapStats noise_cond;                   // UNet output, conditional branch
  std::optional<MapStats> noise_uncond;  // UNet output, unconditional branch (CFG only)
  Preview preview;                       // empty when the model family has no factors
  // Full preview: the VAE's decode of the sampler's x0 prediction after this
  // step (inspect.decode_every); empty on the other steps.
  Preview decoded;
  double sigma_after = 0;            // noise level of the latent after the step
  Verdict verdict = Verdict::clean;  // worst of the maps
};

// Analyses one step of one image: latent, noise_cond and (when not empty)
// noise_uncond, each [C, H, W]. limit: the UNet storage dtype's largest
// finite value (the latent is uploaded in it). factors: null for no preview.
// Bands and the preview's saturation are measured on every map but only
// non-finite and near-limit values decide a step's verdict: bands and
// saturation are judged on the decoded image (analyze_image).
// This form reduces on the backend that holds the maps (the pipeline's): latent
// [1, C, H, W] f32, noise [rows, C, H, W] in the UNet's storage dtype with the
// conditional branch at row cond_index and the unconditional one at
// uncond_index (-1: none). Only the reductions are read back; read_back, when
// given, receives their size in bytes.
StepStats analyze_step(Backend& be, const Tensor& latent, const Tensor& noise, int cond_index, int uncond_index,
                       double limit, const LatentRgbFactors* factors, double sigma_after,
                       std::size_t* read_back = nullptr);
// The same on host data (the reference reductions).
StepStats analyze_step(std::span<const float> latent, std::span<const float> noise_cond,
                       std::span<const float> noise_uncond, std::int64_t channels, std::int64_t height,
                       std::int64_t width, double limit, const LatentRgbFactors* factors, double sigma_after);

// The decoded image's checks ([3, H, W] on the -1..1 scale, before clamping).
struct ImageStats {
  MapStats map;                       // stats, mask, bands, saturation, clipped share
  std::int64_t nonfinite_pixels = 0;  // pixels with any non-finite channel
};
ImageStats analyze_image(std::span<const float> chw, std::int64_t height, std::int64_t width);

// One op of a layer trace: its output statistics and whether its inputs were finite.
struct OpRecord {
  int index = 0;             // order of execution within the traced call
  std::string component;     // "unet", "vae", "text_encoder"
  std::string path;          // diffusers module path inside the component ("decoder.mid_block.resnets.0.norm1")
  std::string op;            // "CONV2D", "GROUP_NORM", ...
  Shape shape;               // output shape
  DType dtype = DType::f32;  // output dtype
  std::string precision;     // effective precision, e.g. "f16 acc=f32 softmax=f32"
  std::string attention;     // attention ops: "fused", "bmm", "sliced(4)"; else empty
  Stats output;
  bool inputs_finite = true;      // every input held finite values only
  bool emulated_fault = false;    // fault emulation altered this op's output
  std::string full_path() const;  // component + "." + path
};

// A layer trace of one model call (a UNet or VAE forward).
struct LayerTrace {
  std::string call;  // "unet step 3", "vae decode"
  std::vector<OpRecord> ops;
  int origin = -1;      // index in ops of the first op whose inputs were finite and output was not
  int near_limit = -1;  // index of the first op whose output came within 10% of its dtype's limit
  const OpRecord* origin_op() const { return origin >= 0 ? &ops[static_cast<std::size_t>(origin)] : nullptr; }
  const OpRecord* near_limit_op() const {
    return near_limit >= 0 ? &ops[static_cast<std::size_t>(near_limit)] : nullptr;
  }
};

// What the inspector concludes about a whole run (pipeline::RunReport::inspection).
struct RunInspection {
  Verdict verdict = Verdict::clean;
  std::string summary;           // one plain-English line
  int first_bad_step = -1;       // first step whose verdict was not clean (-1: none)
  int first_bad_pass = 0;        // its pass: 1, or 2 for the hires fix's second pass (0: none); step counts within it
  std::string first_bad_branch;  // "latent", "noise_cond", "noise_uncond"
  // Full module path of the first bad op ("unet.mid_block.attentions.0..."): the first op whose inputs
  // were finite and output was not; without one, the first op an emulated fault altered.
  std::string origin;
  std::string origin_op;                   // its op name ("ATTENTION")
  std::string near_limit_origin;           // full module path of the first op within 10% of its dtype's limit
  std::optional<ImageStats> image;         // the image that was kept (after any retry)
  std::optional<ImageStats> first_decode;  // the first decode, when a retry replaced it
  std::vector<LayerTrace> traces;          // the layer traces taken (on a fault, or all when asked)
  bool emulation = false;                  // a fault emulation was active in this run
  std::string emulation_note;              // what was emulated, in plain English ("EMULATED: ...")
};

}  // namespace nanscope::inspect
