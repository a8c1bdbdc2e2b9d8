#include "tessera/serve/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "tessera/core/threading.h"
#include "tessera/serve/ngram_draft.h"
#include "tessera/serve/text_stream.h"

namespace tessera::serve {

using Clock = std::chrono::steady_clock;

bool RequestStream::wait(std::vector<GeneratedToken>& out, std::chrono::milliseconds timeout) {
  out.clear();
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return finished_ || !pending_.empty(); });
  out.swap(pending_);
  return finished_;
}

void RequestStream::set_listener(std::function<void()> listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

void RequestStream::notify() {
  std::function<void()> listener;
  {
    std::lock_guard lock(mutex_);
    listener = listener_;
  }
  if (listener) listener();
  changed_.notify_all();
}

void RequestStream::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

bool RequestStream::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

int64_t RequestStream::completion_tokens() const {
  std::lock_guard lock(mutex_);
  return completion_tokens_;
}

TokenUsage RequestStream::usage() const {
  std::lock_guard lock(mutex_);
  return {prompt_tokens_, completion_tokens_, accepted_prediction_, rejected_prediction_};
}

void RequestStream::count_predictions(int64_t accepted, int64_t rejected) {
  std::lock_guard lock(mutex_);
  accepted_prediction_ = accepted;
  rejected_prediction_ = rejected;
}

FinishReason RequestStream::finish_reason() const {
  std::lock_guard lock(mutex_);
  return finish_reason_;
}

const std::string& RequestStream::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void RequestStream::append(GeneratedToken token) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(token));
    ++completion_tokens_;
  }
  notify();
}

void RequestStream::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard lock(mutex_);
    finished_ = true;
    finish_reason_ = reason;
    error_ = std::move(error);
  }
  notify();
}

// A request inside the engine: its prompt and generated tokens, how many of them the cache
// holds, and its own sampler and text stream.
struct Engine::Sequence {
  Sequence(GenerationRequest r, const tokenizer::Tokenizer& tokenizer)
      : request(std::move(r)),
        out(std::make_shared<RequestStream>(int64_t(request.prompt.size()))),
        tokens(request.prompt),
        sampler(tokenizer.vocab_size(), request.sampling),
        text(tokenizer, request.stop),
        submitted(request.arrival) {
    if (request.grammar) request.grammar->start(matched);
  }

  int64_t generated() const { return int64_t(tokens.size() - request.prompt.size()); }

  GenerationRequest request;
  std::shared_ptr<RequestStream> out;
  std::vector<int32_t> tokens;  // the prompt, then what was generated
  int64_t cache_id = -1;        // -1 while waiting
  int64_t cached = 0;           // leading tokens whose keys and values the cache holds
  int64_t admission = 0;        // larger is younger
  bool admitted_before = false;
  Sampler sampler;
  TextStream text;
  Clock::time_point submitted, last_token;
  std::optional<FinishReason> finished;
  // With speculation: what the step runs, the last token and then the tokens drafted to follow; of
  // all drafted tokens, those kept and those not (a draft not yet judged counts as not kept, so
  // that a stream ending in the middle of a draft counts the rest so).
  std::vector<int32_t> verify;
  int64_t accepted_prediction = 0, rejected_prediction = 0;
  // With a draft model: its sequence in the draft model's cache, and the tokens it drafted.
  int64_t draft_id = -1;
  std::vector<int32_t> drafted;
  grammar::MatchState matched;  // with a grammar: where the tokens so far leave it
};

int64_t max_logit_rows(const EngineOptions& options) {
  return options.max_running +
         std::min(options.max_step_tokens, options.max_running * options.draft_tokens);
}

int64_t kv_pool_tokens(const EngineOptions& options, const ServedModel& served) {
  const model::ModelConfig& config = served.config();
  if (options.kv_cache_tokens > 0) return options.kv_cache_tokens;
  const int64_t per_token =
      PagedKvCache::bytes_per_token(served.model->model_layout(), served.kv_dtype);
  if (options.kv_cache_bytes > 0) {
    check(options.kv_cache_bytes >= per_token,
          "a KV cache of {} bytes cannot hold one token, which takes {} bytes",
          options.kv_cache_bytes, per_token);
    return options.kv_cache_bytes / per_token;
  }
  return std::max(config.max_seq, std::min(options.max_running * config.max_seq,
                                           EngineOptions::kDefaultKvCacheBytes / per_token));
}

