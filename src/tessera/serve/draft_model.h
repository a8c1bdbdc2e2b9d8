#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/runtime/decoder.h"
#include "tessera/serve/kv_cache.h"
#include "tessera/serve/served_model.h"

namespace tessera::serve {

// A smaller model with the same vocabulary that drafts tokens for speculative decoding: greedily,
// over a paged KV cache of its own that follows each sequence, batched over the sequences of a
// step. Its draft is the tokens it finds most likely, so the engine verifies it as it does a
// prompt-lookup draft, keeping drafted tokens while they equal what the target samples.
class DraftModel {
 public:
  // `served` is built for chunks of max_step_tokens tokens; its cache holds pool_tokens tokens.
  DraftModel(ServedModel& served, int64_t pool_tokens, int64_t max_step_tokens,
             int64_t block_tokens = PagedKvCache::kDefaultBlockTokens);

  // One sequence's draft: its tokens so far, how many to draft, and where they go (replaced).
  struct Job {
    int64_t* id;  // its sequence in the draft cache, -1 until the first draft
    std::span<const int32_t> tokens;
    int64_t k;
    std::vector<int32_t>* drafted;
  };
  // Brings each job's sequence up to its tokens (its cache is cut back to where the tokens it
  // wrote, earlier drafts included, part from the job's, and the rest runs first, within the
  // step's tokens), then drafts its k tokens one batched step at a time. A job whose catch-up
  // does not fit this call, or whose cache cannot grow, drafts fewer (possibly none).
  void draft(std::span<const Job> jobs);
  void release(int64_t id);

  const model::ModelConfig& config() const { return served_.config(); }

 private:
  ServedModel& served_;
  const int64_t max_step_tokens_;
  PagedKvCache cache_;
  runtime::Decoder decoder_;
  std::vector<runtime::DecodeChunk> chunks_;
  std::unordered_map<int64_t, std::vector<int32_t>> written_;  // what each sequence's cache holds
  std::vector<const Job*> running_;  // the jobs still drafting, chunk by chunk
  std::vector<float> host_logits_;
};

}  // namespace tessera::serve
