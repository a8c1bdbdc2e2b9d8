#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/grammar/token_masks.h"
#include "tessera/serve/decode_ranks.h"
#include "tessera/serve/draft_model.h"
#include "tessera/serve/kv_cache.h"
#include "tessera/serve/logprobs.h"
#include "tessera/serve/sampler.h"
#include "tessera/serve/serve_metrics.h"
#include "tessera/serve/served_model.h"

namespace tessera::serve {

struct EngineOptions {
  // The pool, in tokens (rounded up to whole blocks) or, when that is 0, in bytes. With both 0:
  // a full context for every running sequence, within kDefaultKvCacheBytes.
  int64_t kv_cache_tokens = 0;
  int64_t kv_cache_bytes = 0;
  static constexpr int64_t kDefaultKvCacheBytes = int64_t(1) << 30;
  int64_t block_tokens = PagedKvCache::kDefaultBlockTokens;
  int64_t max_running = model::kDefaultMaxRunning;  // sequences in the batch at once
  // Tokens one model step runs: every running decode first, then prompt chunks in what is left,
  // so a long prompt is spread over steps instead of stalling the decodes.
  int64_t max_step_tokens = model::kDefaultMaxStepTokens;
  int64_t max_queue = 256;  // waiting requests beyond which submit refuses
  // Full KV blocks are shared between sequences whose prompts start alike, and kept after their
  // sequences end until the room is needed (PagedKvCache).
  bool prefix_caching = true;
  // Speculative decoding: up to draft_tokens tokens drafted for each decoding sequence, by a
  // draft model when the engine has one, else by prompt lookup (ngram_draft), and verified in the
  // step that computes its next token; 0: none. The output is the same token for token: each
  // position samples from the model's own logits, and drafts are kept only while they equal what
  // was sampled.
  int64_t draft_tokens = 0;
};

// The most rows of logits one step of an engine with these options returns: one per running
// sequence, and one per drafted token.
int64_t max_logit_rows(const EngineOptions& options);

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  SamplerParams sampling;
  std::vector<std::string> stop;
  // -1: no log-probabilities; 0 to kMaxTopLogprobs: the sampled token's and that many of the
  // most likely alternatives.
  int64_t top_logprobs = -1;
  // When set, every token is one the grammar allows next (the others' logits are masked before
  // sampling), and the request ends, "stop", once the grammar's value is complete. Such a
  // sequence is never drafted for.
  std::shared_ptr<grammar::TokenGrammar> grammar;
  // The served LoRA adapter the request runs with, held until the request ends
  // (ServedAdapters::lease); null: the model alone.
  std::shared_ptr<const AdapterLease> adapter;
  // When the request arrived, from which its queue time and time to first token count.
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

// kShutdown: the server stopped before the request finished.
enum class FinishReason { kStop, kLength, kCancelled, kError, kShutdown };
// OpenAI's words: "stop", "length"; then "cancelled", "error" and "shutdown".
constexpr std::string_view finish_reason_name(FinishReason reason) {
  constexpr std::string_view names[] = {"stop", "length", "cancelled", "error", "shutdown"};
  return names[static_cast<int>(reason)];
}

struct GeneratedToken {
  int32_t id = 0;
  // Text this token releases: held back while it may be part of a UTF-8 character or of a stop
  // string, so it can be empty and a later token can release more.
  std::string text;
  TokenLogprobs logprobs;  // filled when the request asked for them
};

// A request's token counts, as its reply's usage states them: of its completion tokens, those a
// speculative draft proposed and kept (accepted_prediction), and the drafted tokens that were
// not kept (rejected_prediction), OpenAI's names for predicted outputs.
struct TokenUsage {
  int64_t prompt = 0, completion = 0, accepted_prediction = 0, rejected_prediction = 0;
};

// One request's output, shared by the engine, which appends to it, and the thread answering the
// client, which takes from it.
class RequestStream {
 public:
  explicit RequestStream(int64_t prompt_tokens) : prompt_tokens_(prompt_tokens) {}

  // Waits up to timeout for new tokens or the end and moves what arrived into out (cleared
  // first). Returns true once the request has finished: out then holds its last tokens, and no
  // more will come.
  bool wait(std::vector<GeneratedToken>& out, std::chrono::milliseconds timeout);
  // Called, on the engine's thread and with no lock held, after each token and at the end; an
  // asynchronous server uses it to wake the connection that waits. Replaces any earlier one;
  // an empty function removes it.
  void set_listener(std::function<void()> listener);
  // The client went away: the engine drops the sequence and frees its blocks at its next step.
  void cancel();
  bool cancelled() const;

