#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::data {

// A one-line progress bar redrawn in place on stderr, only when stderr is a terminal, so logs and
// captured output stay free of carriage returns.
class ProgressBar {
 public:
  // total: the bytes of work; the bar shows MB and MB/s.
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Redraws at most ten times a second, and always when done reaches the total.
  void update(int64_t done);
  // Ends the bar's line, if anything was drawn, so that later output starts on a fresh line.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_, last_draw_;
};

}  // namespace tessera::data
