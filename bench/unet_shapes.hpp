#pragma once
// The distinct op shapes of one SD 1.5 UNet call (batch 2: classifier-free
// guidance) at a latent size, with how often each occurs, walked from the
// architecture (diffusers' UNet2DConditionModel with SD 1.5's configuration:
// block widths 320/640/1280/1280, 2 resnets per down block and 3 per up block,
// a transformer after each resnet of the first three levels and in the mid
// block, 8 heads, 1x1-conv projections, GEGLU feed-forward, 77 text tokens of
// 768). bench_ops --shapes times each once; count x time is that shape's
// share of a call.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanscope::bench {

struct OpShape {
  std::string kind;             // "conv", "linear", "attention"
  std::vector<std::int64_t> p;  // conv: n c h w o k stride; linear: rows in out; attention: b sq sk heads d
  int count = 0;                // occurrences in one call
  std::string name() const {
    std::string s = kind;
    for (auto v : p) s += "_" + std::to_string(v);
    return s;
  }
  // Multiply-adds x 2 (the convolution as its GEMM; attention's two products).
  double flops() const {
    if (kind == "conv") {
      const double oh = double(p[2] / p[6]), ow = double(p[3] / p[6]);
      return 2.0 * double(p[0] * p[4]) * oh * ow * double(p[1] * p[5] * p[5]);
    }
    if (kind == "linear") return 2.0 * double(p[0]) * double(p[1]) * double(p[2]);
    return 4.0 * double(p[0] * p[3]) * double(p[1]) * double(p[2]) * double(p[4]);
  }
  nlohmann::json json() const { return {{"name", name()}, {"kind", kind}, {"p", p}}; }
};

inline std::vector<OpShape> sd15_unet_shapes(std::int64_t latent) {
  std::vector<OpShape> out;
  const auto add = [&](const std::string& kind, std::vector<std::int64_t> p) {
    for (auto& s : out)
      if (s.kind == kind && s.p == p) {
        ++s.count;
        return;
      }
    out.push_back({kind, std::move(p), 1});
  };
  const std::int64_t n = 2, text = 77, ctx_dim = 768, heads = 8;
  const auto conv = [&](std::int64_t c, std::int64_t res, std::int64_t o, std::int64_t k, std::int64_t stride) {
    add("conv", {n, c, res, res, o, k, stride});
  };
  const auto resnet = [&](std::int64_t c, std::int64_t o, std::int64_t res) {
    conv(c, res, o, 3, 1);
    conv(o, res, o, 3, 1);
    if (c != o) conv(c, res, o, 1, 1);
  };
  const auto transformer = [&](std::int64_t c, std::int64_t res) {
    const std::int64_t rows = n * res * res;
    conv(c, res, c, 1, 1);                                    // proj_in
    for (int i = 0; i < 4; ++i) add("linear", {rows, c, c});  // attn1 q, k, v, out
    add("attention", {n, res * res, res * res, heads, c / heads});
    for (int i = 0; i < 2; ++i) add("linear", {rows, c, c});            // attn2 q, out
    for (int i = 0; i < 2; ++i) add("linear", {n * text, ctx_dim, c});  // attn2 k, v
    add("attention", {n, res * res, text, heads, c / heads});
    add("linear", {rows, c, 8 * c});  // GEGLU projection (two halves of 4c)
    add("linear", {rows, 4 * c, c});
    conv(c, res, c, 1, 1);  // proj_out
  };
  const std::int64_t widths[4] = {320, 640, 1280, 1280};
  std::int64_t res = latent, ch = 320;
  conv(4, res, 320, 3, 1);  // conv_in
  std::vector<std::int64_t> skips{320};
  for (int b = 0; b < 4; ++b) {
    for (int l = 0; l < 2; ++l) {
      resnet(ch, widths[b], res);
      ch = widths[b];
      if (b < 3) transformer(ch, res);
      skips.push_back(ch);
    }
    if (b < 3) {
      conv(ch, res, ch, 3, 2);  // downsampler
      res /= 2;
      skips.push_back(ch);
    }
  }
  resnet(ch, ch, res);  // mid block
  transformer(ch, res);
  resnet(ch, ch, res);
  for (int b = 0; b < 4; ++b) {
    const std::int64_t w = widths[3 - b];
    for (int l = 0; l < 3; ++l) {
      const std::int64_t skip = skips.back();
      skips.pop_back();
      resnet(ch + skip, w, res);
      ch = w;
      if (b > 0) transformer(ch, res);
    }
    if (b < 3) {
      res *= 2;
      conv(ch, res, ch, 3, 1);  // upsampler's conv after the nearest 2x
    }
  }
  conv(320, res, 4, 3, 1);  // conv_out
  return out;
}

}  // namespace nanscope::bench
