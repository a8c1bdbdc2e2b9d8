// The published training runs of tests/plan/published_runs.toml as the planner sees them, shared
// by the validation test and the tool that fits the accelerators' matmul efficiency to them
// (scripts/fit_planner.sh).
#pragma once

#include <string>
#include <vector>

#include "tessera/plan/cost_model.h"
#include "tessera/plan/hardware.h"

namespace tessera::plan {

// A row's part in the validation: the matmul efficiency is fitted to the "fitted" rows (each
// within 15%), the "held_out" rows never reach the fit (the planner's error on runs it has not
// seen), and "shown" rows are printed beside them only, where the planner is known not to model
// the run yet (the row's notes say why).
enum class Split { kFitted, kHeldOut, kShown };

struct PublishedRun {
  std::string name, hardware;
  Split split = Split::kFitted;
  std::string shown_because;
  int64_t chips = 0;
  model::ModelConfig config;
  Layout layout;
  Workload workload;
  // The published throughput per chip: tokens/s where the source gives it, else TFLOP/s (given,
  // or MFU times the peak) on the source's basis.
  double tokens_per_s = 0, tflops = 0;
  bool hardware_basis = false;
  bool micro_batch_known = true, vpp_known = true;
};

// Every complete row of the file (rows marked incomplete are left out).
std::vector<PublishedRun> published_runs(const HardwareCatalog& catalog);

// The prediction of a row's published figure by an estimate, on the same basis.
double predicted(const PublishedRun& r, const Estimate& e);
double published(const PublishedRun& r);

// How the estimate of a published layout chooses a micro-batch size or interleaving depth that
// its source leaves unstated, among those the layout allows: the value whose prediction is
// closest to the published figure, or the fastest, as the planner's own search would (so that
// the published figure never steers the prediction).
enum class Unstated { kClosestToPublished, kFastest };

// The estimate for the published layout on `a`: a held-out row takes the fastest unstated values,
// a fitted or shown row the closest.
Estimate published_layout_estimate(const PublishedRun& r, const Accelerator& a);
Estimate published_layout_estimate(const PublishedRun& r, const Accelerator& a, Unstated unstated);

}  // namespace tessera::plan
