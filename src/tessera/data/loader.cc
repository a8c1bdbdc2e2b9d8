#include "tessera/data/loader.h"

#include <chrono>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

const LoaderOptions& validated(const LoaderOptions& o) {
  check(o.batch_size >= 1, "loader: batch size {} must be at least 1", o.batch_size);
  check(o.world >= 1, "loader: world size {} must be at least 1", o.world);
  check(o.rank >= 0 && o.rank < o.world, "loader: rank {} is outside [0, {})", o.rank, o.world);
  check(o.prefetch >= 0, "loader: prefetch {} must not be negative", o.prefetch);
  return o;
}

}  // namespace

Loader::Loader(const TokenStream& tokens, const LoaderOptions& options, int64_t position)
    : tokens_(tokens),
      options_(validated(options)),
      windows_(tokens.size(), options.seq_len, options.seed),
      position_(position),
      slots_(options.prefetch > 0 ? options.prefetch + 1 : 1) {
  check(position >= 0, "loader: position {} must not be negative", position);
  const size_t n = size_t(options_.batch_size * options_.seq_len);
  for (Slot& slot : slots_) {
    slot.inputs.resize(n);
    slot.targets.resize(n);
  }
  if (options_.prefetch > 0) producer_ = std::thread([this] { produce(); });
}

Loader::~Loader() {
  if (!producer_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  producer_.join();
}

void Loader::fill(Slot& slot, int64_t position) {
  const int64_t first = position + options_.rank * options_.batch_size;
  fill_train_batch(tokens_, windows_, first, options_.batch_size, options_.seq_len,
                   slot.inputs.data(), slot.targets.data());
  slot.batch = {slot.inputs.data(), slot.targets.data(), first};
}

void Loader::produce() {
  int64_t position = position_;
  while (true) {
    size_t index;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || ready_ + size_t(holding_) < slots_.size(); });
      if (stop_) return;
      // Slots [consume_, consume_ + ready_) are ready and the held one precedes them, so this
      // one is free; consuming moves both ends together and leaves the index unchanged.
      index = (consume_ + ready_) % slots_.size();
    }
    try {
      fill(slots_[index], position);
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    position += options_.world * options_.batch_size;
    {
      std::lock_guard lock(mutex_);
      ++ready_;
    }
    changed_.notify_all();
  }
}

const Batch& Loader::next() {
  const auto t0 = Clock::now();
  size_t index = 0;
  if (!producer_.joinable()) {
    fill(slots_[0], position_);
  } else {
    {
      std::unique_lock lock(mutex_);
      holding_ = false;
      changed_.wait(lock, [&] { return ready_ > 0 || error_ != nullptr; });
      if (ready_ == 0) std::rethrow_exception(error_);
      index = consume_;
      consume_ = (consume_ + 1) % slots_.size();
      --ready_;
      holding_ = true;
    }
    changed_.notify_all();
  }
  last_wait_s_ = seconds_since(t0);
  position_ += options_.world * options_.batch_size;
  return slots_[index].batch;
}

}  // namespace tessera::data
