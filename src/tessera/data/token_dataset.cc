#include "tessera/data/token_dataset.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

void copy_window(std::span<const int32_t> tokens, int64_t start, int64_t seq_len, int32_t* inputs,
                 int32_t* targets) {
  const int32_t* src = tokens.data() + start;
  std::copy(src, src + seq_len, inputs);
  std::copy(src + 1, src + 1 + seq_len, targets);
}

void check_shape(std::span<const int32_t> tokens, int64_t batch, int64_t seq_len,
                 const char* what) {
  check(batch >= 1, "{}: batch {} must be at least 1", what, batch);
  check(seq_len >= 1, "{}: seq_len {} must be at least 1", what, seq_len);
  check(static_cast<int64_t>(tokens.size()) >= seq_len + 1,
        "{}: {} tokens are too few for one sequence, which needs {}", what, tokens.size(),
        seq_len + 1);
}

}  // namespace

Split split_tokens(std::vector<int32_t> tokens, double val_fraction, int64_t seq_len) {
  check(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction {} must lie in (0, 1)",
        val_fraction);
  check(seq_len >= 1, "seq_len {} must be at least 1", seq_len);
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t n_val = std::llround(static_cast<double>(total) * val_fraction);
  const int64_t n_train = total - n_val;
  const int64_t needed = seq_len + 1;
  check(n_val >= needed,
        "corpus too small: {} tokens give a validation split of {}, but one sequence needs {}",
        total, n_val, needed);
  check(n_train >= needed,
        "corpus too small: {} tokens give a training split of {}, but one sequence needs {}", total,
        n_train, needed);
  Split split;
  split.val.assign(tokens.begin() + n_train, tokens.end());
  tokens.resize(n_train);
  tokens.shrink_to_fit();
  split.train = std::move(tokens);
  return split;
}

double unigram_entropy(std::span<const int32_t> tokens, int64_t vocab_size) {
  check(vocab_size >= 1, "unigram entropy: vocab_size {} must be at least 1", vocab_size);
  check(!tokens.empty(), "unigram entropy: no tokens");
  std::vector<int64_t> counts(vocab_size, 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    check(tokens[i] >= 0 && tokens[i] < vocab_size,
          "unigram entropy: token id {} at position {} is outside the vocabulary [0, {})",
          tokens[i], i, vocab_size);
    ++counts[tokens[i]];
  }
  const double n = static_cast<double>(tokens.size());
  double entropy = 0.0;
  for (int64_t count : counts) {
    if (count == 0) continue;
    const double p = static_cast<double>(count) / n;
    entropy -= p * std::log(p);
  }
  return std::max(entropy, 0.0);
}

BatchSampler::BatchSampler(std::span<const int32_t> tokens, int64_t batch, int64_t seq_len,
                           uint64_t seed)
    : tokens_(tokens), batch_(batch), seq_len_(seq_len), n_windows_(0), rng_(seed, 1) {
  check_shape(tokens, batch, seq_len, "batch sampler");
  n_windows_ = static_cast<int64_t>(tokens.size()) - seq_len;
}

void BatchSampler::fill(int64_t sample_index, int32_t* inputs, int32_t* targets) const {
  check(sample_index >= 0, "batch sampler: sample index {} is negative", sample_index);
  for (int64_t b = 0; b < batch_; ++b) {
    const uint64_t sequence = static_cast<uint64_t>(sample_index + b);
    const auto start = static_cast<int64_t>(rng_.below(sequence, n_windows_));
    copy_window(tokens_, start, seq_len_, inputs + b * seq_len_, targets + b * seq_len_);
  }
}

void fill_eval_batch(std::span<const int32_t> tokens, int64_t batch, int64_t seq_len,
                     int64_t batch_index, int64_t eval_batches, int32_t* inputs, int32_t* targets) {
  check_shape(tokens, batch, seq_len, "eval batch");
  check(eval_batches >= 1, "eval batch: eval_batches {} must be at least 1", eval_batches);
  check(batch_index >= 0 && batch_index < eval_batches,
        "eval batch: batch index {} is outside [0, {})", batch_index, eval_batches);
  const int64_t n_windows = static_cast<int64_t>(tokens.size()) - seq_len;
  const int64_t total = eval_batches * batch;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t window = batch_index * batch + b;
    // 128-bit so that window * n_windows cannot overflow on a huge validation split.
    const auto start = static_cast<int64_t>(static_cast<__int128>(window) * n_windows / total);
    copy_window(tokens, start, seq_len, inputs + b * seq_len, targets + b * seq_len);
  }
}

}  // namespace tessera::data