  int64_t prompt_tokens() const { return prompt_tokens_; }
  // Valid once wait has returned true.
  int64_t completion_tokens() const;
  TokenUsage usage() const;
  FinishReason finish_reason() const;
  const std::string& error() const;  // why the engine failed the request (FinishReason::kError)

 private:
  friend class Engine;
  void append(GeneratedToken token);
  void finish(FinishReason reason, std::string error = {});
  void count_predictions(int64_t accepted, int64_t rejected);
  void notify();

  const int64_t prompt_tokens_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<GeneratedToken> pending_;
  int64_t completion_tokens_ = 0, accepted_prediction_ = 0, rejected_prediction_ = 0;
  bool finished_ = false, cancelled_ = false;
  FinishReason finish_reason_ = FinishReason::kStop;
  std::string error_;
  std::function<void()> listener_;
};

// The KV pool's tokens: options.kv_cache_tokens, else as many as options.kv_cache_bytes holds of
// the model's key/value rows (this rank's heads, as served.kv_dtype holds them), else a context
// per running sequence within EngineOptions::kDefaultKvCacheBytes.
int64_t kv_pool_tokens(const EngineOptions& options, const ServedModel& served);

// Refused for want of room in the queue; the client should retry later.
class QueueFull : public Error {
 public:
  using Error::Error;
};

// Continuous batching over a paged KV cache: one thread steps the model over every running
// sequence at once, and requests join and leave between steps. A sequence's blocks are taken as
// it grows; when the pool runs dry the youngest sequence is preempted, its blocks freed, and it
// is recomputed when room returns. Each sequence samples with its own seed at its own
// positions, so its text does not depend on what else runs beside it.
class Engine {
 public:
  // draft: a smaller model with the same vocabulary that drafts for speculative decoding (on
  // this rank alone), or null.
  Engine(ServedModel& served, const EngineOptions& options, ServeMetrics& metrics,
         ServedModel* draft = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a tokenized request. Throws QueueFull when max_queue requests already wait, and an
  // Error naming the problem when the request can never run (a prompt that leaves no room in
  // the context, a sequence larger than the whole KV pool).
  std::shared_ptr<RequestStream> submit(GenerationRequest request);
  bool queue_full() const;
  // Requests waiting or running.
  int64_t unfinished() const;
  // Stops stepping and ends every unfinished request with FinishReason::kShutdown and this message;
  // later submits are refused with it. The destructor does the same.
  void stop(const std::string& message);

  const PagedKvCache& cache() const { return cache_; }
  const EngineOptions& options() const { return options_; }

 private:
  struct Sequence;
  struct PlannedChunk {
    Sequence* seq;
    int64_t n;
    int64_t drafted = 0;  // of the n, tokens drafted after the sequence's last
  };

  void loop();
  void step();
  void admit();
  void drop_cancelled();
  bool plan(Sequence& seq, int64_t n);
  int64_t draft_room(const Sequence& seq) const;
  void draft_with_model();
  int64_t draft(Sequence& seq, int64_t room);
  void verify(Sequence& seq, const float* logits);
  void preempt(Sequence& seq);
  void reuse_cached_prefix(Sequence& seq, bool joining);
  void emit(Sequence& seq, const float* logits);
  const float* constrain(Sequence& seq, const float* logits);
  void finish(Sequence& seq, FinishReason reason);
  void end_stream(Sequence& seq, FinishReason reason, const std::string& error = {});
  void retire_finished();
  void fail_all(FinishReason reason, const std::string& message);
  void publish_gauges();

  ServedModel& served_;
  const EngineOptions options_;
  ServeMetrics& metrics_;
  const int64_t context_;
  DecodeRanks ranks_;  // before the cache, whose size the ranks agree on
  PagedKvCache cache_;
  std::unique_ptr<DraftModel> drafter_;  // null: drafts come from prompt lookup
  std::vector<DraftModel::Job> draft_jobs_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  std::vector<runtime::DecodeChunk> chunks_;        // of the step in progress
  std::vector<PlannedChunk> planned_;
  std::vector<float> masked_;  // a row of logits with what a grammar refuses at -inf
  int64_t next_admission_ = 0;

  mutable std::mutex queue_mutex_;
  std::condition_variable work_;
  std::deque<std::unique_ptr<Sequence>> waiting_;  // preempted sequences go back to the front
  std::atomic<int64_t> unfinished_ = 0;            // submitted, and their streams not ended
  bool stopping_ = false;
  std::string stop_message_;
  std::thread thread_;
};

}  // namespace tessera::serve
