#include "tessera/train/evaluator.h"

#include <algorithm>

#include "tessera/data/loader.h"

namespace tessera::train {

Evaluator::Evaluator(const data::TokenStream& val, const TrainConfig& c, comm::Communicator& dp,
                     comm::Communicator& cp, const model::SequenceSplit& split)
    : val_(val),
      config_(c),
      dp_(dp),
      cp_(cp),
      split_(split),
      inputs_(c.batch_size * c.seq_len),
      targets_(inputs_.size()),
      chunks_(split.active() ? 2 * c.batch_size / dp.size() * c.seq_len / split.ranks : 0) {}

double Evaluator::mean_loss(const BatchLoss& loss_of) {
  const int64_t local = config_.batch_size / dp_.size(), first = dp_.rank() * local;
  const int64_t T = config_.seq_len / split_.ranks, n = local * T;
  double sum = 0;
  for (int64_t i = 0; i < config_.eval_batches; ++i) {
    data::fill_eval_batch(val_, config_.batch_size, config_.seq_len, i, config_.eval_batches,
                          inputs_.data(), targets_.data());
    const int64_t at = first * config_.seq_len;
    if (!split_.active()) {
      sum += loss_of(inputs_.data() + at, targets_.data() + at, local);
      continue;
    }
    split_.take(inputs_.data() + at, chunks_.data(), local, T);
    split_.take(targets_.data() + at, chunks_.data() + n, local, T);
    const double trained = double(std::count_if(chunks_.begin() + n, chunks_.end(),
                                                [](int32_t t) { return t != kIgnoredTarget; }));
    double sums[2] = {trained * loss_of(chunks_.data(), chunks_.data() + n, local), trained};
    cp_.all_reduce(sums, 2);
    sum += sums[1] > 0 ? sums[0] / sums[1] : 0;
  }
  dp_.all_reduce(&sum, 1);
  return sum / double(config_.eval_batches * dp_.size());
}

}  // namespace tessera::train
