// Which tokens each sample reads. Training samples are windows of seq_len + 1 tokens (inputs and
// their targets shifted by one) on a grid of stride seq_len, so one epoch reads every token once.
// Global sample index g (counting every sequence of every rank, micro-batch and step) maps to
// epoch e = g / n and slot g % n of that epoch, where n = windows_per_epoch(); the slot is sent
// through a pseudo-random permutation of [0, n) keyed by (seed, e), and the grid is shifted by a
// per-epoch phase in [0, seq_len) so that epochs do not cut the text at the same places. Each
// window is therefore a pure function of (seed, g): any process can compute any sample.
#pragma once

#include <cstdint>

#include "tessera/core/rng.h"
#include "tessera/data/dataset.h"

namespace tessera::data {

// A bijection of [0, n) chosen by (seed, epoch): a balanced Feistel network over the smallest
// even number of bits that covers n, with cycle walking to stay inside [0, n). It needs no
// memory, so epochs of billions of windows cost nothing to shuffle.
class WindowPermutation {
 public:
  WindowPermutation(uint64_t n, uint64_t seed, uint64_t epoch);
  uint64_t operator()(uint64_t index) const;

 private:
  uint64_t feistel(uint64_t x) const;
  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  CounterRng rng_;
};

class TrainWindows {
 public:
  // Requires at least seq_len + 1 tokens (one window); the error names the sizes.
  TrainWindows(int64_t tokens, int64_t seq_len, uint64_t seed);

  int64_t windows_per_epoch() const { return n_windows_; }
  // First token of global sample g's window.
  int64_t start(int64_t sample) const;

 private:
  int64_t seq_len_;
  int64_t n_windows_;
  int64_t max_phase_;  // phases run over [0, max_phase_]
  uint64_t seed_;
};

// Fills rows b = 0 .. batch-1 with the window of sample first_sample + b: inputs then targets
// shifted by one, batch * seq_len each, a target the loss mask leaves out being kIgnoredTarget.
// Never allocates.
void fill_train_batch(const TokenStream& tokens, const TrainWindows& windows, int64_t first_sample,
                      int64_t batch, int64_t seq_len, int32_t* inputs, int32_t* targets);

// Evaluation batches: eval_batches * batch windows evenly spaced across the held-out stream, so
// every evaluation scores the same text. Fills batch_index's rows. Never allocates.
void fill_eval_batch(const TokenStream& tokens, int64_t batch, int64_t seq_len, int64_t batch_index,
                     int64_t eval_batches, int32_t* inputs, int32_t* targets);

}  // namespace tessera::data
