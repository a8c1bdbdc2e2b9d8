// Spans of work for a timeline trace (Chrome/Perfetto): what ran, on which thread, from when and
// for how long. Recording is off until started, and a span then costs two clock reads and one
// append into a buffer reserved up front; off, it costs one atomic load. Names and categories
// are string literals, so recording copies no text. obs/chrome_trace.h writes the spans out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace tessera::trace {

struct Event {
  const char* name = "";
  const char* category = "";
  int64_t index = -1;  // a layer, micro-batch or peer the name refers to; -1 for none
  int thread = 0;      // a small number per thread, in the order threads first recorded
  int64_t start_us = 0, duration_us = 0;  // since the recording started
};

class Recorder {
 public:
  // Never destroyed: spans may end on threads that outlive statics.
  static Recorder& instance();

  // Starts recording into room for `capacity` events (those past it are counted and dropped).
  void start(size_t capacity);
  // Stops recording and hands over what was recorded; `dropped` gets how many did not fit.
  std::vector<Event> stop(int64_t& dropped);
  bool on() const { return on_.load(std::memory_order_acquire); }

  // Microseconds since the recording started.
  int64_t now_us() const;
  void add(const char* name, const char* category, int64_t index, int64_t start_us);

 private:
  Recorder() = default;

  std::atomic<bool> on_{false};
  std::chrono::steady_clock::time_point origin_;
  std::mutex mutex_;
  std::vector<Event> events_;
  int64_t dropped_ = 0;
};

// Records itself from construction to destruction while the recorder is on.
class Span {
 public:
  Span(const char* name, const char* category, int64_t index = -1)
      : name_(name), category_(category), index_(index) {
    Recorder& r = Recorder::instance();
    if (r.on()) start_us_ = r.now_us();
  }
  ~Span() {
    if (start_us_ >= 0) Recorder::instance().add(name_, category_, index_, start_us_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* category_;
  int64_t index_;
  int64_t start_us_ = -1;
};

}  // namespace tessera::trace
