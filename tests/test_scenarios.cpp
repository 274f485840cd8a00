// The five field reports as scenarios on the embedded model
// (resources/models/nanscope-tiny, or NANSCOPE_MODEL_DIR): each broken preset
// is detected with the right verdict and origin, each fixed twin is clean.
// Steps are cut to 8 so the whole file runs in seconds on a CPU. Skipped with
// a message when the embedded model is absent.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "backend/device.hpp"
#include "config/module_pattern.hpp"
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

// The VAE modules retry-layer-f32 computes in f32 for R2, in the order the
// traces name them: the conv whose output overflows f16, then the norm that
// output flows into (casting it back to f16 overflowed there; the norm's own
// output is small again).
const std::vector<std::string> R2_UPCAST = {"vae.decoder.up_blocks.2.resnets.0.conv1",
                                            "vae.decoder.up_blocks.2.resnets.0.norm2"};

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
  EXPECT_EQ(load_preset(presets_dir() / "R2-layer-retry.json").nan_policy.kind, NanPolicy::Kind::retry_layer_f32);
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

// retry-layer-f32 on a scenario: the policy and a trace of the clean call (inspect.trace=always).
ScenarioRun run_layer_retry(const char* id, const fs::path& work, std::vector<std::string> extra = {}) {
  ScenarioOptions o = quick(work);
  o.sets.insert(o.sets.end(), {"nan_policy=retry-layer-f32", "inspect.trace=always"});
  o.sets.insert(o.sets.end(), extra.begin(), extra.end());
  return run_scenario(*find_scenario(id), false, o);
}

bool upcast_by(const std::vector<std::string>& patterns, const std::string& module) {
  for (const auto& p : patterns)
    if (ModulePattern::parse(p).matches(module)) return true;
  return false;
}

// Every op of a trace computes in f32 when one of `patterns` covers its module
// and in `rest` otherwise; both kinds occur. CAST ops carry a value into the
// next module's dtype, so they follow the same rule.
void expect_only_upcast_modules_in_f32(const LayerTrace& t, const std::vector<std::string>& patterns, DType rest) {
  int upcast = 0, kept = 0;
  for (const auto& op : t.ops) {
    const bool up = upcast_by(patterns, op.full_path());
    (up ? upcast : kept) += 1;
    EXPECT_EQ(dtype_name(op.dtype), dtype_name(up ? DType::f32 : rest))
        << t.call << " op " << op.index << " " << op.full_path() << " " << op.op;
  }
  EXPECT_GT(upcast, 0) << t.call;
  EXPECT_GT(kept, upcast) << t.call;
}

TEST(Scenarios, R1WithRetryLayerF32UpcastsOnlyTheBrokenAttentionAndComesOutClean) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const ScenarioRun r = run_layer_retry("R1", work.path());
  const InspectedRun& run = r.run;
  ASSERT_EQ(run.reports.size(), 1u);
  const pipeline::LayerRetryReport& lr = run.reports[0].layer_retry;
  EXPECT_EQ(run.verdict, Verdict::clean) << run.summary;
  EXPECT_TRUE(lr.active);
  EXPECT_TRUE(lr.clean) << lr.remaining;
  // Only the stressed self-attention was upcast, found in the UNet call of step 1 and redone there.
  EXPECT_EQ(lr.upcast, std::vector<std::string>{"unet.mid_block.attentions.0.transformer_blocks.0.attn1"});
  ASSERT_EQ(lr.attempts.size(), 1u);
  EXPECT_EQ(lr.attempts[0].call, "unet step 1");
  EXPECT_EQ(lr.attempts[0].origin_op, "ATTENTION");
  EXPECT_GT(lr.attempts[0].nonfinite_before, 0);
  EXPECT_EQ(lr.attempts[0].nonfinite_after, 0);
  EXPECT_GT(lr.attempts[0].redo_seconds, 0.0);
  // The run was not restarted: each step ran once, and none went non-finite.
  EXPECT_EQ(run.steps.size(), 8u);
  for (const auto& s : run.steps) EXPECT_EQ(s.noise_cond.nonfinite(), 0) << "step " << s.index + 1;
  // The last step's trace (inspect.trace=always): attn1 in f32, the rest of the UNet in f16.
  const auto& traces = run.reports[0].inspection.traces;
  ASSERT_GE(traces.size(), 2u);
  EXPECT_EQ(traces.front().call, "unet step 1");  // the trace that named the origin
  EXPECT_EQ(traces.front().origin_op()->full_path(), lr.upcast[0]);
  const LayerTrace* last = nullptr;
  for (const auto& t : traces)
    if (t.call == "unet step 8") last = &t;
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->origin, -1);
  expect_only_upcast_modules_in_f32(*last, lr.upcast, DType::f16);
  // The report says it; the overrides are ready to apply.
  const auto& j = run.report["layer_retry"];
  EXPECT_TRUE(j["clean"].get<bool>());
  EXPECT_EQ(j["overrides"],
            nlohmann::json::parse(
                R"([{"pattern": "unet.mid_block.attentions.0.transformer_blocks.0.attn1", "dtype": "f32"}])"));
  EXPECT_NE(run.reports[0].outcome.find("retry-layer-f32 computed 1 module in f32"), std::string::npos)
      << run.reports[0].outcome;
  // The overrides alone (no policy) make the same run clean from the first step.
  ScenarioOptions o = quick(work.path());
  o.sets.push_back(lr.upcast[0] + ".dtype=f32");
  const ScenarioRun fixed = run_scenario(*find_scenario("R1"), false, o);
  EXPECT_EQ(fixed.run.verdict, Verdict::clean) << fixed.run.summary;
  EXPECT_TRUE(fixed.run.reports.at(0).inspection.traces.empty());
}

