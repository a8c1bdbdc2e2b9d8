// Held-out loss over fixed batches of the global batch size.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/data/dataset.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

// Held-out loss over fixed batches of the global batch size; each data-parallel rank evaluates
// its share of every batch with `loss_of` (its mean loss, on every rank of the replica).
class Evaluator {
 public:
  using BatchLoss = std::function<double(const int32_t* inputs, const int32_t* targets, int64_t B)>;
  Evaluator(const data::TokenStream& val, const TrainConfig& c, comm::Communicator& dp)
      : val_(val),
        config_(c),
        dp_(dp),
        inputs_(c.batch_size * c.seq_len),
        targets_(inputs_.size()) {}

  // The mean over train.eval_batches batches, on every rank (collective over dp).
  double mean_loss(const BatchLoss& loss_of);

 private:
  const data::TokenStream& val_;
  TrainConfig config_;
  comm::Communicator& dp_;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace tessera::train
