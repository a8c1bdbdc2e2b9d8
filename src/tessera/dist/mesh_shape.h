#pragma once

#include <cstdint>
#include <string>

namespace tessera::dist {

// The [mesh] section: how many ranks along each axis. Expert parallelism does not add ranks: the
// ep ranks of an expert-parallel group are data-parallel ranks (torchtitan's rule, which the
// planner assumes too), so ep must divide dp and the job has dp x tp x pp ranks.
struct MeshShape {
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t ep = 1;
  // Megatron's sequence parallelism within each tensor-parallel group (model::ModelParallel).
  bool sequence_parallel = false;

  int64_t ranks() const { return dp * tp * pp; }
  std::string str() const;  // "dp=2 tp=2 pp=1 ep=1"
};

}  // namespace tessera::dist
