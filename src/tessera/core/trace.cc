#include "tessera/core/trace.h"

#include <utility>

namespace tessera::trace {
namespace {

int thread_number() {
  static std::atomic<int> next{0};
  thread_local const int number = next++;
  return number;
}

}  // namespace

Recorder& Recorder::instance() {
  static Recorder* const recorder = new Recorder;
  return *recorder;
}

void Recorder::start(size_t capacity) {
  std::lock_guard lock(mutex_);
  events_.clear();
  events_.reserve(capacity);
  dropped_ = 0;
  origin_ = std::chrono::steady_clock::now();
  on_.store(true, std::memory_order_release);
}

std::vector<Event> Recorder::stop(int64_t& dropped) {
  on_.store(false, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  dropped = dropped_;
  return std::exchange(events_, {});
}

int64_t Recorder::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               origin_)
      .count();
}

void Recorder::add(const char* name, const char* category, int64_t index, int64_t start_us) {
  const int64_t end_us = now_us();
  const int thread = thread_number();
  std::lock_guard lock(mutex_);
  if (!on()) return;
  if (events_.size() == events_.capacity()) {
    ++dropped_;
    return;
  }
  events_.push_back({name, category, index, thread, start_us, end_us - start_us});
}

}  // namespace tessera::trace
