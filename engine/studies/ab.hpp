#pragma once
// A/B: the same seed under two configs (or two devices); per-step relative L2
// divergence of the latents, and of the decoded images. The `reference`
// device as side B gives the ground truth.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "studies/scenario.hpp"

namespace nanscope::studies {

struct AbStep {
  int step = 0;               // 1-based
  double latent_rel_l2 = 0;   // ||a - b|| / ||b|| over the finite pairs; +inf when only one side is finite
  double latent_max_abs = 0;  // max |a - b| over the finite pairs
  std::int64_t nonfinite_a = 0, nonfinite_b = 0;
};

struct AbResult {
  InspectedRun a, b;
  std::vector<AbStep> steps;
  int first_divergent_step = -1;  // first step whose latent_rel_l2 > threshold (1-based; -1: none)
  double threshold = 0;
  double image_rel_l2 = 0;  // decoded images (8-bit), ||a - b|| / ||b||
  int image_max_diff = 0;   // largest 8-bit channel difference
  nlohmann::json report;    // both runs' reports plus the comparison
};

// Relative L2 of two equally long vectors over the pairs where both are finite;
// +inf when the finiteness differs anywhere.
double relative_l2(std::span<const float> a, std::span<const float> b, double* max_abs = nullptr);

// Runs a and b (each through its own Session so devices and models stay
// apart) and compares them. The configs should share seed, size and steps;
// a mismatch in the latent shape or step count is a ConfigError.
AbResult run_ab(const RunConfig& a, const RunConfig& b, double threshold = 1e-2,
                pipeline::RunObserver* forward = nullptr, const BackendOptions& backend = {});

}  // namespace nanscope::studies
