// bench_report's judgement of the speed targets (bench/targets.hpp) on
// hand-made bench results: each target met, missed (with the gap) or not
// measured, from the fields the benches write with --json.

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "../bench/targets.hpp"

namespace nanscope::bench {
namespace {

const Target& find(const std::vector<Target>& ts, const std::string& goal_part) {
  for (const Target& t : ts)
    if (t.goal.find(goal_part) != std::string::npos) return t;
  static const Target none{"(no target matches)", "", Verdict::not_measured};
  ADD_FAILURE() << "no target mentions \"" << goal_part << "\"";
  return none;
}

nlohmann::json component(const std::string& name, double ours_f32, double ours_f16, double torch, double ov, double ort,
                         double our_rss, double ov_rss) {
  nlohmann::json rows = nlohmann::json::array();
  rows.push_back({{"engine", "nanscope"},
                  {"dtype", "f32"},
                  {"name", "NaNscope f32"},
                  {"call", ours_f32},
                  {"first", ours_f32 * 1.1},
                  {"cores", 1.95},
                  {"peak_rss_mb", our_rss}});
  if (ours_f16 > 0) {
    rows.push_back({{"engine", "nanscope"},
                    {"dtype", "f16"},
                    {"name", "NaNscope f16"},
                    {"call", ours_f16},
                    {"first", ours_f16 * 1.5},
                    {"cores", 1.9},
                    {"peak_rss_mb", our_rss / 2}});
  }
  rows.push_back({{"engine", "torch"},
                  {"dtype", "f32"},
                  {"name", "diffusers f32"},
                  {"call", torch},
                  {"first", torch},
                  {"peak_rss_mb", 6000.0}});
  rows.push_back({{"engine", "peer"},
                  {"dtype", "f32"},
                  {"name", "OpenVINO f32 (CPU)"},
                  {"call", ov},
                  {"first", ov},
                  {"peak_rss_mb", ov_rss}});
  rows.push_back({{"engine", "peer"},
                  {"dtype", "f32"},
                  {"name", "ONNX Runtime f32 (CPU)"},
                  {"call", ort},
                  {"first", ort},
                  {"peak_rss_mb", ov_rss + 100}});
  return {{"component", name}, {"gflop", 1600.0}, {"peak_gflops", 200.0}, {"cpus", 2}, {"rows", rows}};
}

TEST(BenchTargets, JudgesEveryTargetFromTheBenchResults) {
  nlohmann::json r;
  r["ops"] = {{"peak_gflops", 200.0},
              {"rows",
               {{{"name", "gemm_1024"}, {"pct_peak", 88.0}},
                {{"name", "gemm_2048"}, {"pct_peak", 91.0}},
                {{"name", "conv3x3_320_64"}, {"pct_peak", 86.0}},
                {{"name", "conv3x3_128_512"}, {"pct_peak", 80.0}},
                {{"name", "attention_4096x8x40 (fused)"}, {"pct_peak", 55.0}},
                {{"name", "attention_4096x8x40 (bmm)"}, {"pct_peak", 20.0}},
                {{"name", "attention_16384x8x40 (fused)"}, {"pct_peak", 45.0}},
                {{"name", "layer_norm_2x4096x320"}, {"pct_bandwidth", 82.0}},
                {{"name", "geglu_2x4096x2560"}, {"pct_bandwidth", 19.0}}}}};
  // The call's linears: 30 x 3 ms at 90% of the peak and 10 x 0.2 ms at 70%: 89.6% by their FLOPs.
  // The register block alone at 190 GFLOP/s: the linears run at 94% of it.
  r["linears"] = {
      {"peak_gflops", 200.0},
      {"gemm_block_gflops", 190.0},
      {"rows",
       {{{"name", "linear_8192_320_320"}, {"count", 30}, {"ms", 3.0}, {"gflops", 180.0}, {"pct_peak", 90.0}},
        {{"name", "linear_154_768_320"}, {"count", 10}, {"ms", 0.2}, {"gflops", 140.0}, {"pct_peak", 70.0}}}}};
  // UNet: 8 s a call = 1600 GFLOP / 8 s = 200 GFLOP/s = 100% of peak; PyTorch 20 s: 2.5x.
  r["unet"] = component("unet", 8.0, 8.4, 20.0, 7.6, 9.0, 4000, 6900);
  r["vae"] = component("vae", 12.0, 11.0, 13.0, 12.5, 13.5, 1200, 1300);
  r["txt2img"] = {{"sizes", {{{"size", 0}, {"total", 0.45}}}},
                  {"cold_start", {{"helpers", {{"cold", 12.5}, {"warm", 0.8}, {"warm_kernel_s", 0.05}}}}}};
  r["growth"] = {{"sizes",
                  {{{"size", 256}, {"per_step", 0.1}, {"peak_rss_mb", 300.0}, {"torch", {{"peak_rss_mb", 600.0}}}},
                   {{"size", 512}, {"per_step", 0.45}, {"peak_rss_mb", 700.0}, {"torch", {{"peak_rss_mb", 650.0}}}},
                   {{"size", 1024}, {"per_step", 8.0}, {"peak_rss_mb", 1200.0}, {"torch_failed", true}}}}};
  r["inspect"] = {{"sizes", {{{"size", 64}, {"overhead_pct", 1.0}}, {{"size", 256}, {"overhead_pct", -0.5}}}}};

  const std::vector<Target> ts = evaluate_targets(r);
  const Target& gemm = find(ts, "GEMM at the models' shapes");
  EXPECT_EQ(gemm.verdict, Verdict::met);
  EXPECT_NE(gemm.measured.find("90% over the call's 2 linear shapes (lowest linear_154_768_320 70%)"),
            std::string::npos)
      << gemm.measured;
  EXPECT_NE(gemm.measured.find("square SGEMM: gemm_1024 88%, gemm_2048 91%"), std::string::npos) << gemm.measured;
  EXPECT_NE(gemm.measured.find("the register block alone (operands in L1) 95% of the peak, the linears 94% of that"),
            std::string::npos)
      << gemm.measured;
  const Target& conv = find(ts, "3x3 convolution");
  EXPECT_EQ(conv.verdict, Verdict::missed);
  EXPECT_NE(conv.measured.find("short by 5 points (conv3x3_128_512)"), std::string::npos) << conv.measured;
  EXPECT_EQ(find(ts, "4096 tokens").verdict, Verdict::met);  // the bmm row is not the fused kernel's
  EXPECT_EQ(find(ts, "16384 tokens").verdict, Verdict::missed);
  const Target& mem = find(ts, "memory-bound");
  EXPECT_EQ(mem.verdict, Verdict::missed);
  EXPECT_NE(mem.measured.find("1 of 2"), std::string::npos) << mem.measured;
  EXPECT_NE(mem.measured.find("geglu_2x4096x2560 19%"), std::string::npos) << mem.measured;

  EXPECT_EQ(find(ts, "latent 64, f32: >= 60% of peak").verdict, Verdict::met);
  EXPECT_EQ(find(ts, "latent 64, f32: >= 2x PyTorch").verdict, Verdict::met);
  const Target& peer = find(ts, "latent 64, f32: faster than");
  EXPECT_EQ(peer.verdict, Verdict::missed);  // OpenVINO 7.6 s against 8.0 s
  EXPECT_NE(peer.measured.find("0.95x the speed of OpenVINO"), std::string::npos) << peer.measured;
  EXPECT_EQ(find(ts, "latent 64: f16 storage").verdict, Verdict::missed);  // 8.4 s against 8.0 s
  EXPECT_EQ(find(ts, "latent 128").verdict, Verdict::not_measured);        // no unet_128 stage

  EXPECT_EQ(find(ts, "VAE decode, 512x512: >= 2x").verdict, Verdict::missed);
  EXPECT_EQ(find(ts, "VAE decode, 512x512: faster").verdict, Verdict::met);  // 12.5 s against 12.0 s
  EXPECT_EQ(find(ts, "VAE decode, 512x512: all cores").verdict, Verdict::met);
  EXPECT_EQ(find(ts, "VAE decode, 1024x1024: >= 2x").verdict, Verdict::not_measured);

  const Target& first = find(ts, "first call");
  EXPECT_EQ(first.verdict, Verdict::missed);  // the f16 rows' first calls took 1.5x
  EXPECT_NE(first.measured.find("unet f16 1.50x"), std::string::npos) << first.measured;
  EXPECT_EQ(find(ts, "peak RSS <= the lowest peer").verdict, Verdict::met);  // 4000/6900, 1200/1300

  EXPECT_EQ(find(ts, "every image size runs").verdict, Verdict::met);
  const Target& grow_mem = find(ts, "txt2img peak RSS");
  EXPECT_EQ(grow_mem.verdict, Verdict::missed);  // 700 MB against 650 at 512
  EXPECT_NE(grow_mem.measured.find("512: 1.08x"), std::string::npos) << grow_mem.measured;
  EXPECT_NE(grow_mem.measured.find("1024: diffusers failed, ours 1200 MB"), std::string::npos) << grow_mem.measured;
  EXPECT_EQ(find(ts, "end to end: < 2 s").verdict, Verdict::met);
  const Target& cold = find(ts, "cold start");
  EXPECT_EQ(cold.verdict, Verdict::missed);
  EXPECT_NE(cold.measured.find("short by 2.50 s"), std::string::npos) << cold.measured;
  EXPECT_EQ(find(ts, "warm start").verdict, Verdict::met);
  EXPECT_EQ(find(ts, "inspector").verdict, Verdict::met);
}

// The GEMM target weighs each linear shape by its FLOPs in the call: one slow small shape does not decide it,
// a slow large one does. Without the linears stage the square SGEMMs are shown and nothing is judged.
TEST(BenchTargets, GemmIsJudgedOnTheCallsLinearsByTheirFlops) {
  const auto judge = [](double big_pct) {
    nlohmann::json r;
    r["linears"] = {
        {"peak_gflops", 100.0},
        {"rows",
         {{{"name", "linear_2048_640_5120"}, {"count", 5}, {"ms", 10.0}, {"gflops", big_pct}, {"pct_peak", big_pct}},
          {{"name", "linear_154_768_640"}, {"count", 10}, {"ms", 0.1}, {"gflops", 50.0}, {"pct_peak", 50.0}}}}};
    r["ops"] = {{"rows", {{{"name", "gemm_2048"}, {"pct_peak", 80.0}}}}};
    return find(evaluate_targets(r), "GEMM at the models' shapes");
  };
  EXPECT_EQ(judge(88.0).verdict, Verdict::met);  // (5 x 10 x 88 + 10 x 0.1 x 50) / 51 ms: 87%
  const Target slow = judge(80.0);
  EXPECT_EQ(slow.verdict, Verdict::missed);
  EXPECT_NE(slow.measured.find("79% over the call's 2 linear shapes"), std::string::npos) << slow.measured;
  EXPECT_NE(slow.measured.find("short by 6 points"), std::string::npos) << slow.measured;

  EXPECT_NE(judge(84.5).measured.find("short by 1 point;"), std::string::npos) << judge(84.5).measured;  // 83.8%

  nlohmann::json square_only;
  square_only["ops"] = {{"rows", {{{"name", "gemm_1024"}, {"pct_peak", 90.0}}}}};
  const Target none = find(evaluate_targets(square_only), "GEMM at the models' shapes");
  EXPECT_EQ(none.verdict, Verdict::not_measured);
  EXPECT_NE(none.measured.find("gemm_1024 90%"), std::string::npos) << none.measured;
}

// bench_unet --rounds: the dtypes' processes took turns, and f16 against f32 is the median of each round's
// ratio, not the ratio of the two medians (4.5 against 4.4 s here: 1.02x, which would say missed). A round in
// which one dtype's process failed is null there and pairs with nothing.
TEST(BenchTargets, F16AgainstF32ComesFromTheRoundsTakingTurns) {
  const auto judge = [](const nlohmann::json& f32_rounds, const nlohmann::json& f16_rounds) {
    nlohmann::json r;
    r["unet"] = component("unet", 4.4, 4.5, 12.0, 4.7, 7.2, 4900, 6900);
    for (auto& row : r["unet"]["rows"]) row["call_rounds"] = row["name"] == "NaNscope f32" ? f32_rounds : f16_rounds;
    return find(evaluate_targets(r), "latent 64: f16 storage");
  };
  const Target half = judge({5.2, 4.3, 4.4}, {4.5, 4.2, 4.6});
  EXPECT_EQ(half.verdict, Verdict::met) << half.measured;
  EXPECT_NE(half.measured.find("0.98x f32's time (the median of 3 rounds taking turns: 0.87x, 0.98x, 1.05x)"),
            std::string::npos)
      << half.measured;
  const Target failed_round = judge({5.0, nullptr, 4.0, 4.0}, {4.5, 4.2, 4.4, 3.6});
  EXPECT_EQ(failed_round.verdict, Verdict::met) << failed_round.measured;
  EXPECT_NE(failed_round.measured.find("0.90x f32's time (the median of 3 rounds taking turns: 0.90x, 1.10x, 0.90x)"),
            std::string::npos)
      << failed_round.measured;
  EXPECT_DOUBLE_EQ(median({1.0, 4.0, 2.0, 3.0}), 2.5);  // an even count: the mean of the middle two
}

TEST(BenchTargets, NothingMeasuredIsSaidSo) {
  const std::vector<Target> ts = evaluate_targets(nlohmann::json::object());
  ASSERT_FALSE(ts.empty());
  for (const Target& t : ts) {
    EXPECT_EQ(t.verdict, Verdict::not_measured) << t.goal;
    EXPECT_TRUE(t.measured.empty()) << t.goal;
  }
}

}  // namespace
}  // namespace nanscope::bench