TEST(Scenarios, R2WithRetryLayerF32UpcastsOnlyTheVaeModulesThatBreakAndComesOutClean) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const ScenarioRun r = run_layer_retry("R2", work.path());
  const InspectedRun& run = r.run;
  ASSERT_EQ(run.reports.size(), 1u);
  const pipeline::RunReport& rep = run.reports[0];
  const pipeline::LayerRetryReport& lr = rep.layer_retry;
  EXPECT_EQ(run.verdict, Verdict::clean) << run.summary;
  EXPECT_TRUE(lr.clean) << lr.remaining;
  ASSERT_FALSE(lr.upcast.empty());
  // The first module is the conv the trace names; each later one is the next origin of the redone decode.
  EXPECT_EQ(lr.upcast[0], "vae.decoder.up_blocks.2.resnets.0.conv1");
  EXPECT_EQ(lr.upcast, R2_UPCAST);
  ASSERT_EQ(lr.attempts.size(), lr.upcast.size());
  for (std::size_t i = 0; i < lr.attempts.size(); ++i) {
    EXPECT_EQ(lr.attempts[i].call, "vae decode");
    EXPECT_EQ(lr.attempts[i].upcast, lr.upcast[i]);
    EXPECT_EQ(lr.attempts[i].nonfinite_after == 0, i + 1 == lr.attempts.size());
  }
  // Sampling ran once; only the decode was redone, from the kept latent.
  EXPECT_EQ(run.steps.size(), 8u);
  ASSERT_EQ(rep.decodes.size(), 1 + lr.attempts.size());
  EXPECT_GT(rep.decodes.front().nonfinite, 0);
  EXPECT_EQ(rep.decodes.back().nonfinite, 0);
  for (const auto& d : rep.decodes) EXPECT_EQ(d.dtype, DType::f16);  // the VAE stays f16
  // The clean decode's trace: the upcast modules in f32, the rest of the VAE in f16.
  const LayerTrace& last = rep.inspection.traces.back();
  EXPECT_EQ(last.call, "vae decode");
  EXPECT_EQ(last.origin, -1);
  expect_only_upcast_modules_in_f32(last, lr.upcast, DType::f16);
  // The UNet keeps its f32: its last-step trace has no f16 op and no upcast.
  for (const auto& t : rep.inspection.traces) {
    if (t.call.rfind("unet", 0) != 0) continue;
    for (const auto& op : t.ops) EXPECT_EQ(op.dtype, DType::f32) << op.full_path();
  }
  EXPECT_EQ(run.report["layer_retry"]["upcast"], nlohmann::json(lr.upcast));
  EXPECT_EQ(run.report["layer_retry"]["attempts"].size(), lr.attempts.size());
  EXPECT_NE(run.summary.find("recovered by retry-layer-f32"), std::string::npos) << run.summary;
}

TEST(Scenarios, RetryLayerF32StopsAtTheLimitAndSaysWhatIsStillBroken) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const ScenarioRun none = run_layer_retry("R2", work.path(), {"inspect.layer_retry_limit=0"});
  const pipeline::LayerRetryReport& lr0 = none.run.reports.at(0).layer_retry;
  EXPECT_EQ(none.run.verdict, Verdict::non_finite) << none.run.summary;
  EXPECT_TRUE(lr0.active);
  EXPECT_FALSE(lr0.clean);
  EXPECT_TRUE(lr0.limit_reached);
  EXPECT_TRUE(lr0.upcast.empty());
  EXPECT_NE(lr0.remaining.find("vae decode still gives"), std::string::npos) << lr0.remaining;
  EXPECT_NE(lr0.remaining.find("inspect.layer_retry_limit"), std::string::npos) << lr0.remaining;
  EXPECT_NE(none.run.summary.find("did not recover"), std::string::npos) << none.run.summary;
  EXPECT_EQ(none.run.report["layer_retry"]["limit_reached"], true);

  const ScenarioRun one = run_layer_retry("R2", work.path(), {"inspect.layer_retry_limit=1"});
  const pipeline::LayerRetryReport& lr1 = one.run.reports.at(0).layer_retry;
  ASSERT_EQ(lr1.upcast.size(), 1u);
  EXPECT_EQ(lr1.upcast[0], "vae.decoder.up_blocks.2.resnets.0.conv1");
  EXPECT_EQ(lr1.clean, R2_UPCAST.size() == 1);
  EXPECT_EQ(lr1.limit_reached, R2_UPCAST.size() > 1);
}

