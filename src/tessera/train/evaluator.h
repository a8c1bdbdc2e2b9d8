// Held-out loss over fixed batches of the global batch size.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/data/dataset.h"
#include "tessera/model/sequence_split.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

// Held-out loss over fixed batches of the global batch size; each data-parallel rank evaluates
// its share of every batch with `loss_of` (its mean loss over the trained targets, on every rank
// of the replica), and with context parallelism each cp rank its chunks of those sequences
// (`split`, over `cp`), their losses weighed by the targets each trained on.
class Evaluator {
 public:
  // inputs and targets: B rows of this rank's positions of each sequence.
  using BatchLoss = std::function<double(const int32_t* inputs, const int32_t* targets, int64_t B)>;
  Evaluator(const data::TokenStream& val, const TrainConfig& c, comm::Communicator& dp,
            comm::Communicator& cp, const model::SequenceSplit& split);

  // The mean over train.eval_batches batches, on every rank (collective over dp and cp).
  double mean_loss(const BatchLoss& loss_of);

 private:
  const data::TokenStream& val_;
  TrainConfig config_;
  comm::Communicator& dp_;
  comm::Communicator& cp_;
  model::SequenceSplit split_;
  std::vector<int32_t> inputs_, targets_;
  std::vector<int32_t> chunks_;  // this rank's chunks of its rows: inputs, then targets
};

}  // namespace tessera::train
