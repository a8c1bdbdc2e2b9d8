// What `tessera plan` is asked and the report that answers it: the best layouts of a model on
// one accelerator, the days and cost frontier over chip counts and accelerators, one layout
// evaluated, the layouts that serve it (serving.h), or this machine measured and Tessera's own
// step predicted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/model/model_config.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/search.h"
#include "tessera/plan/serving.h"

namespace tessera::plan {

inline constexpr EnumName<RankBy> kRankByNames[] = {{RankBy::kTime, "time"},
                                                    {RankBy::kCost, "cost"}};
constexpr const auto& enum_names(RankBy) { return kRankByNames; }

struct PlanQuery {
  std::optional<std::string> hardware;  // one accelerator from the catalog
  std::optional<std::string> compare;   // several, "a,b", side by side
  std::string chips;                    // "N" or "N,N,...": several draw the frontier
  std::optional<int64_t> seq_len;       // default: model.max_seq
  std::optional<int64_t> global_batch;  // default: about 4M tokens, a multiple of the chips
  std::optional<std::string> layout;    // evaluate this one layout (parse_layout's text)
  std::optional<double> deadline_days;  // also name the cheapest row that trains in time
  RankBy rank_by = RankBy::kTime;
  int64_t top = 10;  // layouts a search shows
  bool json = false;
  std::vector<std::string> catalogs;  // TOML files merged over the built-in catalog
  // Its seq_len and global_batch are set from the fields above.
  Workload workload{.tokens = 1e12, .reliability = {}};
  // Plan serving instead of training: its context is seq_len, its precision the workload's.
  bool serve = false;
  ServingWorkload serving;
};

// The report on `model`; throws Error naming the flag at fault, or why no layout fits.
std::string plan_report(const model::ModelConfig& model, const PlanQuery& query);

// This machine's measured rates and the step it predicts for `step`. Every rank of `world`
// measures (the all-reduce needs them all); rank 0's report is the one to print.
std::string calibration_report(const model::ModelConfig& model, const StepShape& step,
                               comm::Communicator& world);

}  // namespace tessera::plan
