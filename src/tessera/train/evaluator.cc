#include "tessera/train/evaluator.h"

#include "tessera/data/loader.h"

namespace tessera::train {

double Evaluator::mean_loss(const BatchLoss& loss_of) {
  const int64_t local = config_.batch_size / dp_.size(), first = dp_.rank() * local;
  double sum = 0;
  for (int64_t i = 0; i < config_.eval_batches; ++i) {
    data::fill_eval_batch(val_, config_.batch_size, config_.seq_len, i, config_.eval_batches,
                          inputs_.data(), targets_.data());
    const int64_t at = first * config_.seq_len;
    sum += loss_of(inputs_.data() + at, targets_.data() + at, local);
  }
  dp_.all_reduce(&sum, 1);
  return sum / double(config_.eval_batches * dp_.size());
}

}  // namespace tessera::train