TEST(Scenarios, R2WithRetryLayerF32FromTheCommandLine) {
  REQUIRE_EMBEDDED_MODEL();
  test::TempDir work;
  const fs::path json = work.path() / "r2.json", png = work.path() / "r2.png";
  const std::string preset = (presets_dir() / "R2.json").string();
  const auto r = test::run_process({NANSCOPE_CLI_PATH, "inspect", "--preset", preset, "--set", "steps=8",
                                    "--nan-policy", "retry-layer-f32", "--json", json.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("verdict: clean"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("retry-layer-f32 (limit 8 upcast modules per image):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1. vae decode: vae.decoder.up_blocks.2.resnets.0.conv1 (CONV2D) broke"), std::string::npos)
      << r.out;
  std::string sets;
  for (const auto& u : R2_UPCAST) sets += " --set " + u + ".dtype=f32";
  EXPECT_NE(r.out.find("the fix as settings:" + sets + "\n"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(j["verdict"], "clean");
  EXPECT_EQ(j["layer_retry"]["clean"], true);
  EXPECT_EQ(j["layer_retry"]["upcast"], nlohmann::json(R2_UPCAST));
  EXPECT_EQ(j["config"]["nan_policy"], "retry-layer-f32");

  const auto g = test::run_process({NANSCOPE_CLI_PATH, "generate", "--preset", preset, "--steps", "8", "--nan-policy",
                                    "retry-layer-f32", "-o", png.string()});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.out.find("retry-layer-f32 computed " + std::to_string(R2_UPCAST.size())), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("the fix as settings:" + sets + "\n"), std::string::npos) << g.out;
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

// A cold run builds what its kernel plan listed and nothing after it: the
// plan takes the variants the GPU family picks by shape (GEMM tiles, flash
// tiles per head size, the causal text encoder's fused kernel) from the memory
// plan's dry run. On the H200 the plan had missed four programs, 11 s of
// builds one after another (the GPU style forced here on PoCL shows the same);
// with the dry run's calls its cold R4 run took 8.8 s instead of 24.0 s.
TEST(Scenarios, R4ColdRunBuildsOnlyWhatItsPlanListed) {
  REQUIRE_EMBEDDED_MODEL();
  const DeviceList devices = enumerate_devices();
  const DeviceInfo& dev = select_device(devices, device_pin_from_env());
  if (dev.id == "reference") GTEST_SKIP() << "the default device is the reference device: it compiles no kernels";
  // The device's own family, and on a CPU the GPU family forced too (as the op suite's *_gpu_style
  // entries do). Not the CPU family on a GPU: its one-work-item groups with large private arrays are
  // out of a GPU's resources (CL_OUT_OF_RESOURCES on the H200).
  std::vector<KernelStyleChoice> styles{KernelStyleChoice::by_device};
  if (dev.kind == DeviceKind::cpu) styles.push_back(KernelStyleChoice::gpu);
  for (const KernelStyleChoice style : styles) {
    SCOPED_TRACE(style == KernelStyleChoice::gpu ? "gpu-style kernels forced" : "the device's kernel family");
    test::TempDir work;
    ScenarioOptions o;
    o.work_dir = work.path();
    o.sets = {"steps=2"};
    o.backend.kernel_style = style;
    std::vector<KernelBuildEvent> events;
    o.backend.on_kernel_build = [&events](const KernelBuildEvent& e) { events.push_back(e); };
    const ScenarioRun cold = run_scenario(*find_scenario("R4"), false, o);
    ASSERT_EQ(cold.run.report["kernel_build"]["cached"].get<int>(), 0) << cold.note;
    int planned = 0, built = 0;
    for (const KernelBuildEvent& e : events) {
      if (e.plan) planned = e.plan_count;
      if (!e.finished || e.plan) continue;
      ++built;
      EXPECT_GT(e.plan_count, 0) << e.program << " [" << e.options << "] was built outside the plan";
    }
    EXPECT_GT(planned, 0);
    EXPECT_EQ(built, planned) << "every planned program built once, nothing else";
  }
}

}  // namespace
}  // namespace nanscope::studies