Engine::Engine(ServedModel& served, const EngineOptions& options, ServeMetrics& metrics,
               ServedModel* draft)
    : served_(served),
      options_(options),
      metrics_(metrics),
      context_(served.config().max_seq),
      ranks_(served, max_logit_rows(options)),
      cache_(served.context(), served.model->model_layout(),
             ranks_.leaders_pool_tokens(kv_pool_tokens(options, served)), options.block_tokens,
             options.prefix_caching, served.kv_dtype) {
  check(options.max_running >= 1, "max running sequences must be at least 1, not {}",
        options.max_running);
  check(options.max_step_tokens >= options.max_running,
        "a step's {} tokens cannot hold one decode for each of {} running sequences",
        options.max_step_tokens, options.max_running);
  check(options.max_queue >= 0, "the queue bound must be at least 0, not {}", options.max_queue);
  check(options.draft_tokens >= 0 && options.draft_tokens < options.max_step_tokens,
        "draft tokens must be from 0 to fewer than a step's {} tokens, not {}",
        options.max_step_tokens, options.draft_tokens);
  check(ranks_.leader(), "the engine runs on the leading rank; the others follow it (DecodeRanks)");
  masked_.resize(size_t(served.config().vocab_size));
  if (draft != nullptr) {
    check(draft->config().vocab_size == served.config().vocab_size,
          "the draft model's vocabulary has {} tokens, the served model's {}: a draft model "
          "must share the served model's tokenizer",
          draft->config().vocab_size, served.config().vocab_size);
    check(options.draft_tokens > 0, "a draft model needs --draft-tokens K of at least 1");
    drafter_ = std::make_unique<DraftModel>(*draft, options.max_running * context_,
                                            options.max_step_tokens, options.block_tokens);
    draft_jobs_.reserve(size_t(options.max_running));
  }
  chunks_.reserve(options.max_running);
  planned_.reserve(options.max_running);
  metrics_.set_layout(ranks_.tensor_parallel(), ranks_.pipeline_stages(),
                      ranks_.size() / (ranks_.tensor_parallel() * ranks_.pipeline_stages()));
  publish_gauges();
  // OpenMP's thread count is per thread: the engine's takes the one the model was built with.
  thread_ = std::thread([this, threads = num_threads()] {
    set_num_threads(threads);
    kernels::make_current(served_.context());
    loop();
  });
}

Engine::~Engine() { stop("the server is shutting down"); }

void Engine::stop(const std::string& message) {
  {
    std::lock_guard lock(queue_mutex_);
    if (stopping_) return;
    stopping_ = true;
    stop_message_ = message;
  }
  work_.notify_all();
  thread_.join();
  ranks_.finish();
  fail_all(FinishReason::kShutdown, message);
}

int64_t Engine::unfinished() const { return unfinished_.load(); }

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
  const int64_t prompt = int64_t(request.prompt.size());
  check(prompt >= 1, "the prompt is empty: give at least one token");
  check(prompt < context_,
        "the prompt is {} tokens but the model's context is {} tokens, leaving no room to "
        "generate",
        prompt, context_);
  check(request.max_tokens >= 1, "max_tokens must be at least 1, not {}", request.max_tokens);
  const int64_t longest = std::min(prompt + request.max_tokens, context_);
  const int64_t capacity = cache_.blocks_total() * cache_.block_tokens();
  check(longest <= capacity,
        "the request may grow to {} tokens but the whole KV cache holds {} (--kv-cache-tokens)",
        longest, capacity);
  check(!request.grammar || request.grammar->vocabulary().size() == served_.config().vocab_size,
        "the request's grammar is bound to a vocabulary of {} tokens, the model's has {}",
        request.grammar ? request.grammar->vocabulary().size() : 0, served_.config().vocab_size);
  auto seq = std::make_unique<Sequence>(std::move(request), *served_.tokenizer);
  std::shared_ptr<RequestStream> out = seq->out;
  {
    std::lock_guard lock(queue_mutex_);
    check(!stopping_, "{}", stop_message_);
    if (int64_t(waiting_.size()) >= options_.max_queue) {
      throw QueueFull(fmt::format("{} requests are already waiting (--max-queue {}); retry later",
                                  waiting_.size(), options_.max_queue));
    }
    waiting_.push_back(std::move(seq));
    unfinished_.fetch_add(1);
    metrics_.set_waiting(int64_t(waiting_.size()));
  }
  metrics_.prompt_tokens(prompt);
  work_.notify_one();
  return out;
}

bool Engine::queue_full() const {
  std::lock_guard lock(queue_mutex_);
  return int64_t(waiting_.size()) >= options_.max_queue;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lock(queue_mutex_);
      work_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_) return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      spdlog::error("serve: a step failed: {}", e.what());
      fail_all(FinishReason::kError, e.what());
    }
  }
}

