#include "tessera/data/windows.h"

#include <bit>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

// Keeps the data streams apart from the streams that initialise weights and sample text.
constexpr uint64_t kDataStreams = 0xda7a000000000000ull;
constexpr int kFeistelRounds = 6;

CounterRng epoch_rng(uint64_t seed, uint64_t epoch, uint64_t use) {
  return CounterRng(seed, kDataStreams | (epoch << 1) | use);
}

void copy_window(const TokenStream& tokens, int64_t start, int64_t seq_len, int32_t* inputs,
                 int32_t* targets) {
  tokens.copy(start, seq_len, inputs);
  tokens.copy(start + 1, seq_len, targets);
  tokens.mark_untrained(start + 1, seq_len, targets);
}

}  // namespace

WindowPermutation::WindowPermutation(uint64_t n, uint64_t seed, uint64_t epoch)
    : n_(n), rng_(epoch_rng(seed, epoch, 0)) {
  check(n >= 1 && n < (uint64_t{1} << 60), "window permutation: {} windows is out of range", n);
  const int bits = std::max(2, int(std::bit_width(n - 1)));
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t WindowPermutation::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t round = 0; round < kFeistelRounds; ++round) {
    const uint64_t mixed = left ^ (rng_.bits((right << 3) | round) & half_mask_);
    left = right;
    right = mixed;
  }
  return (left << half_bits_) | right;
}

uint64_t WindowPermutation::operator()(uint64_t index) const {
  // The network permutes [0, 4^half_bits); walking the cycle from index until it re-enters
  // [0, n) restricts it to a bijection of [0, n). The domain is under 4n, so this is short.
  uint64_t x = index;
  do {
    x = feistel(x);
  } while (x >= n_);
  return x;
}

TrainWindows::TrainWindows(int64_t tokens, int64_t seq_len, uint64_t seed)
    : seq_len_(seq_len), seed_(seed) {
  check(seq_len >= 1, "training windows: seq_len {} must be at least 1", seq_len);
  check(tokens >= seq_len + 1,
        "the training split holds {} tokens, too few for one sequence of seq_len {} + 1", tokens,
        seq_len);
  // One window's worth of tokens is kept in reserve so the grid can shift by any phase below
  // seq_len, except when the split is too short to spare it.
  n_windows_ = std::max<int64_t>(1, (tokens - seq_len) / seq_len);
  max_phase_ = std::min(seq_len - 1, tokens - 1 - n_windows_ * seq_len);
}

int64_t TrainWindows::start(int64_t sample) const {
  const auto epoch = uint64_t(sample / n_windows_);
  const auto slot = uint64_t(sample % n_windows_);
  const auto window = int64_t(WindowPermutation(uint64_t(n_windows_), seed_, epoch)(slot));
  const auto phase = int64_t(epoch_rng(seed_, epoch, 1).below(0, uint64_t(max_phase_) + 1));
  return phase + window * seq_len_;
}

void fill_train_batch(const TokenStream& tokens, const TrainWindows& windows, int64_t first_sample,
                      int64_t batch, int64_t seq_len, int32_t* inputs, int32_t* targets) {
  for (int64_t b = 0; b < batch; ++b) {
    copy_window(tokens, windows.start(first_sample + b), seq_len, inputs + b * seq_len,
                targets + b * seq_len);
  }
}

void fill_eval_batch(const TokenStream& tokens, int64_t batch, int64_t seq_len, int64_t batch_index,
                     int64_t eval_batches, int32_t* inputs, int32_t* targets) {
  check(tokens.size() >= seq_len + 1,
        "the held-out split holds {} tokens, too few for one sequence of seq_len {} + 1",
        tokens.size(), seq_len);
  check(batch_index >= 0 && batch_index < eval_batches,
        "eval batch: batch index {} is outside [0, {})", batch_index, eval_batches);
  const int64_t n_windows = tokens.size() - seq_len;
  const int64_t total = eval_batches * batch;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t window = batch_index * batch + b;
    // 128-bit so that window * n_windows cannot overflow on a huge held-out split.
    const auto start = int64_t(static_cast<__int128>(window) * n_windows / total);
    copy_window(tokens, start, seq_len, inputs + b * seq_len, targets + b * seq_len);
  }
}

}  // namespace tessera::data
