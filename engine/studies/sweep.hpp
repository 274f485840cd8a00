#pragma once
// Sweeps: configs x seeds x sizes x devices expanded into independent cells,
// one JSON report each (resumable: a cell whose report exists is skipped),
// merged into one table (CSV and markdown). A cell is one process's work, so
// the same cells run locally with N workers, as a Slurm job array or as a
// Kubernetes indexed Job (docs/sweep/).
//
// SPEC.json:
//   {
//     "nanscope_sweep": 1,
//     "preset": "resources/presets/R2.json",        // optional base (relative to the spec's folder)
//     "set": ["steps=8"],                            // optional, every cell
//     "configs": {"f16": ["vae.dtype=f16"], "fix": ["vae=vae-fp16-fix", "vae.dtype=f16"]},
//     "seeds": [1, 2, 3],
//     "sizes": ["64x64"],                            // optional; "" or absent: the preset's
//     "devices": ["reference"],                      // optional; absent: the preset's
//     "out": "sweep-out"                             // relative to the spec's folder
//   }

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/run_config.hpp"

namespace nanscope::studies {

struct SweepCell {
  int index = 0;
  std::string id;  // "f16-seed1-64x64-reference": also the report's file name
  std::string config_name, size, device;
  std::uint64_t seed = 0;
  RunConfig config;
};

// The most cells one sweep may expand to.
inline constexpr std::uint64_t kMaxSweepCells = 100000;

struct SweepSpec {
  std::filesystem::path file, out;
  std::vector<SweepCell> cells;
  // Reads and expands a spec; throws ConfigError naming the key, FileError for the file.
  // read() keeps each cell's vae as written (studies/sweep_spec.cpp, no pipeline
  // needed); load() also looks a relative vae up in the model folder
  // (resolve_vae_path, studies/scenario.hpp).
  static SweepSpec read(const std::filesystem::path& spec);
  static SweepSpec load(const std::filesystem::path& spec);
  std::filesystem::path report_path(const SweepCell& c) const { return out / "cells" / (c.id + ".json"); }
};

// Runs one cell unless its report exists; returns false when it was skipped.
// The report is written atomically, so a killed cell leaves no report and reruns.
bool run_sweep_cell(const SweepSpec& spec, int index);

// Reads every finished cell's report and writes out/summary.csv and
// out/summary.md (one row per cell, in cell order; missing cells are listed as
// "not run"). Returns the number of finished cells.
int merge_sweep(const SweepSpec& spec);

}  // namespace nanscope::studies
