// The five field reports as scenarios on the embedded model
// (resources/models/nanscope-tiny, or NANSCOPE_MODEL_DIR): each broken preset
// is detected with the right verdict and origin, each fixed twin is clean.
// Steps are cut to 8 so the whole file runs in seconds on a CPU. Skipped with
// a message when the embedded model is absent.

#include <gtest/gtest.h>

#include <filesystem>

#include "backend/device.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "core/version.hpp"
#include "pipeline/session.hpp"
#include "studies/report_json.hpp"
#include "studies/scenario.hpp"
#include "support/oracle.hpp"

namespace nanscope::studies {
namespace {

using namespace inspect;

namespace fs = std::filesystem;

#define REQUIRE_EMBEDDED_MODEL()                                                             \
  do {                                                                                       \
    try {                                                                                    \
      pipeline::embedded_model_dir();                                                        \
    } catch (const FileError& e) {                                                           \
      GTEST_SKIP() << "the embedded model is absent (set NANSCOPE_MODEL_DIR): " << e.what(); \
    }                                                                                        \
  } while (0)

ScenarioOptions quick(const fs::path& work) {
  ScenarioOptions o;
  o.sets = {"steps=8"};  // fewer steps leave the embedded model's pictures too rough to judge
  o.work_dir = work;
  return o;
}

TEST(Scenarios, ListNamesTheFiveReportsAndTheirPresetsExist) {
  ASSERT_EQ(scenarios().size(), 5u);
  const char* ids[] = {"R0", "R1", "R2", "R3", "R4"};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(scenarios()[i].id, ids[i]);
    EXPECT_FALSE(scenarios()[i].title.empty());
    // Every preset loads (versioned JSON, every key known).
    EXPECT_NO_THROW(load_preset(presets_dir() / scenarios()[i].preset)) << scenarios()[i].preset;
    EXPECT_NO_THROW(load_preset(presets_dir() / scenarios()[i].fixed_preset)) << scenarios()[i].fixed_preset;
  }
  EXPECT_NO_THROW(load_preset(presets_dir() / "R2-retry.json"));
  EXPECT_EQ(find_scenario("r2"), &scenarios()[2]);
  EXPECT_EQ(find_scenario("R9"), nullptr);
}

TEST(Scenarios, R0EmulatedBandsAreDetectedAndSlicedAttentionIsClean) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const ScenarioRun broken = run_scenario(*find_scenario("R0"), false, quick(work.path()));
  EXPECT_EQ(broken.run.verdict, Verdict::bands) << broken.run.summary;
  EXPECT_TRUE(broken.run.report["emulation"].get<bool>());
  EXPECT_NE(broken.run.report["emulation_note"].get<std::string>().find("EMULATED"), std::string::npos);
  EXPECT_EQ(broken.run.origin.rfind("vae.decoder.mid_block.attentions.0", 0), 0u) << broken.run.origin;
  const ScenarioRun fixed = run_scenario(*find_scenario("R0"), true, quick(work.path()));
  EXPECT_EQ(fixed.run.verdict, Verdict::clean) << fixed.run.summary;
  // The users' other workarounds: a nearby size (80x80: 400 latent tokens, not a power of two), or f32.
  ScenarioOptions nearby = quick(work.path());
  nearby.sets.insert(nearby.sets.end(), {"width=80", "height=80"});
  EXPECT_EQ(run_scenario(*find_scenario("R0"), false, nearby).run.verdict, Verdict::clean);
  ScenarioOptions f32 = quick(work.path());
  f32.sets.insert(f32.sets.end(), {"vae.dtype=f32"});
  EXPECT_EQ(run_scenario(*find_scenario("R0"), false, f32).run.verdict, Verdict::clean);
  // f16 instead of bf16: NaN, as on the real device.
  ScenarioOptions f16 = quick(work.path());
  f16.sets.push_back("vae.dtype=f16");
  f16.sets.push_back("vae=vae-fp16-fix");  // the shipped vae/ overflows in f16 by itself (R2)
  const ScenarioRun nan = run_scenario(*find_scenario("R0"), false, f16);
  EXPECT_EQ(nan.run.verdict, Verdict::non_finite) << nan.run.summary;
  EXPECT_EQ(nan.run.report["origin_op"], "ATTENTION");
}

TEST(Scenarios, R1HalfAccumulationOverflowsInTheStressedAttentionAndF32AccumulationFixesIt) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const ScenarioRun broken = run_scenario(*find_scenario("R1"), false, quick(work.path()));
  EXPECT_NE(broken.note.find("STRESS VARIANT"), std::string::npos);
  EXPECT_EQ(broken.run.verdict, Verdict::non_finite) << broken.run.summary;
  EXPECT_EQ(broken.run.origin, "unet.mid_block.attentions.0.transformer_blocks.0.attn1") << broken.run.summary;
  EXPECT_EQ(broken.run.report["first_bad_step"], 1);
  const ScenarioRun fixed = run_scenario(*find_scenario("R1"), true, quick(work.path()));
  EXPECT_EQ(fixed.run.verdict, Verdict::clean) << fixed.run.summary;
}

