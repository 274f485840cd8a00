// Sweeps: a spec expands into configs x seeds x sizes x devices cells; a cell
// whose report exists is skipped (resume); the merge lists every cell with its
// verdict. The runs use the embedded model (skipped when it is absent).

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>

#include "core/error.hpp"
#include "pipeline/sd_model.hpp"
#include "studies/sweep.hpp"
#include "support/oracle.hpp"
#include "support/small_fs.hpp"

namespace nanscope::studies {
namespace {

namespace fs = std::filesystem;

fs::path write_spec(const fs::path& dir, const std::string& text) {
  const fs::path p = dir / "spec.json";
  std::ofstream(p) << text;
  return p;
}

TEST(Sweep, ExpandsEveryCombinationIntoNamedCells) {
  test::TempDir dir;
  const auto spec = SweepSpec::load(write_spec(dir.path(), R"({
    "nanscope_sweep": 1, "set": ["steps=3"],
    "configs": {"f32": [], "f16": ["vae.dtype=f16"]},
    "seeds": [1, 2], "sizes": ["64x64", "48x32"], "devices": ["reference"], "out": "o"})"));
  ASSERT_EQ(spec.cells.size(), 8u);
  EXPECT_EQ(spec.cells[0].id, "f16-seed1-64x64-reference");  // configs in name order (JSON object)
  EXPECT_EQ(spec.cells[7].id, "f32-seed2-48x32-reference");
  EXPECT_EQ(spec.cells[7].config.width, 48);
  EXPECT_EQ(spec.cells[7].config.height, 32);
  EXPECT_EQ(spec.cells[7].config.seed, 2u);
  EXPECT_EQ(spec.cells[7].config.steps, 3);
  EXPECT_EQ(spec.cells[0].config.component(Component::vae).precision.dtype, DType::f16);
  EXPECT_EQ(spec.out, dir.path() / "o");
  EXPECT_THROW(SweepSpec::load(write_spec(dir.path(), R"({"nanscope_sweep": 1, "seed": [1]})")), ConfigError);
  // 10^7 cells are refused before anything is expanded, naming the counts and the limit.
  std::string seeds, sizes, devices, configs;
  for (int i = 0; i < 1000; ++i) seeds += (i ? "," : "") + std::to_string(i);
  for (int i = 0; i < 100; ++i) sizes += std::string(i ? "," : "") + "\"" + std::to_string(64 + 16 * i) + "x64\"";
  for (int i = 0; i < 10; ++i) devices += std::string(i ? "," : "") + "\"reference\"";
  for (int i = 0; i < 10; ++i) configs += std::string(i ? "," : "") + "\"c" + std::to_string(i) + "\": []";
  try {
    SweepSpec::load(write_spec(dir.path(), R"({"nanscope_sweep": 1, "configs": {)" + configs + R"(}, "seeds": [)" +
                                               seeds + R"(], "sizes": [)" + sizes + R"(], "devices": [)" + devices +
                                               "]}"));
    FAIL() << "a sweep of 10^7 cells must be refused";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("10 configs x 1000 seeds x 100 sizes x 10 devices make 10000000 cells"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("more than the 100000"), std::string::npos) << msg;
  }
  EXPECT_THROW(run_sweep_cell(spec, 8), ConfigError);
}

// `sweep --count` is the job array's size (docs/sweep/README.md: N=$(... --count)):
// the number alone on stdout, exit 0, nothing run and nothing written.
TEST(Sweep, CountPrintsTheNumberOfCellsAndNothingElse) {
  test::TempDir dir;
  const auto spec = write_spec(dir.path(), R"({
    "nanscope_sweep": 1, "configs": {"a": [], "b": [], "c": []}, "seeds": [1, 2],
    "devices": ["reference"], "out": "o"})");
  const auto r = test::run_process({NANSCOPE_CLI_PATH, "sweep", spec.string(), "--count"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "6\n") << r.err;
  EXPECT_FALSE(fs::exists(dir.path() / "o"));
}

TEST(Sweep, FinishedCellsAreSkippedAndTheMergeListsEveryCell) {
  try {
    pipeline::embedded_model_dir();
  } catch (const FileError& e) {
    GTEST_SKIP() << "the embedded model is absent (set NANSCOPE_MODEL_DIR): " << e.what();
  }
  test::TempDir dir;
  const auto spec = SweepSpec::load(write_spec(dir.path(), R"({
    "nanscope_sweep": 1, "set": ["steps=2"],
    "configs": {"vae": ["vae.dtype=f16"], "fix": ["vae=vae-fp16-fix", "vae.dtype=f16"]}, "seeds": [5]})"));
  ASSERT_EQ(spec.cells.size(), 2u);
  EXPECT_EQ(merge_sweep(spec), 0);
  EXPECT_TRUE(run_sweep_cell(spec, 1));   // "vae": the f16 VAE that overflows
  EXPECT_FALSE(run_sweep_cell(spec, 1));  // resumed: skipped
  EXPECT_EQ(merge_sweep(spec), 1);
  std::ifstream md(spec.out / "summary.md");
  const std::string text((std::istreambuf_iterator<char>(md)), {});
  EXPECT_NE(text.find("| 0 | fix | 5 | default | default | not run |"), std::string::npos) << text;
  EXPECT_NE(text.find("| 1 | vae | 5 | default | default | non-finite | `vae.decoder.up_blocks.2.resnets.0.conv1` |"),
            std::string::npos)
      << text;
  std::ifstream csv(spec.out / "summary.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("cell,id,config,seed,size,device,verdict,origin", 0), 0u);
}

// The output folder is on a full disk, then on a read-only file system: a
// cell's report and the merged tables cannot be written, each failure is a
// FileError that says what to do, and the reports and tables written before
// survive byte for byte, with no temporary left behind.
TEST(Sweep, AFullOrReadOnlyOutputFolderKeepsTheOldReports) {
  try {
    pipeline::embedded_model_dir();
  } catch (const FileError& e) {
    GTEST_SKIP() << "the embedded model is absent (set NANSCOPE_MODEL_DIR): " << e.what();
  }
  test::SmallFilesystem disk(1 << 20);
  if (!disk.ok()) GTEST_SKIP() << disk.reason();
  test::TempDir dir;
  const auto spec = SweepSpec::load(write_spec(dir.path(), R"({
    "nanscope_sweep": 1, "set": ["steps=1"], "configs": {"a": [], "b": ["cfg_scale=3"]}, "seeds": [5],
    "out": ")" + (disk / "out").string() + R"("})"));
  ASSERT_EQ(spec.cells.size(), 2u);
  EXPECT_TRUE(run_sweep_cell(spec, 0));
  EXPECT_EQ(merge_sweep(spec), 1);  // one of two cells finished
  const auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string md = slurp(spec.out / "summary.md"), csv = slurp(spec.out / "summary.csv");
  std::map<fs::path, std::string> before;
  for (const auto& e : fs::recursive_directory_iterator(spec.out)) {
    if (e.is_regular_file()) before[e.path()] = slurp(e.path());
  }
  const auto expect_refused = [&](const std::function<void()>& f, const char* advice) {
    try {
      f();
      ADD_FAILURE() << "the write succeeded";
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find(advice), std::string::npos) << e.what();
    }
  };
  disk.fill();
  expect_refused([&] { run_sweep_cell(spec, 1); }, "Free some disk space");
  expect_refused([&] { merge_sweep(spec); }, "Free some disk space");
  ASSERT_TRUE(disk.make_read_only()) << disk.reason();
  expect_refused([&] { merge_sweep(spec); }, "writable");
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(spec.out)) {
    if (!e.is_regular_file()) continue;
    ++files;
    EXPECT_TRUE(before.count(e.path())) << "left behind: " << e.path();
    if (before.count(e.path())) {
      EXPECT_EQ(slurp(e.path()), before[e.path()]) << e.path();
    }
  }
  EXPECT_EQ(files, before.size());
  EXPECT_EQ(slurp(spec.out / "summary.md"), md);
  EXPECT_EQ(slurp(spec.out / "summary.csv"), csv);
}

}  // namespace
}  // namespace nanscope::studies
