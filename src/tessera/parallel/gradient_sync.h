#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/comm/communicator.h"

namespace tessera::parallel {

// Data-parallel gradient averaging that overlaps backward. The flat gradient buffer is cut into
// buckets from its top down, the order in which backward finishes them; each bucket's all-reduce
// starts (non-blocking) as soon as backward reports every gradient above its start final, and
// the transfers progress while later blocks compute. The gradients must already be scaled so
// that their sum over ranks is the wanted mean.
class GradientSync {
 public:
  // `grads` holds `count` elements of `dtype` (f32 or bf16).
  GradientSync(comm::Communicator& dp, void* grads, DType dtype, int64_t count,
               int64_t bucket_elements);

  // Every gradient at `offset` or above is final: start the buckets that lie there, and let
  // the transfers already in flight progress.
  void ready_from(int64_t offset);
  // Reduces what is left, waits for everything and rearms for the next step. Returns the seconds
  // this took: the communication backward did not hide.
  double finish();

  int64_t bucket_count() const { return int64_t(buckets_.size()); }

 private:
  struct Bucket {
    int64_t begin, end;
    comm::Request request;
  };
  comm::Communicator& dp_;
  std::byte* grads_;
  DType dtype_;
  std::vector<Bucket> buckets_;  // top of the buffer first
  size_t started_ = 0;
};

}  // namespace tessera::parallel
