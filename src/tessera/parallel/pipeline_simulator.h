// Checks a pipeline table before anything runs it, and times it: every rank's actions are its
// own stages, every computation finds its input (a forward before its backward, a receive before
// what needs it, each send received once), and running the table cannot deadlock. The planner
// takes its bubble from here, and the bench sets it beside the measured idle time.
#pragma once

#include <span>
#include <vector>

#include "tessera/parallel/pipeline_schedule.h"

namespace tessera::parallel {

struct PipelineSimulation {
  double makespan = 0;                // until the last rank finishes
  double ideal = 0;                   // the busiest rank's work: micro_batches x its stages' costs
  double bubble = 0;                  // makespan / ideal - 1: (p - 1) / m for 1F1B
  std::vector<double> idle_fraction;  // [rank]: the share of the makespan it waits
  // [rank]: the most (stage, micro-batch) pairs whose activations it holds at once (forward done,
  // weight gradient not), in virtual stages.
  std::vector<int> peak_in_flight;
  // [stage]: the same for each (virtual) stage alone: the micro-batch slots its model needs.
  std::vector<int> stage_peak_in_flight;
};

// Throws an error naming the rank, the action and what is wrong when the table is inconsistent
// or would deadlock (each rank waiting in a receive whose send comes after another wait).
// `costs` are those of one micro-batch through all of one rank's layers, alike on every rank; a
// virtual stage takes 1 / virtual_stages of them. Messages are taken as free: the bubble is the
// schedule's alone.
PipelineSimulation simulate_pipeline(const PipelineTable& table, const PipelineCosts& costs = {});
// The same with each (virtual) stage's own costs, one per stage: uneven stages wait for each other.
PipelineSimulation simulate_pipeline(const PipelineTable& table,
                                     std::span<const PipelineCosts> stage_costs);

}  // namespace tessera::parallel
