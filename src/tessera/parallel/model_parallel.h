// Tensor, sequence and expert parallelism applied to a model from the mesh: the groups the
// model's layers talk to, over the mesh's communicators, and which slice of the model this rank
// holds. The model itself is written once; this is all that changes with the layout.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/mesh.h"
#include "tessera/model/collectives.h"
#include "tessera/model/model_config.h"

namespace tessera::parallel {

// A model's collectives over one communicator, which must outlive it.
class CommunicatorCollectives final : public model::Collectives {
 public:
  explicit CommunicatorCollectives(comm::Communicator& communicator);
  double seconds() const override { return seconds_; }

  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  void all_reduce(float* data, int64_t n) override;
  void all_reduce(double* data, int64_t n) override;
  void all_gather(const float* send, float* recv, int64_t n) override;
  void reduce_scatter(const float* send, float* recv, int64_t n) override;
  void all_to_all(const float* send, std::span<const int64_t> send_counts, float* recv,
                  std::span<const int64_t> recv_counts) override;

 private:
  template <typename Call>
  void timed(Call&& call);

  comm::Communicator& c_;
  std::vector<int64_t> counts_;  // size() equal counts, for the gathers and scatters
  double seconds_ = 0;
};

// How the mesh's data-parallel ranks share a step's tokens: training splits a batch over them;
// serving runs the same tokens on every rank (its expert-parallel ranks are carved out of them),
// so each rank's MoE routing statistics are its own.
enum class DpTokens { kSplit, kShared };

// The groups of ModelParallel for this rank of the mesh. Throws naming the mesh and model keys
// when the model cannot be split so (model::check_sharding).
class ModelGroups {
 public:
  ModelGroups(const comm::Mesh& mesh, const model::ModelConfig& config, bool sequence_parallel,
              DpTokens tokens = DpTokens::kSplit);
  ModelGroups(const ModelGroups&) = delete;
  ModelGroups& operator=(const ModelGroups&) = delete;

  const model::ModelParallel& parallel() const { return parallel_; }
  // Makes the model this rank builds a pipeline stage of blocks [begin, end).
  void set_stage_blocks(int64_t begin, int64_t end);
  // Seconds the model's tensor-, expert- and context-parallel collectives (and its MoE
  // statistics over dp) have taken so far.
  double communication_seconds() const;

 private:
  CommunicatorCollectives tp_, ep_, dp_, cp_;
  model::ModelParallel parallel_;
};

}  // namespace tessera::parallel
