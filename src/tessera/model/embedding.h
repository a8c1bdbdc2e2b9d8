#pragma once

#include <cstdint>
#include <span>

#include "tessera/kernels/context.h"
#include "tessera/kernels/paged_attention.h"
#include "tessera/model/collectives.h"
#include "tessera/model/layer.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parallel_linear.h"
#include "tessera/model/tensor_parallel.h"

namespace tessera::model {

// The token embedding, and GPT-2's learned positions. Split over tensor-parallel ranks, each rank
// looks up the ids of its vocabulary slice and the ranks' rows are summed (reduce-scattered onto
// each rank's rows with sequence parallelism), then the positions are added to this rank's rows:
// with context parallelism, the positions of its chunks of each sequence.
class Embedding {
 public:
  // position_grads: [max_seq, C] scratch for the positions' partial gradients under sequence
  // parallelism (else unused).
  Embedding(const kernels::Context& ctx, const ModelLayout& layout, const TensorParallel& tp,
            Collectives* tp_group, const ParallelScratch& scratch, float* position_grads,
            const SequenceSplit& split = {});

  // tokens [B, T] (checked); x: this rank's rows of their embeddings.
  void forward(const ParamAccess& p, const int32_t* tokens, float* x, int64_t B, int64_t T) const;
  // The N tokens of decode chunks, each chunk's n tokens at rows [row, row + n) and positions
  // [start, start + n), into x [N, C] whole on every tensor-parallel rank.
  void forward_chunks(const ParamAccess& p, const int32_t* tokens,
                      std::span<const kernels::PagedChunk> chunks, float* x, int64_t N) const;
  // dx: dL/d(x) on this rank's rows; the tables' gradients accumulate.
  void backward(const ParamAccess& p, const float* dx, const int32_t* tokens, int64_t B,
                int64_t T) const;

 private:
  // Rows [first_row, first_row + rows) of a [B, T] batch, x (or dx) holding them from its row 0:
  // x += their positions' rows of wpe, or their rows of dx are added to dwpe.
  void add_positions(const float* wpe, float* x, int64_t first_row, int64_t rows, int64_t T) const;
  void add_position_gradients(const float* dx, float* dwpe, int64_t first_row, int64_t rows,
                              int64_t T) const;

  const kernels::Context& ctx_;
  PartOffsets tokens_, positions_;
  VocabShard vocab_;
  int64_t C_;
  const TensorParallel& tp_;
  Collectives* tp_group_;
  ParallelScratch scratch_;
  float* position_grads_;
  SequenceSplit split_;
};

}  // namespace tessera::model
