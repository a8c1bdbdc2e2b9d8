#include "tessera/model/tensor_parallel.h"

#include "tessera/core/error.h"

namespace tessera::model {

TensorParallel::TensorParallel(const ModelParallel& parallel, int64_t C)
    : tp_(parallel.tp),
      sequence_parallel_(parallel.sequence_parallel && parallel.tp != nullptr &&
                         parallel.tp->size() > 1),
      C_(C) {}

const float* TensorParallel::gather(const float* x, float* full, int64_t N) const {
  if (!sequence_parallel_) return x;
  tp_->all_gather(x, full, rows(N) * C_);
  return full;
}

void TensorParallel::complete(float* partial, float* out, int64_t N) const {
  if (!active()) return;
  if (sequence_parallel_) {
    tp_->reduce_scatter(partial, out, rows(N) * C_);
    return;
  }
  check(out == partial, "tensor parallel: without sequence parallelism sums complete in place");
  tp_->all_reduce(partial, N * C_);
}

}  // namespace tessera::model
