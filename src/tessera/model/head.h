#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"
#include "tessera/model/collectives.h"
#include "tessera/model/layer.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/norm.h"
#include "tessera/model/parallel_linear.h"
#include "tessera/model/tensor_parallel.h"

namespace tessera::model {

// What the head keeps and works in: the final norm's output and statistics (this rank's R rows),
// this rank's slice of the logits [N, vocabulary slice], the per-token losses [N], and for a
// vocabulary split over ranks the per-row maxima, exponential sums and target logits [3N] with
// every rank's maxima [tp N].
struct HeadBuffers {
  MatmulInput normed;
  float *mean = nullptr, *rstd = nullptr;
  float* logits = nullptr;
  float* losses = nullptr;
  float *row_stats = nullptr, *rank_maxima = nullptr;
  float* host_losses = nullptr;  // [N] on the host, for losses computed on another device
};

// The final norm, the output projection over this rank's vocabulary slice (column-parallel over
// the vocabulary; the token embedding's slice when tied), and the softmax cross-entropy, which
// over a split vocabulary exchanges each row's maximum, exponential sum and target logit, never
// the logits.
class Head {
 public:
  Head(const kernels::Context& ctx, const ModelLayout& layout, const TensorParallel& tp,
       Collectives* tp_group, MatmulFormat format, const ParallelScratch& scratch, uint16_t* dy_low,
       float* int8_scratch, const HeadBuffers& buffers);

  // x: this rank's rows of the last block's output, normed into buffers.normed.
  void norm(const ParamAccess& p, const float* x, int64_t R) const;
  // This rank's slice of the logits of all N tokens.
  void logits(const ParamAccess& p, int64_t N) const;
  // This rank's vocabulary slice of the logits of `rows` normed rows from `first` (sampling,
  // decode).
  void logits_of_rows(const ParamAccess& p, int64_t first, int64_t rows) const;
  // The summed cross-entropy over N targets, where kIgnoredTarget rows add 0; with grad_scale
  // non-zero the logits become grad_scale * each trained row's gradient (0 in the others).
  double loss_sum(const int32_t* targets, int64_t N, float grad_scale) const;
  // From the gradient in the logits: d_res (this rank's rows) = dL/d(x), written.
  void backward(const ParamAccess& p, const float* x, float* d_res, int64_t N);

 private:
  const kernels::Context& ctx_;
  VocabShard vocab_;
  int64_t C_;
  const TensorParallel& tp_;
  Collectives* tp_group_;
  HeadBuffers b_;
  Norm norm_;
  ColumnParallelLinear projection_;
};

}  // namespace tessera::model
