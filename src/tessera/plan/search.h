#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/plan/cost_model.h"

namespace tessera::plan {

enum class RankBy { kTime, kCost };

struct SearchResult {
  std::vector<Estimate> ranked;             // layouts that fit, fastest (or cheapest) first
  int64_t evaluated = 0;                    // layouts the model and batch allow
  int64_t too_big = 0;                      // of those, how many exceed the chip's memory
  std::optional<Estimate> smallest_misfit;  // the least memory-hungry of those, to explain why
};

// Every layout of `chips` chips: each tp that divides the heads within a scale-up domain and that
// the engine can split the model over, sequence-parallel where it can be; each pp that divides
// the remaining chips, the layers split unevenly where it does not divide them; ep (MoE) dividing
// dp and the experts; ZeRO 0-3; micro-batches of 1 to 32 sequences; each recomputation policy;
// and 1 to 8 virtual stages per pipeline rank where pp x vpp divides the layers.
SearchResult search_layouts(const model::ModelConfig& config, const Accelerator& accelerator,
                            int64_t chips, const Workload& workload, RankBy rank_by);

// The fewest chips (powers of two, up to 2^20) on which some layout fits the workload as it is
// (its global batch too), or nullopt.
std::optional<int64_t> smallest_feasible_chips(const model::ModelConfig& config,
                                               const Accelerator& accelerator,
                                               const Workload& workload);

}  // namespace tessera::plan