TEST(Scenarios, R2TheF16VaeOverflowsAtItsScaledConvAndBothFixesAreClean) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const ScenarioRun broken = run_scenario(*find_scenario("R2"), false, quick(work.path()));
  EXPECT_EQ(broken.run.verdict, Verdict::non_finite) << broken.run.summary;
  EXPECT_EQ(broken.run.origin, "vae.decoder.up_blocks.2.resnets.0.conv1") << broken.run.summary;
  EXPECT_EQ(broken.run.report["first_bad_step"], nullptr);  // sampling was clean; the decode broke
  const ScenarioRun fixed = run_scenario(*find_scenario("R2"), true, quick(work.path()));
  EXPECT_EQ(fixed.run.verdict, Verdict::clean) << fixed.run.summary;
  // The upcast retry of the kept latent.
  RunConfig retry = load_preset(presets_dir() / "R2-retry.json");
  retry.set("steps=8");
  pipeline::Session session;
  const InspectedRun r = run_inspected(session, retry);
  EXPECT_EQ(r.verdict, Verdict::clean) << r.summary;
  EXPECT_NE(r.summary.find("recovered"), std::string::npos) << r.summary;
  EXPECT_EQ(r.report["decodes"].size(), 2u);
}

TEST(Scenarios, R3AMissingPinnedDeviceIsReportedWithTheDeviceList) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const ScenarioRun broken = run_scenario(*find_scenario("R3"), false, quick(work.path()));
  EXPECT_EQ(broken.run.verdict, Verdict::device_missing) << broken.run.summary;
  EXPECT_NE(broken.run.error.find("reference"), std::string::npos) << broken.run.error;
  ASSERT_TRUE(broken.run.report.contains("devices"));
  EXPECT_EQ(broken.run.report["devices"].size(), enumerate_devices().devices.size());
  EXPECT_TRUE(broken.run.steps.empty());  // nothing ran anywhere else
  const ScenarioRun fixed = run_scenario(*find_scenario("R3"), true, quick(work.path()));
  EXPECT_EQ(fixed.run.verdict, Verdict::clean) << fixed.run.summary;
  EXPECT_EQ(fixed.run.report["device"], "reference");
  // Both reports (the error's and the run's) say which NaNscope wrote them.
  for (const auto* r : {&broken.run.report, &fixed.run.report}) {
    EXPECT_EQ((*r)["nanscope_version"], std::string(version()));
    EXPECT_EQ((*r)["nanscope_commit"],
              git_commit().empty() ? nlohmann::json() : nlohmann::json(std::string(git_commit())));
  }
}

TEST(Report, SaysWhichNaNscopeWroteIt) {
  const nlohmann::json r = report_json(RunConfig{}, {}, pipeline::RunReport{});
  EXPECT_EQ(r["nanscope_inspect_report"], kReportVersion);
  EXPECT_EQ(r["nanscope_version"], std::string(version()));
  EXPECT_EQ(r["nanscope_version"], NANSCOPE_VERSION);  // the project version from CMake
  if (git_commit().empty()) {
    EXPECT_TRUE(r["nanscope_commit"].is_null());
  } else {
    EXPECT_EQ(r["nanscope_commit"], std::string(git_commit()));
    EXPECT_GE(git_commit().size(), 7u);
  }
}

TEST(Scenarios, R4AColdKernelCacheIsASlowStartAndAWarmOneIsNot) {
  REQUIRE_EMBEDDED_MODEL();
  const DeviceList devices = enumerate_devices();
  if (select_device(devices, device_pin_from_env()).id == "reference")
    GTEST_SKIP() << "the default device is the reference device: it compiles no kernels";
  test::TempDir work;
  ScenarioOptions o;  // the preset's 8 steps: a 2-step image is too rough to be judged clean
  o.work_dir = work.path();
  const ScenarioRun cold = run_scenario(*find_scenario("R4"), false, o);
  EXPECT_EQ(cold.run.verdict, Verdict::slow_start) << cold.note;
  EXPECT_GT(cold.run.report["kernel_build"]["built"].get<int>(), 0);
  EXPECT_EQ(cold.run.report["kernel_build"]["cached"].get<int>(), 0);
  const ScenarioRun warm = run_scenario(*find_scenario("R4"), true, o);
  EXPECT_EQ(warm.run.verdict, Verdict::clean) << warm.note;
  EXPECT_EQ(warm.run.report["kernel_build"]["built"].get<int>(), 0) << warm.note;
}

}  // namespace
}  // namespace nanscope::studies
