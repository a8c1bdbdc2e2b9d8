#pragma once

#include <cstdint>

#include "tessera/model/collectives.h"

namespace tessera::model {

// The conjugate collectives around Megatron's tensor-parallel linears, over rows of C channels.
// A column-parallel linear needs its input whole on every rank; a row-parallel one leaves partial
// sums that the ranks complete. Without sequence parallelism the residual stream is whole on
// every rank, so gathering is the identity and completing is an all-reduce; with it each rank
// holds N / tp rows of the stream, gathering is an all-gather and completing a reduce-scatter.
// Backward uses the same two operations the other way round: the gradient of a gather is a
// completion and that of a completion a gather.
class TensorParallel {
 public:
  TensorParallel(const ModelParallel& parallel, int64_t C);

  bool active() const { return tp_ != nullptr && tp_->size() > 1; }
  bool sequence_parallel() const { return sequence_parallel_; }
  int64_t ranks() const { return active() ? tp_->size() : 1; }
  // Rows of the residual stream this rank holds out of N.
  int64_t rows(int64_t N) const { return sequence_parallel_ ? N / tp_->size() : N; }
  int64_t first_row(int64_t N) const { return sequence_parallel_ ? tp_->rank() * rows(N) : 0; }

  // x: this rank's rows(N) rows. Returns the N rows: x itself, or `full` gathered into.
  const float* gather(const float* x, float* full, int64_t N) const;
  // partial: N rows of partial sums, completed into `out` (rows(N) rows). Without sequence
  // parallelism out must be partial itself.
  void complete(float* partial, float* out, int64_t N) const;

 private:
  Collectives* tp_;
  bool sequence_parallel_;
  int64_t C_;
};

}  // namespace tessera::model
