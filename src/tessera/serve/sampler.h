// The serve layer: the engine, scheduler, HTTP API and the sampler that turns logits into
// tokens. It reads checkpoints and answers requests; it must never train or write checkpoints.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::serve {

struct SamplerParams {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off
  uint64_t seed = 0;
};

// Throws an Error naming the flag (--temperature, --top-k, --top-p) of an invalid value.
void validate(const SamplerParams& params);

// Picks the next token from one row of logits. The draw at a position is a pure function of
// (seed, position, logits), so a request replayed with the same seed gives the same text.
class Sampler {
 public:
  // Validates params and allocates all scratch once; sample() never allocates.
  Sampler(int64_t vocab_size, SamplerParams params);

  // Temperature 0 is greedy argmax (lowest id on ties). Otherwise softmax(logits / T)
  // restricted to the top_k most likely tokens, then to the smallest prefix (by probability,
  // ties by lower id) whose mass reaches top_p (at least one token), renormalised and sampled
  // with CounterRng(seed, 2).uniform(position). Logits may be -inf (masked) but not NaN or
  // +inf, and not all -inf.
  int32_t sample(const float* logits, int64_t position);

  const SamplerParams& params() const { return params_; }

 private:
  int64_t vocab_size_;
  SamplerParams params_;
  std::vector<int32_t> order_;   // candidate ids, most likely first once sorted
  std::vector<double> weights_;  // unnormalised exp((logit - max) / T) by id
};

}  // namespace tessera::serve
