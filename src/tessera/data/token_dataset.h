#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/rng.h"

namespace tessera::data {

struct Split {
  std::vector<int32_t> train, val;
};

// Holds out the last val_fraction (in (0, 1)) of the tokens, rounded to the nearest token.
// Both parts must hold at least seq_len + 1 tokens (one input window plus its shifted target),
// else an Error names the sizes.
Split split_tokens(std::vector<int32_t> tokens, double val_fraction, int64_t seq_len);

// Shannon entropy (nats) of the unigram distribution of tokens: the loss of the best
// context-free model, a floor a training run must beat to have learned anything.
double unigram_entropy(std::span<const int32_t> tokens, int64_t vocab_size);

// Deterministic training batches. Global sequence number s (counting every sequence of every
// micro-batch of every step) reads the window starting at CounterRng(seed, 1).below(s, n)
// where n = tokens.size() - seq_len, so a run resumed at any step sees exactly the batches an
// uninterrupted run would, whatever its grad_accum split.
class BatchSampler {
 public:
  // tokens must outlive the sampler.
  BatchSampler(std::span<const int32_t> tokens, int64_t batch, int64_t seq_len, uint64_t seed);

  // Fills batch * seq_len inputs and targets (targets shifted by one) for the sequences
  // sample_index .. sample_index + batch - 1. The trainer passes
  // (step * grad_accum + micro) * batch. Never allocates.
  void fill(int64_t sample_index, int32_t* inputs, int32_t* targets) const;

  int64_t window_count() const { return n_windows_; }

 private:
  std::span<const int32_t> tokens_;
  int64_t batch_;
  int64_t seq_len_;
  int64_t n_windows_;
  CounterRng rng_;
};

// Evaluation batches: eval_batches * batch windows evenly spaced across the held-out tokens,
// so every evaluation scores the same text. Fills batch_index's batch * seq_len inputs and
// targets. Never allocates.
void fill_eval_batch(std::span<const int32_t> tokens, int64_t batch, int64_t seq_len,
                     int64_t batch_index, int64_t eval_batches, int32_t* inputs, int32_t* targets);

}  // namespace tessera::data
