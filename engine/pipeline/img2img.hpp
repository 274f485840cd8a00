#pragma once
// img2img and the hires fix: the parts that are not the sampling loop
// (txt2img.cpp runs both, with Sampler::start_at).
//
// img2img follows diffusers 0.31's StableDiffusionImg2ImgPipeline: the init
// image is resized to the run's size with Lanczos when it differs (its
// VaeImageProcessor does the same with PIL), encoded by the run's VAE, and a
// sample of the posterior is drawn with the run's generator (retrieve_latents,
// sample_mode "sample": the generator's first draw), times scaling_factor;
// then `strength` picks the start step (get_timesteps, below) and the
// scheduler's add_noise mixes in the generator's next draw.
//
// The hires fix follows A1111's StableDiffusionProcessingTxt2Img.sample_hr_pass
// (modules/processing.py): the first pass's latent is enlarged with
// torch.nn.functional.interpolate (its "Latent" upscalers) or decoded,
// resized with Lanczos and encoded again; the noise is drawn again from the
// image's seed at the new size (A1111 makes a new ImageRNG from the seeds);
// and the second pass runs `hires.steps` steps of a longer schedule
// (sd_samplers_common.setup_img2img_steps, below).

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "core/tensor.hpp"
#include "io/png.hpp"

namespace nanscope::pipeline {

// Where a run that re-noises an existing latent starts in a schedule of
// `schedule_steps` steps, and how many it runs.
struct PartialSchedule {
  int schedule_steps = 0;  // passed to Sampler::set_timesteps
  int start = 0;           // passed to Sampler::start_at
  int run_steps() const { return schedule_steps - start; }
};

// diffusers' get_timesteps: init_timestep = min(int(steps * strength), steps),
// t_start = max(steps - init_timestep, 0). Throws ConfigError (naming
// `strength_key`) when that runs no step.
PartialSchedule img2img_schedule(int steps, double strength, const std::string& strength_key = "strength");

// A1111's setup_img2img_steps for the hires pass (steps given): a schedule of
// int(steps / min(denoise, 0.999)) steps of which the last `steps` run.
PartialSchedule hires_schedule(int steps, double denoise);

// The hires fix's sizes, as A1111 computes them
// (StableDiffusionProcessingTxt2Img.calculate_target_resolution and
// sample_hr_pass in modules/processing.py of AUTOMATIC1111/stable-diffusion-webui):
//  - no resize (resize_x = resize_y = 0): hr_upscale_to = int(size * scale);
//  - one side 0: that side follows the first pass's aspect, rounded down
//    (hr_upscale_to_y = hr_resize_x * height // width);
//  - both sides with another aspect: enlarge to cover the target (the side
//    whose ratio is tighter matches it, the other comes out longer), then
//    truncate_x = (hr_upscale_to_x - hr_resize_x) // opt_f latent columns are
//    cut from the upscaled latent, truncate_x // 2 on the left and
//    (truncate_x + 1) // 2 on the right (rows alike).
// The first pass is enlarged to [upscale_h // f, upscale_w // f] in the latent
// (`f` the VAE's downscale, A1111's opt_f = 8), then cropped; the second pass
// samples at [height / f, width / f].
struct HiresTarget {
  int upscale_w = 0, upscale_h = 0;    // hr_upscale_to_x / _y
  int truncate_x = 0, truncate_y = 0;  // latent columns / rows cut
  int width = 0, height = 0;           // the second pass's size: (upscale // f - truncate) * f
};
HiresTarget hires_target(int width, int height, double scale, int resize_x, int resize_y, int f);

// A1111's crop of the upscaled latent [1, C, h, w]:
// samples[:, :, ty // 2 : h - (ty + 1) // 2, tx // 2 : w - (tx + 1) // 2].
std::vector<float> truncate_latent(std::span<const float> latent, const Shape& shape, int truncate_x, int truncate_y);

// PIL's Image.resize(..., Image.LANCZOS) on 8-bit RGB, bit for bit: separable
// Lanczos-3 (support scaled when shrinking), horizontal pass then vertical,
// with Pillow's 22-bit fixed-point coefficients and rounding (the vertical
// pass first when the height shrinks and the width grows, as Pillow does).
io::RgbImage resize_lanczos(const io::RgbImage& image, int width, int height);

// The init image of an img2img run: `path` read as 8-bit RGB (grey, palette,
// 16-bit and alpha PNGs are converted by io::read_png; alpha is dropped, as
// PIL's convert("RGB") does), resized with Lanczos to width x height when it
// differs (`note` says so), as [1, 3, H, W] f32 in [-1, 1]. FileError names
// the file when it cannot be read.
HostTensor load_init_image(const std::filesystem::path& path, int width, int height, std::string* note);
// 8-bit RGB -> [1, 3, H, W] f32 in [-1, 1] (x / 255 * 2 - 1, as diffusers' preprocess).
HostTensor rgb_to_tensor(const io::RgbImage& image);

// diffusers' DiagonalGaussianDistribution.sample() times scaling_factor:
// `moments` [1, 2C, h, w] (Vae::encode_moments, f32), eps [1, C, h, w]
// standard normal -> (mean + exp(0.5 * clamp(logvar, -30, 20)) * eps - shift) * scaling.
std::vector<float> sample_posterior(std::span<const float> moments, std::int64_t channels, std::span<const float> eps,
                                    float scaling, float shift);

// torch.nn.functional.interpolate of a [1, C, h, w] latent to [1, C, out_h, out_w]:
// bilinear (align_corners False) for `latent`, nearest / nearest-exact for
// the others. `lanczos` is not a latent mode (ConfigError).
std::vector<float> interpolate_latent(std::span<const float> latent, const Shape& shape, std::int64_t out_h,
                                      std::int64_t out_w, HiresUpscaler mode);

}  // namespace nanscope::pipeline
