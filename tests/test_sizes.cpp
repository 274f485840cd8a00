// Image sizes across the whole range the settings accept: every size gives an
// image or a message naming the buffer and what helps, never a signal. The
// memory plan (engine/pipeline/memory_plan.hpp) refuses before any work what
// the device cannot hold; what it lets through must run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"
#include "pipeline/memory_plan.hpp"
#include "pipeline/session.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;

RunConfig one_step(int size) {
  RunConfig cfg;
  cfg.prompt = "a red circle on a blue background";
  cfg.steps = 1;
  cfg.cfg_scale = 1.0;  // guidance off: one UNet row, the cheapest run at a size
  cfg.width = cfg.height = size;
  return cfg;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(MemoryPlan, FitsTheModelsOwnSizeAndNamesItsLargestBuffer) {
  pipeline::Session session;
  const RunConfig cfg = one_step(64);
  pipeline::SdModel& m = session.model(cfg);
  Backend& be = session.backend(cfg.device);
  OpContext ctx;
  ctx.backend = &be;
  ctx.precision = Precision{DType::f32};
  const pipeline::MemoryPlan plan = pipeline::plan_memory({&m, ctx, ctx, 64, 64, true, 0});
  EXPECT_TRUE(plan.fits()) << plan.refusal;
  EXPECT_GT(plan.peak_bytes, 0u);
  EXPECT_EQ(plan.largest.component, "vae");
  EXPECT_FALSE(plan.largest.op.empty()) << plan.largest.describe();
  EXPECT_TRUE(contains(plan.largest.module, "decoder.")) << plan.largest.describe();
  // The decoder's largest output at 64x64 is 32 channels at full size in f32 (the embedded VAE).
  EXPECT_EQ(plan.largest.bytes, 32u * 64 * 64 * 4) << plan.largest.describe();
  // Twice the size, four times the buffer: the plan follows the size.
  const pipeline::MemoryPlan big = pipeline::plan_memory({&m, ctx, ctx, 128, 128, true, 0});
  EXPECT_EQ(big.largest.bytes, 4 * plan.largest.bytes);
  EXPECT_GT(big.peak_bytes, plan.peak_bytes);
}

TEST(MemoryPlan, ASizeLargerThanTheDeviceIsRefusedBeforeAnyWorkAndTheNextRunWorks) {
  BackendOptions options;
  options.memory_limit_bytes = std::uint64_t{96} << 20;  // as if the device had 96 MiB
  pipeline::Session session(options);
  const RunConfig too_big = one_step(1024);
  try {
    session.generate(too_big);
    FAIL() << "1024x1024 cannot fit 96 MiB";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "1024x1024 does not fit")) << msg;
    EXPECT_TRUE(contains(msg, "vae decoder.")) << msg;  // the buffer's component and module
    EXPECT_TRUE(contains(msg, "smaller width and height")) << msg;
    EXPECT_TRUE(contains(msg, "The largest square size that fits is ")) << msg;
  }
  // Nothing was left allocated by the refused run, and a size that fits runs.
  const auto images = session.generate(one_step(64));
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0].image.width, 64);
}

TEST(MemoryPlan, TheLargestSizeThatFitsIsOneThatRuns) {
  BackendOptions options;
  options.memory_limit_bytes = std::uint64_t{96} << 20;
  pipeline::Session session(options);
  const RunConfig cfg = one_step(64);
  pipeline::SdModel& m = session.model(cfg);
  OpContext ctx;
  ctx.backend = &session.backend(cfg.device);
  ctx.precision = Precision{DType::f32};
  const pipeline::PlanRequest request{&m, ctx, ctx, 64, 64, false, 0};
  const int largest = pipeline::largest_square_size(request, 16, 16384);
  ASSERT_GT(largest, 64);
  ASSERT_LT(largest, 1024);
  pipeline::PlanRequest at = request;
  at.width = at.height = largest;
  EXPECT_TRUE(pipeline::plan_memory(at).fits());
  at.width = at.height = largest + 16;
  EXPECT_FALSE(pipeline::plan_memory(at).fits());
}