void Engine::step() {
  drop_cancelled();
  admit();
  chunks_.clear();
  planned_.clear();
  // Decodes first, oldest first, then prompts (new or preempted) in what the step has left.
  int64_t budget = options_.max_step_tokens;
  if (drafter_) draft_with_model();
  for (const bool decoding : {true, false}) {
    // plan may preempt younger sequences, or this one, which removes them from running_.
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Sequence& seq = *running_[i];
      if (!decoding && int64_t(seq.tokens.size()) - seq.cached > 1) {
        reuse_cached_prefix(seq, /*joining=*/false);
      }
      const int64_t want = int64_t(seq.tokens.size()) - seq.cached;
      if ((want == 1) != decoding) {
        ++i;
        continue;
      }
      const int64_t drafted = decoding ? draft(seq, budget - 1) : 0;
      const int64_t n = std::min(want, budget) + drafted;
      if (plan(seq, n)) {
        planned_.back().drafted = drafted;
        budget -= n;
        ++i;
      }
    }
  }
  publish_gauges();  // before any token of this step reaches a client
  if (!planned_.empty()) {
    int64_t prefill = 0;
    for (const PlannedChunk& p : planned_) {
      const std::span<const int32_t> tokens =
          p.drafted > 0 ? std::span<const int32_t>(p.seq->verify)
                        : std::span<const int32_t>(p.seq->tokens.data() + p.seq->cached, p.n);
      chunks_.push_back(cache_.chunk(p.seq->cache_id, tokens));
      chunks_.back().logits = 1 + p.drafted;
      // A chunk ending at a generated token decodes that one (and verifies its draft); the rest
      // is prefill.
      const bool decodes = p.seq->generated() > 0 &&
                           p.seq->cached + p.n - p.drafted == int64_t(p.seq->tokens.size());
      prefill += (decodes ? p.n - 1 : p.n) - p.drafted;
    }
    metrics_.prefill_tokens(prefill);
    const int64_t vocab = served_.config().vocab_size;
    const double communication = ranks_.communication_seconds();
    const Clock::time_point start = Clock::now();
    const float* logits = ranks_.decode(cache_.view(), chunks_);
    metrics_.model_step(std::chrono::duration<double>(Clock::now() - start).count(),
                        ranks_.communication_seconds() - communication);
    for (const PlannedChunk& p : planned_) {
      Sequence& seq = *p.seq;
      if (p.drafted > 0) {
        verify(seq, logits);
      } else {
        cache_.advance(seq.cache_id, std::span<const int32_t>(seq.tokens.data() + seq.cached, p.n));
        seq.cached += p.n;
        if (seq.cached == int64_t(seq.tokens.size())) emit(seq, logits);
      }
      logits += (1 + p.drafted) * vocab;
    }
  }
  retire_finished();
  publish_gauges();
}

