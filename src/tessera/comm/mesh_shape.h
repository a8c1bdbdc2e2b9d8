#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/enum_names.h"

namespace tessera::comm {

enum class PipelineScheduleKind { kGPipe, k1F1B, kInterleaved1F1B, kZeroBubbleH1 };
inline constexpr EnumName<PipelineScheduleKind> kPipelineScheduleNames[] = {
    {PipelineScheduleKind::kGPipe, "gpipe"},
    {PipelineScheduleKind::k1F1B, "1f1b"},
    {PipelineScheduleKind::kInterleaved1F1B, "interleaved"},
    {PipelineScheduleKind::kZeroBubbleH1, "zb-h1"}};
constexpr const auto& enum_names(PipelineScheduleKind) { return kPipelineScheduleNames; }

// The [mesh] section: how many ranks along each axis. Expert parallelism does not add ranks: the
// ep ranks of an expert-parallel group are data-parallel ranks (torchtitan's rule, which the
// planner assumes too), so ep must divide dp and the job has dp x cp x tp x pp ranks.
struct MeshShape {
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t ep = 1;
  // Context parallelism: each sequence split over cp ranks (model::SequenceSplit), which hold the
  // same parameters and reduce their gradients together with the data-parallel ranks.
  int64_t cp = 1;
  // Megatron's sequence parallelism within each tensor-parallel group (model::ModelParallel).
  bool sequence_parallel = false;
  // The pipeline: stages per rank (interleaving when > 1), the schedule, and the blocks of each
  // stage, first to last (empty: a split balanced by parallel::stage_blocks).
  int64_t pp_virtual = 1;
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::k1F1B;
  std::vector<int64_t> pp_layers{};

  int64_t ranks() const { return dp * cp * tp * pp; }
  std::string str() const;  // "dp=2 tp=2 pp=1 ep=1", with " cp=N" where cp > 1
};

}  // namespace tessera::comm
