#include "tessera/serve/decode_ranks.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/serve/engine.h"
#include "tessera/serve/kv_cache.h"

namespace tessera::serve {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPlanTag = 71;
constexpr int kRowsTag = 72;
constexpr int kLogitsTag = 73;
constexpr int32_t kFinished = -1;
// A chunk's numbers in a plan before its tokens and blocks: n, start, blocks, logits, adapter.
constexpr size_t kChunkHeader = 5;
// How long an idle follower sleeps between looks for the next plan: it waits without a deadline
// (an idle server is not a stalled job), and this is what it adds to a step's start.
constexpr std::chrono::microseconds kFollowerPoll{100};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

DecodeRanks::DecodeRanks(ServedModel& served, int64_t max_rows)
    : served_(served),
      decoder_(*served.model),
      group_(served.ranks),
      rank_(group_ != nullptr ? group_->rank() : 0),
      size_(group_ != nullptr ? group_->size() : 1),
      vocab_group_(served.vocab_ranks),
      vocab_ranks_(vocab_group_ != nullptr ? vocab_group_->size() : 1),
      stage_group_(served.stage_ranks),
      stage_(stage_group_ != nullptr ? stage_group_->rank() : 0),
      stages_(stage_group_ != nullptr ? stage_group_->size() : 1),
      max_rows_(max_rows),
      vocab_(served.model->model_layout().vocab) {
  check(max_rows >= 1, "a step returns at least one row of logits, not {}", max_rows);
  chunks_.reserve(size_t(max_rows));
  if (vocab_ranks_ > 1) {
    slices_.resize(size_t(max_rows * vocab_.local * vocab_ranks_));
    gather_counts_.resize(size_t(vocab_ranks_));
  }
  if (vocab_ranks_ > 1 || stages_ > 1 || served.context().on_cuda()) {
    logits_.resize(size_t(max_rows * vocab_.vocab_size));
  }
}

double DecodeRanks::communication_seconds() const {
  return exchange_seconds_ +
         (served_.groups != nullptr ? served_.groups->communication_seconds() : 0);
}

int64_t DecodeRanks::leaders_pool_tokens(int64_t own) {
  if (size_ == 1) return own;
  check(own <= std::numeric_limits<int32_t>::max(),
        "a KV pool of {} tokens is more than serving over ranks counts; give --kv-cache-tokens",
        own);
  int32_t tokens = int32_t(own);
  group_->broadcast(&tokens, 1, DType::i32, 0);
  return tokens;
}

const float* DecodeRanks::run(const runtime::KvCacheView& cache,
                              std::span<const runtime::DecodeChunk> chunks) {
  const int64_t rows = runtime::logit_rows(chunks);
  check(rows <= max_rows_, "a step of {} rows of logits exceeds the {} the engine was built for",
        rows, max_rows_);
  const int64_t floats = decoder_.check(cache, chunks) * served_.config().d_model;
  if (stage_ > 0) {
    const Clock::time_point start = Clock::now();
    stage_group_->recv(decoder_.input(), floats, DType::f32, stage_ - 1, kRowsTag);
    exchange_seconds_ += seconds_since(start);
  }
  const float* out = decoder_.decode(cache, chunks);
  const Clock::time_point start = Clock::now();
  if (stage_ + 1 < stages_) {
    stage_group_->send(out, floats, DType::f32, stage_ + 1, kRowsTag);
    out = nullptr;
  } else {
    out = whole_vocabulary(out, rows);
  }
  if (stages_ > 1 && stage_ == stages_ - 1) {
    stage_group_->send(out, rows * vocab_.vocab_size, DType::f32, 0, kLogitsTag);
  } else if (stages_ > 1 && stage_ == 0) {
    stage_group_->recv(logits_.data(), rows * vocab_.vocab_size, DType::f32, stages_ - 1,
                       kLogitsTag);
    out = logits_.data();
  }
  exchange_seconds_ += seconds_since(start);
  return out;
}

const float* DecodeRanks::whole_vocabulary(const float* slice, int64_t rows) {
  if (vocab_ranks_ == 1) {
    return on_host(served_.context(), slice, rows * vocab_.vocab_size, logits_);
  }
  const int64_t part = rows * vocab_.local;
  std::fill(gather_counts_.begin(), gather_counts_.end(), part);
  vocab_group_->all_gather(slice, slices_.data(), gather_counts_, DType::f32);
  for (int64_t r = 0; r < rows; ++r) {
    float* out = logits_.data() + r * vocab_.vocab_size;
    for (int64_t v = 0; v < vocab_.vocab_size;) {
      const int64_t rank = v / vocab_.local, end = std::min(vocab_.vocab_size, v + vocab_.local);
      std::copy(slices_.data() + rank * part + r * vocab_.local,
                slices_.data() + rank * part + r * vocab_.local + (end - v), out + v);
      v = end;
    }
  }
  return logits_.data();
}

const float* DecodeRanks::decode(const runtime::KvCacheView& cache,
                                 std::span<const runtime::DecodeChunk> chunks) {
  check(leader(), "decode is the leader's; rank {} follows", rank_);
  if (size_ > 1) send_plan(chunks);
  return run(cache, chunks);
}

void DecodeRanks::send_plan(std::span<const runtime::DecodeChunk> chunks) {
  const Clock::time_point start = Clock::now();
  plan_.clear();
  for (const runtime::DecodeChunk& c : chunks) {
    plan_.insert(plan_.end(), {int32_t(c.n), int32_t(c.start), int32_t(c.block_table.size()),
                               int32_t(c.logits), c.adapter});
    plan_.insert(plan_.end(), c.tokens, c.tokens + c.n);
    plan_.insert(plan_.end(), c.block_table.begin(), c.block_table.end());
  }
  int32_t header[2] = {int32_t(chunks.size()), int32_t(plan_.size())};
  for (int r = 1; r < size_; ++r) group_->send(header, 2, DType::i32, r, kPlanTag);
  group_->broadcast(plan_.data(), int64_t(plan_.size()), DType::i32, 0);
  exchange_seconds_ += seconds_since(start);
}

void DecodeRanks::finish() {
  if (size_ == 1 || !leader()) return;
  int32_t header[2] = {kFinished, 0};
  for (int r = 1; r < size_; ++r) group_->send(header, 2, DType::i32, r, kPlanTag);
}

bool DecodeRanks::receive_plan() {
  int32_t header[2] = {0, 0};
  comm::Request request = group_->start_recv(header, 2, DType::i32, 0, kPlanTag);
  while (!group_->test(request)) std::this_thread::sleep_for(kFollowerPoll);
  if (header[0] == kFinished) return false;
  const Clock::time_point start = Clock::now();
  check(header[0] >= 1 && header[1] >= int32_t(kChunkHeader) * header[0],
        "the leader's plan of {} sequences in {} numbers is malformed", header[0], header[1]);
  plan_.resize(size_t(header[1]));
  group_->broadcast(plan_.data(), header[1], DType::i32, 0);
  chunks_.clear();
  size_t at = 0;
  for (int32_t s = 0; s < header[0]; ++s) {
    check(at + kChunkHeader <= plan_.size(), "the leader's plan ends inside sequence {}", s);
    const int64_t n = plan_[at], chunk_start = plan_[at + 1], blocks = plan_[at + 2],
                  logits = plan_[at + 3];
    const int32_t adapter = plan_[at + 4];
    at += kChunkHeader;
    check(n >= 1 && blocks >= 0 && at + size_t(n + blocks) <= plan_.size(),
          "the leader's plan ends inside sequence {}", s);
    chunks_.push_back({plan_.data() + at, n, chunk_start,
                       std::span<const int32_t>(plan_.data() + at + n, size_t(blocks)), logits,
                       adapter});
    at += size_t(n + blocks);
  }
  exchange_seconds_ += seconds_since(start);
  return true;
}

void DecodeRanks::follow(const runtime::KvCacheView& cache) {
  check(!leader(), "follow is for the followers; rank 0 leads");
  while (receive_plan()) {
    try {
      run(cache, chunks_);
    } catch (const Error& e) {
      spdlog::error("serve: rank {}: a step failed: {}", rank_, e.what());
    }
  }
}

void follow_leader(ServedModel& served, const EngineOptions& options) {
  DecodeRanks ranks(served, max_logit_rows(options));
  PagedKvCache cache(served.context(), served.model->model_layout(),
                     ranks.leaders_pool_tokens(kv_pool_tokens(options, served)),
                     options.block_tokens, /*prefix_caching=*/false, served.kv_dtype);
  ranks.follow(cache.view());
}

}  // namespace tessera::serve