void Engine::drop_cancelled() {
  for (auto& seq : running_) {
    if (seq->out->cancelled()) finish(*seq, FinishReason::kCancelled);
  }
  retire_finished();
  std::lock_guard lock(queue_mutex_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->out->cancelled()) {
      if ((*it)->draft_id >= 0) drafter_->release((*it)->draft_id);  // preempted earlier
      end_stream(**it, FinishReason::kCancelled);
      metrics_.request_finished(finish_reason_name(FinishReason::kCancelled));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

// A waiting sequence joins when the pool can hold its tokens so far plus one block of headroom
// for every running sequence, so admitting it does not immediately force a preemption.
void Engine::admit() {
  std::lock_guard lock(queue_mutex_);
  while (!waiting_.empty() && int64_t(running_.size()) < options_.max_running) {
    Sequence& seq = *waiting_.front();
    const int64_t blocks =
        (int64_t(seq.tokens.size()) + cache_.block_tokens()) / cache_.block_tokens();
    if (!running_.empty() && blocks + int64_t(running_.size()) > cache_.blocks_free()) break;
    const AdapterLease* adapter = seq.request.adapter.get();
    seq.cache_id = adapter != nullptr ? cache_.add_sequence(adapter->slot, adapter->key)
                                      : cache_.add_sequence();
    seq.cached = 0;
    seq.admission = next_admission_++;
    if (!seq.admitted_before) {
      metrics_.queue_time(std::chrono::duration<double>(Clock::now() - seq.submitted).count());
      seq.admitted_before = true;
    }
    reuse_cached_prefix(seq, /*joining=*/true);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  metrics_.set_waiting(int64_t(waiting_.size()));
}

// Takes cached blocks for the tokens seq has yet to compute: when it joins, and again whenever
// its prefill reaches a block boundary, since a sequence ahead of it may have filled the blocks
// it is about to compute.
void Engine::reuse_cached_prefix(Sequence& seq, bool joining) {
  if (!cache_.prefix_caching()) return;
  const int64_t hits = cache_.attach_cached_prefix(seq.cache_id, seq.tokens);
  seq.cached += hits;
  metrics_.prefix_cache_lookup(joining ? int64_t(seq.tokens.size()) : 0, hits);
}

// Reserves room for seq's next n tokens, preempting younger sequences with nothing planned this
// step until it fits; when none is left, seq itself waits. Returns whether seq runs this step.
bool Engine::plan(Sequence& seq, int64_t n) {
  while (!cache_.reserve(seq.cache_id, n)) {
    Sequence* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      Sequence& candidate = **it;
      const bool planned = std::any_of(planned_.begin(), planned_.end(),
                                       [&](const PlannedChunk& p) { return p.seq == &candidate; });
      if (!planned && candidate.cache_id >= 0 && !candidate.finished) {
        victim = &candidate;
        break;
      }
    }
    if (victim == nullptr || victim->admission < seq.admission) victim = &seq;
    preempt(*victim);
    if (victim == &seq) return false;
  }
  planned_.push_back({&seq, n});
  return true;
}

// The most tokens seq may draft: none under a grammar, none past its max_tokens or the context.
int64_t Engine::draft_room(const Sequence& seq) const {
  if (seq.request.grammar) return 0;
  return std::min({options_.draft_tokens, seq.request.max_tokens - seq.generated() - 1,
                   context_ - int64_t(seq.tokens.size()) - 1});
}

// The draft model drafts for every decoding sequence at once, before the step is planned.
void Engine::draft_with_model() {
  draft_jobs_.clear();
  for (const auto& seq : running_) {
    if (int64_t(seq->tokens.size()) - seq->cached != 1) continue;
    draft_jobs_.push_back({&seq->draft_id, seq->tokens, draft_room(*seq), &seq->drafted});
  }
  drafter_->draft(draft_jobs_);
}

// Drafts up to `room` tokens to follow seq's last (none without speculation) into seq.verify,
// after that last token. Returns how many.
int64_t Engine::draft(Sequence& seq, int64_t room) {
  if (options_.draft_tokens == 0) return 0;
  const int64_t most = std::min(draft_room(seq), room);
  if (drafter_) {
    seq.verify.assign(
        seq.drafted.begin(),
        seq.drafted.begin() + std::clamp<int64_t>(most, 0, int64_t(seq.drafted.size())));
    seq.drafted.clear();
  } else {
    ngram_draft(seq.tokens, most, seq.verify);
  }
  if (seq.verify.empty()) return 0;
  seq.verify.insert(seq.verify.begin(), seq.tokens.back());
  return int64_t(seq.verify.size()) - 1;
}

// After a step ran seq.verify (its last token and a draft), takes the token each position
// samples, in order, while the draft agrees: the keys and values of an accepted token are kept,
// those after the first disagreement are overwritten by later steps. The counts move before each
// token goes out, so whoever sees a request end sees its drafts counted.
void Engine::verify(Sequence& seq, const float* logits) {
  const int64_t drafted = int64_t(seq.verify.size()) - 1, vocab = served_.config().vocab_size;
  seq.rejected_prediction += drafted;
  metrics_.drafted(drafted);
  for (int64_t i = 0; i <= drafted; ++i) {
    cache_.advance(seq.cache_id, std::span<const int32_t>(&seq.verify[i], 1));
    ++seq.cached;
    emit(seq, logits + i * vocab);
    if (seq.finished || i == drafted || seq.tokens.back() != seq.verify[i + 1]) break;
    ++seq.accepted_prediction;
    --seq.rejected_prediction;
    metrics_.draft_kept();
  }
}

// Frees seq's blocks and sends it back to the front of the queue; its tokens so far are
// recomputed when it is admitted again.
void Engine::preempt(Sequence& seq) {
  cache_.release(seq.cache_id);
  seq.cache_id = -1;
  seq.cached = 0;
  metrics_.preemption();
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& s) { return s.get() == &seq; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  std::lock_guard lock(queue_mutex_);
  waiting_.push_front(std::move(owned));
}

// The row of logits with every token seq's grammar does not allow next at -inf.
const float* Engine::constrain(Sequence& seq, const float* logits) {
  const Clock::time_point start = Clock::now();
  grammar::TokenGrammar& grammar = *seq.request.grammar;
  const int64_t computed = grammar.masks_computed();
  const grammar::TokenMask& allowed = grammar.allowed(seq.matched);
  bool any = false;
  for (size_t id = 0; id < masked_.size(); ++id) {
    const bool allows = grammar::allows(allowed, int64_t(id));
    masked_[id] = allows ? logits[id] : -std::numeric_limits<float>::infinity();
    any = any || allows;
  }
  metrics_.masked_token(std::chrono::duration<double>(Clock::now() - start).count(),
                        grammar.masks_computed() > computed);
  return any ? masked_.data() : nullptr;
}

void Engine::emit(Sequence& seq, const float* logits) {
  const int64_t position = int64_t(seq.tokens.size());
  const float* sampled = seq.request.grammar ? constrain(seq, logits) : logits;
  if (sampled == nullptr) {
    finish(seq, FinishReason::kError);
    end_stream(seq, FinishReason::kError,
               "no token of the vocabulary continues the requested format from here");
    return;
  }
  const int32_t id =
      seq.sampler.sample(sampled, position, seq.tokens, int64_t(seq.request.prompt.size()));
  const bool complete = seq.request.grammar && seq.request.grammar->advance(seq.matched, id) &&
                        seq.matched.complete();
  GeneratedToken token;
  token.id = id;
  if (seq.request.top_logprobs >= 0) {
    token_logprobs(logits, served_.tokenizer->vocab_size(), id, seq.request.top_logprobs,
                   token.logprobs);
  }
  seq.tokens.push_back(id);
  const auto end_of_text = served_.tokenizer->end_of_text();
  const bool ends = (end_of_text.has_value() && id == *end_of_text) ||
                    std::find(served_.stop_tokens.begin(), served_.stop_tokens.end(), id) !=
                        served_.stop_tokens.end();
  if (!ends) token.text = seq.text.push(id);
  const Clock::time_point now = Clock::now();
  const double since =
      std::chrono::duration<double>(now - (seq.generated() == 1 ? seq.submitted : seq.last_token))
          .count();
  if (seq.generated() == 1) {
    metrics_.time_to_first_token(since);
  } else {
    metrics_.inter_token_latency(since);
  }
  seq.last_token = now;
  metrics_.generated_tokens(1);
  if (ends || complete || seq.text.stopped()) {
    finish(seq, FinishReason::kStop);
  } else if (seq.generated() == seq.request.max_tokens || position + 1 == context_) {
    finish(seq, FinishReason::kLength);
  }
  if (seq.finished) token.text += seq.text.finish();
  seq.out->append(std::move(token));
  if (seq.finished) end_stream(seq, *seq.finished);
}

// Marks seq finished and frees its blocks; the caller tells its stream once the last token is
// in. retire_finished then removes it from the batch.
void Engine::finish(Sequence& seq, FinishReason reason) {
  seq.finished = reason;
  cache_.release(seq.cache_id);
  seq.cache_id = -1;
  if (seq.draft_id >= 0) drafter_->release(seq.draft_id);
  seq.draft_id = -1;
  // Before the count of finished requests and before the client hears of the end, so whoever
  // sees either finds the blocks back and the sequence gone from the batch in /metrics.
  publish_gauges();
  metrics_.request_finished(finish_reason_name(reason));
  metrics_.request_latency(std::chrono::duration<double>(Clock::now() - seq.submitted).count());
  if (reason == FinishReason::kCancelled) end_stream(seq, reason);
}

void Engine::end_stream(Sequence& seq, FinishReason reason, const std::string& error) {
  unfinished_.fetch_sub(1);
  seq.out->count_predictions(seq.accepted_prediction, seq.rejected_prediction);
  seq.out->finish(reason, error);
}

void Engine::retire_finished() {
  std::erase_if(running_, [](const auto& seq) { return seq->finished.has_value(); });
}

void Engine::fail_all(FinishReason reason, const std::string& message) {
  for (auto& seq : running_) {
    if (seq->finished) continue;  // its stream has ended; a failed step left it unretired
    if (seq->cache_id >= 0) cache_.release(seq->cache_id);
    end_stream(*seq, reason, message);
    metrics_.request_finished(finish_reason_name(reason));
  }
  running_.clear();
  std::lock_guard lock(queue_mutex_);
  for (auto& seq : waiting_) {
    end_stream(*seq, reason, message);
    metrics_.request_finished(finish_reason_name(reason));
  }
  waiting_.clear();
  publish_gauges();
}

void Engine::publish_gauges() {
  metrics_.set_running(
      int64_t(std::ranges::count_if(running_, [](const auto& seq) { return !seq->finished; })));
  metrics_.set_kv_blocks(cache_.blocks_used(), cache_.blocks_free(), cache_.blocks_cached());
}

}  // namespace tessera::serve
