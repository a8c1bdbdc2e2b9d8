#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/windows.h"

namespace tessera::data {

struct LoaderOptions {
  int64_t batch_size = 1;  // sequences per rank per batch
  int64_t seq_len = 1;
  uint64_t seed = 0;
  int64_t rank = 0;  // this data-parallel rank, in [0, world)
  int64_t world = 1;
  int64_t prefetch = 2;  // batches a background thread keeps ready; 0 fills on the caller's thread
};

struct Batch {
  const int32_t* inputs = nullptr;  // batch_size * seq_len
  const int32_t* targets = nullptr;
  int64_t first_sample = 0;  // global sample index of row 0
};

// Training batches for one data-parallel rank. The loader's whole state is one number, the global
// position: samples consumed by all ranks together. The batch that starts at position p gives
// rank r the samples p + r * batch_size .. p + (r + 1) * batch_size - 1 (see windows.h for what
// each sample reads) and advances p by world * batch_size. So the union of all ranks' batches is
// the world-1 batch of world * batch_size samples at p, and a run resumed at p with any world
// size and batch continues the same sample sequence.
class Loader {
 public:
  // tokens must outlive the loader. Starts the prefetch thread, if any.
  Loader(const TokenStream& tokens, const LoaderOptions& options, int64_t position);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch; it stays valid until the following call. Blocks while the prefetch thread
  // is behind. Never allocates.
  const Batch& next();

  // Global samples consumed by the batches returned so far.
  int64_t position() const { return position_; }
  // Seconds the last next() waited for its batch (0 when it was ready, or for the time spent
  // filling it when there is no prefetch thread).
  double last_wait_seconds() const { return last_wait_s_; }
  int64_t windows_per_epoch() const { return windows_.windows_per_epoch(); }

 private:
  struct Slot {
    std::vector<int32_t> inputs, targets;
    Batch batch;
  };
  void fill(Slot& slot, int64_t position);
  void produce();

  const TokenStream& tokens_;
  LoaderOptions options_;
  TrainWindows windows_;
  int64_t position_;
  double last_wait_s_ = 0;

  // A ring of preallocated slots: the consumer holds at most one, the producer fills the others
  // ahead in order.
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  size_t consume_ = 0;    // next slot the consumer takes
  size_t ready_ = 0;      // filled slots not yet taken
  bool holding_ = false;  // the consumer holds slots_[consume_ - 1]
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread producer_;
};

}  // namespace tessera::data
