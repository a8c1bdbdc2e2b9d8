// The serve layer: the engine, scheduler, HTTP API and the sampler that turns logits into
// tokens. It reads checkpoints and answers requests; it must never train or write checkpoints.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/serve/param_error.h"

namespace tessera::serve {

struct SamplerParams {
  double temperature = 1.0;         // 0 = greedy
  int64_t top_k = 0;                // 0 = off
  double top_p = 1.0;               // 1 = off
  double min_p = 0.0;               // 0 = off
  double repetition_penalty = 1.0;  // 1 = off
  double presence_penalty = 0.0;    // 0 = off
  double frequency_penalty = 0.0;   // 0 = off
  uint64_t seed = 0;
};

// Throws a ParamError for the first invalid field, e.g. "temperature -1 must be a finite
// number >= 0"; the caller prefixes where the value came from.
void validate(const SamplerParams& params);

// Picks the next token from one row of logits. The draw at a position is a pure function of
// (seed, position, penalised logits), so a request replayed with the same seed gives the same
// text.
class Sampler {
 public:
  // Validates params and allocates all scratch once; sample() never allocates.
  Sampler(int64_t vocab_size, SamplerParams params);

  // history holds the prompt then the generated tokens, which start at generated_from. First the
  // penalties, on a copy of the logits: repetition_penalty (as in CTRL and Hugging Face) divides
  // positive and multiplies negative logits of every token in history; presence_penalty and
  // frequency_penalty (as in OpenAI) subtract presence + frequency * count for every token
  // generated so far. Then temperature 0 is greedy argmax (lowest id on ties). Otherwise
  // softmax(logits / T) restricted to the top_k most likely tokens, then to the smallest prefix
  // (by probability, ties by lower id) whose mass reaches top_p (at least one token), then to
  // the tokens at least min_p times as likely as the most likely one, renormalised and sampled
  // with CounterRng(seed, 2).uniform(position). Logits may be -inf (masked) but not NaN or
  // +inf, and not all -inf.
  int32_t sample(const float* logits, int64_t position, std::span<const int32_t> history,
                 int64_t generated_from);

  const SamplerParams& params() const { return params_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  bool penalises() const;
  const float* penalise(const float* logits, std::span<const int32_t> history,
                        int64_t generated_from);

  int64_t vocab_size_;
  SamplerParams params_;
  std::vector<int32_t> order_;    // candidate ids, most likely first once sorted
  std::vector<double> weights_;   // unnormalised exp((logit - max) / T) by id
  std::vector<float> penalised_;  // the logits after penalties, when any is on
  // By id: 0 for ids absent from history, else 1 + how often it was generated. Only the ids in
  // touched_ are ever non-zero, and penalise() zeroes them again.
  std::vector<int32_t> counts_;
  std::vector<int32_t> touched_;
};

}  // namespace tessera::serve
