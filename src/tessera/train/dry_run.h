// A dry run of a training job: every rank's place in the mesh, its pipeline stages and their
// parameter layouts, its schedule and its memory, built for a world of any size without MPI and
// without allocating the model, so that a job for thousands of accelerators is checked on a
// laptop before it is bought. Its memory is parallel::MemoryModel's, the planner's too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/comm/mesh.h"
#include "tessera/parallel/rank_memory.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

struct DryRunRank {
  int64_t rank = 0;
  comm::MeshCoords coords;
  std::vector<model::Sharding> stages;  // its pipeline stages: blocks, tp and ep coordinates
  int64_t parameters = 0;               // elements of its stages' layouts, padding included
  int64_t in_flight = 1;                // the most micro-batches whose activations it holds
  double idle_fraction = 0;             // of the simulated step
  parallel::RankMemory memory;
};

struct DryRun {
  comm::MeshShape mesh;
  int64_t micro_batches = 1;
  double bubble = 0;              // the simulated schedule's idle time over its work
  int64_t layouts_checked = 0;    // distinct stage layouts built and checked for coverage
  std::vector<DryRunRank> ranks;  // every rank, by rank
  int64_t fullest = 0;            // the rank holding the most memory
};

// Throws an error naming the problem when the mesh does not have world_size ranks, the split or
// schedule cannot be made, or the stages' layouts do not hold every parameter exactly once per
// model replica (the last stage's copy of a tied embedding aside).
DryRun dry_run(const RunConfig& run, int64_t world_size);

// The table `tessera train --dry-run` prints: the first, a middle and the last pipeline stage.
std::string dry_run_report(const RunConfig& run, const DryRun& plan);

}  // namespace tessera::train
