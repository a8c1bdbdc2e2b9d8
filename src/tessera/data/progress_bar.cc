#include "tessera/data/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tessera::data {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      enabled_(::isatty(STDERR_FILENO) == 1),
      start_(Clock::now()),
      last_draw_(start_) {}

void ProgressBar::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

void ProgressBar::update(int64_t done) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const double fraction = std::clamp(double(done) / double(total_), 0.0, 1.0);
  const int filled = int(fraction * kWidth);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? double(done) / elapsed : 0;
  const double eta = rate > 0 ? double(total_ - done) / rate : 0;
  std::string bar = fmt::format("\r{} [{}{}] {:3.0f}% {:.1f}/{:.1f} MB {:.1f} MB/s ETA {:.0f}s ",
                                label_, std::string(filled, '#'), std::string(kWidth - filled, '.'),
                                100 * fraction, done / 1e6, total_ / 1e6, rate / 1e6, eta);
  std::fputs(bar.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace tessera::data