// The CPU family keeps LINEAR weights packed after their first use (weight_panels.hpp); they count as resident
// in the next run's plan. A size that fits without them must not be refused, nor its decode tiled under
// vae.tiling=auto, because an earlier, smaller run left them: they are given back.
TEST(MemoryPlan, KeptWeightPanelsAreGivenBackBeforeASizeIsRefusedOrADecodeTiled) {
  RunConfig small = one_step(64), big = one_step(256);
  small.vae_tiling = big.vae_tiling = "off";  // the plan's peak then does not depend on the memory limit
  BackendOptions options;
  options.weight_panel_bytes = std::uint64_t{1} << 30;
  std::uint64_t kept = 0, resident = 0, peak = 0;
  io::RgbImage whole;
  {
    pipeline::Session session(options);
    Backend& be = session.backend(small.device);
    const auto* ocl = dynamic_cast<const opencl::OpenClBackend*>(&be);
    if (!ocl || ocl->kernel_style() != opencl::KernelStyle::cpu) {
      GTEST_SKIP() << "only the OpenCL CPU kernel family keeps packed weights; the default device here does not use it";
    }
    session.generate(small);
    const std::uint64_t with_panels = be.allocated_bytes();
    const std::uint64_t cached = be.cache_bytes();
    kept = be.release_caches();
    resident = be.allocated_bytes();
    ASSERT_GT(kept, 0u) << "the first run keeps the text encoder's and the UNet's LINEAR weights packed";
    EXPECT_EQ(kept, cached) << "kept panels are counted at the sizes the pool served them with";
    EXPECT_EQ(resident, with_panels - kept) << "what release_caches reports is what allocated_bytes drops by";
    EXPECT_EQ(be.release_caches(), 0u) << "nothing left to give back";
    OpContext ctx;
    ctx.backend = &be;
    ctx.precision = Precision{DType::f32};
    const pipeline::MemoryPlan plan = pipeline::plan_memory({&session.model(big), ctx, ctx, 256, 256, false, 0});
    ASSERT_TRUE(plan.fits()) << plan.refusal;
    ASSERT_EQ(plan.peak_component, "vae");
    peak = plan.peak_bytes;
    whole = session.generate(big).at(0).image;  // decoded whole
    be.release_caches();
  }
  // A device on which 256x256 fits, but not with the 64x64 run's panels still kept.
  options.memory_limit_bytes = peak + resident + kept / 2;
  {
    pipeline::Session session(options);
    session.generate(small);
    Backend& be = session.backend(small.device);
    ASSERT_GT(be.allocated_bytes(), resident + kept / 2) << "the small run kept its panels again";
    const auto images = session.generate(big);
    ASSERT_EQ(images.size(), 1u);
    EXPECT_EQ(images[0].image, whole);
    // The run may keep panels again, within what its plan left free.
    EXPECT_LE(be.allocated_bytes(), resident + kept / 2);
  }
  // vae.tiling=auto: the plan fits with the panels kept (it plans the decode in tiles); the whole decode fits
  // only without them, and a fresh session decodes whole.
  RunConfig big_auto = big;
  big_auto.vae_tiling = "auto";
  big_auto.vae_tile_size = 128;
  pipeline::Session session(options);
  session.generate(small);
  Backend& be = session.backend(small.device);
  const auto images = session.generate(big_auto);
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(be.cache_bytes(), 0u) << "given back at the decode, and none kept for the rest of the run";
  EXPECT_EQ(images[0].image, whole) << "decoded whole, as a fresh session does, not in tiles";
}

TEST(MemoryPlan, TheLargestAcceptedSizeIsRefusedNamingTheBuffer) {
  pipeline::Session session;
  for (const char* device : {"", "reference"}) {
    RunConfig cfg = one_step(16384);
    cfg.device = device;
    try {
      session.generate(cfg);
      FAIL() << "16384x16384 cannot fit one buffer on " << device;
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "16384x16384 does not fit")) << msg;
      EXPECT_TRUE(contains(msg, "UPSAMPLE_NEAREST2X vae decoder.up_blocks.")) << msg;  // the op, component, module
      EXPECT_TRUE(contains(msg, " f32 (")) << msg;                                     // the buffer's dtype and size
    }
  }
}

