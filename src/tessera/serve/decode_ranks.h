// The ranks that serve one model together, each holding its tensor-parallel shard of the weights
// and the KV cache of its own heads, its pipeline stage's blocks, and its expert-parallel share of
// a mixture's experts. The leader (rank 0 of the group, on the first stage) runs the scheduler;
// every step it hands the followers the step's plan (each sequence's new tokens, positions and KV
// blocks), and every rank runs the step on its part: each stage takes the previous stage's rows
// and hands its own to the next, the last gathers the logits' vocabulary slices over its
// tensor-parallel group and sends them back to the first. On one rank it is the model's decoder
// alone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/decoder.h"
#include "tessera/serve/served_model.h"

namespace tessera::serve {

struct EngineOptions;

class DecodeRanks {
 public:
  // The group is served.ranks (null: this rank alone), the vocabulary's slices gathered over
  // served.vocab_ranks. max_rows bounds the rows of logits of one step, for their buffers.
  DecodeRanks(ServedModel& served, int64_t max_rows);

  bool leader() const { return rank_ == 0; }
  int size() const { return size_; }
  int tensor_parallel() const { return vocab_ranks_; }
  int pipeline_stages() const { return stages_; }

  // The KV pool's tokens every rank takes, so that the leader's block ids name blocks everywhere:
  // the leader's `own` (collective over the group).
  int64_t leaders_pool_tokens(int64_t own);

  // On the leader: sends the step's chunks to the followers, runs them, and returns the next-token
  // logits each chunk asks for, [logit_rows(chunks), vocab_size] in host memory.
  const float* decode(const runtime::KvCacheView& cache,
                      std::span<const runtime::DecodeChunk> chunks);
  // On the leader: ends the followers' follow(). Once only, after the last decode.
  void finish();
  // On a follower: runs the leader's steps over its own cache until the leader finishes. A step
  // that fails fails alike on every rank (they check the same chunks), so it is logged and the
  // next one awaited, as the leader's engine fails its requests and goes on.
  void follow(const runtime::KvCacheView& cache);

  // Seconds this rank has spent in the model's collectives and in the exchanges between its ranks
  // (plans, a stage's rows, the logits), waiting for the others included.
  double communication_seconds() const;

 private:
  const float* run(const runtime::KvCacheView& cache, std::span<const runtime::DecodeChunk> chunks);
  // The logits of `rows` rows in vocabulary order from this rank's slice of them, on the host.
  const float* whole_vocabulary(const float* slice, int64_t rows);
  void send_plan(std::span<const runtime::DecodeChunk> chunks);
  // Receives the next plan into chunks_; false when the leader finished.
  bool receive_plan();

  ServedModel& served_;
  runtime::Decoder decoder_;
  comm::Communicator* group_;
  int rank_ = 0, size_ = 1;
  comm::Communicator* vocab_group_;
  int vocab_ranks_ = 1;
  comm::Communicator* stage_group_;
  int stage_ = 0, stages_ = 1;
  int64_t max_rows_;
  model::VocabShard vocab_;
  std::vector<float> slices_, logits_;  // the gathered slices, and the logits in vocabulary order
  std::vector<int64_t> gather_counts_;
  std::vector<int32_t> plan_;  // [chunks, ints], then per chunk n, start, blocks, ...
  std::vector<runtime::DecodeChunk> chunks_;
  double exchange_seconds_ = 0;
};

// A follower's whole part in serving: the KV cache of its own heads, as many blocks as the leader's
// engine takes with the same options, and the leader's steps run over it until the leader
// finishes.
void follow_leader(ServedModel& served, const EngineOptions& options);

}  // namespace tessera::serve
