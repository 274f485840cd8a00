// nanscope-cli reproduce: an image from A1111 / SD.Next / Forge or ComfyUI
// (or NaNscope itself) back into a run: what will run, the files found in
// --models and how, everything that cannot be reproduced; with --run, the
// run under the inspector as `inspect` does it.

#include <cstdio>
#include <filesystem>

#include "common.hpp"
#include "config/png_metadata.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/png.hpp"
#include "studies/report_json.hpp"
#include "studies/reproduce.hpp"
#include "studies/scenario.hpp"

namespace nanscope::cli {

namespace fs = std::filesystem;

namespace {

struct ReproduceOptions {
  std::string image, models, json, hash_cache, out;
  std::vector<std::string> sets;
  bool run = false, trace = false;
};

int run_reproduce(const GlobalOptions& g, const ReproduceOptions& o) {
  const io::PngContents png = io::read_png(o.image);
  nlohmann::json doc;
  RunConfig config;
  bool runnable = true;
  if (auto foreign = foreign_generation_from_png(png, o.image)) {
    if (o.models.empty())
      throw ConfigError("--models DIR: required for an image from " + std::string(foreign_tool_name(foreign->tool)) +
                        " (the folder that holds its checkpoint, VAE and LoRAs; searched recursively)");
    io::FileHashCache cache(o.hash_cache.empty() ? io::FileHashCache::default_path() : fs::path(o.hash_cache));
    const studies::ReproducePlan plan = studies::plan_reproduction(*foreign, o.models, cache);
    std::printf("%s", studies::describe(plan).c_str());
    doc["plan"] = studies::to_json(plan);
    config = plan.config;
    runnable = plan.runnable();
  } else if (auto own = config_from_png(png, o.image)) {
    std::printf("Image made by NaNscope: its run configuration is restored as it was recorded.\n");
    config = *own;
    doc["plan"] = {{"tool", "NaNscope"}, {"not_reproducible", nlohmann::json::array()}};
  } else {
    throw ConfigError(o.image +
                      ": no generation settings in this PNG (no A1111 \"parameters\", ComfyUI \"prompt\" or NaNscope "
                      "chunk); the tool that saved it left them out");
  }
  for (const auto& s : o.sets) config.set(s);
  if (!o.sets.empty()) std::printf("\nwith your --set on top: %zu setting(s)\n", o.sets.size());
  int rc = 0;
  if (o.run) {
    if (!runnable)
      throw ConfigError(
          "not running: the checkpoint was not found in --models (see above); a run with another model "
          "would not reproduce the image");
    config.validate();
    std::printf("\nRunning under the inspector...\n");
    const studies::InspectedRun run = inspect_config(g, config, o.trace);
    doc["run"] = run.report;
    if (!o.out.empty() && !run.images.empty() && !run.images.front().image.pixels.empty()) {
      write_run_png(o.out, run.images.front().image, run.images.front().config,
                    {{"report", studies::image_report_json(run.reports.front())}});
      std::printf("wrote %s\n", o.out.c_str());
    }
    if (!run.error.empty()) rc = 1;
  }
  if (!o.json.empty()) {
    io::write_file_atomic(o.json, doc.dump(2) + "\n");
    std::fprintf(stderr, "wrote %s\n", o.json.c_str());
  }
  return rc;
}

}  // namespace

void add_reproduce_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<ReproduceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "reproduce",
      "Read the settings of a PNG from A1111 / SD.Next / Forge or ComfyUI, find its model files, say what can and "
      "cannot be reproduced, and (--run) run it under the inspector");
  cmd->add_option("image", o->image, "The PNG")->required();
  cmd->add_option("--models", o->models,
                  "Folder holding the checkpoints, VAEs and LoRAs the image names (searched recursively; files are "
                  "matched by A1111's hashes and by name)");
  cmd->add_flag("--run", o->run, "Run it under the inspector (as `inspect`) after printing the plan");
  cmd->add_option("--json", o->json, "Write the plan (and the run's report with --run) to this JSON file");
  cmd->add_option("--set", o->sets, "key=value on top of the image's settings (repeatable), e.g. --set width=256");
  cmd->add_option("--hash-cache", o->hash_cache,
                  "The file hash cache (default $XDG_CACHE_HOME/nanscope/model-hashes.json)");
  cmd->add_option("-o,--output", o->out, "With --run: write the reproduced image here");
  cmd->add_flag("--trace", o->trace, "With --run: trace the last step and the decode, and print the trace");
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_reproduce(g, *o); }; });
}

}  // namespace nanscope::cli