// The CLI at sizes across the accepted range, each in its own process: an
// image, or an error message and exit status 1; never a signal. 2048 is the
// size that used to end the process (a SIGSEGV in the GEMM during the decode:
// a driver-chosen work-group overflowed the worker's stack); it takes minutes
// on two cores, so it has a test of its own below, run on request. The same
// crash happened at 1024x1024, which the range test runs.
TEST(SizeRange, EverySizeGivesAnImageOrAMessage) {
  const fs::path dir = fs::temp_directory_path() / "nanscope-test-sizes";
  fs::create_directories(dir);
  for (int size : {64, 512, 1024, 4096, 8192, 16384}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const fs::path png = dir / (std::to_string(size) + ".png");
    fs::remove(png);
    const std::string s = std::to_string(size);
    // From 4096 up, as on a 4 GiB card: PoCL reports a share of the machine's free memory as the
    // device's, and where that lets 4096 through, one step takes hours on two cores.
    std::vector<std::string> argv{NANSCOPE_CLI_PATH};
    if (size >= 4096) argv.insert(argv.end(), {"--memory-limit", "4096"});
    argv.insert(argv.end(), {"generate", "--steps", "1", "--cfg", "1", "--size", s + "x" + s, "-o", png.string()});
    const auto r = test::run_process(argv);
    ASSERT_LT(r.exit_code, 128) << "ended by a signal\n" << r.err;
    if (r.exit_code == 0) {
      EXPECT_TRUE(fs::exists(png));
    } else {
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_TRUE(contains(r.err, "does not fit")) << r.err;
      EXPECT_TRUE(contains(r.err, "The largest square size that fits is ")) << r.err;
      EXPECT_FALSE(fs::exists(png));
    }
    // What fits this machine's device runs (1024 needs well under 1 GiB); 4 GiB cannot hold 4096 and up.
    if (size <= 1024) {
      EXPECT_EQ(r.exit_code, 0) << r.err;
    } else {
      EXPECT_EQ(r.exit_code, 1) << r.err;
    }
  }
}

TEST(SizeRange, Size2048RunsToAnImage) {
  // About 15-20 minutes on two cores today (the embedded UNet's 65536-token attention): run on request.
  if (std::getenv("NANSCOPE_SLOW_TESTS") == nullptr) GTEST_SKIP() << "set NANSCOPE_SLOW_TESTS=1 to run (minutes)";
  const fs::path png = fs::temp_directory_path() / "nanscope-test-sizes-2048.png";
  fs::remove(png);
  const auto r = test::run_process(
      {NANSCOPE_CLI_PATH, "generate", "--steps", "1", "--cfg", "1", "--size", "2048x2048", "-o", png.string()});
  ASSERT_LT(r.exit_code, 128) << "ended by a signal\n" << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(png));
}

TEST(SizeRange, AMemoryLimitRefusesWhatASmallerCardCouldNotHold) {
  const auto r = test::run_process({NANSCOPE_CLI_PATH, "--memory-limit", "128", "generate", "--steps", "1", "--size",
                                    "1024x1024", "-o", (fs::temp_directory_path() / "nanscope-limit.png").string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "1024x1024 does not fit")) << r.err;
  EXPECT_TRUE(contains(r.err, "128.0 MiB")) << r.err;
  // Global options also follow the subcommand.
  const auto after =
      test::run_process({NANSCOPE_CLI_PATH, "generate", "--memory-limit", "128", "--steps", "1", "--size", "1024x1024",
                         "-o", (fs::temp_directory_path() / "nanscope-limit.png").string()});
  EXPECT_EQ(after.exit_code, 1) << after.err;
  EXPECT_TRUE(contains(after.err, "1024x1024 does not fit")) << after.err;
}

}  // namespace
}  // namespace nanscope
