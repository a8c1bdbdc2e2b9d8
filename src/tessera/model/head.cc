#include "tessera/model/head.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

Head::Head(const kernels::Context& ctx, const ModelLayout& layout, const TensorParallel& tp,
           Collectives* tp_group, MatmulFormat format, const ParallelScratch& scratch,
           uint16_t* dy_low, float* int8_scratch, const HeadBuffers& buffers)
    : ctx_(ctx),
      vocab_(layout.vocab),
      C_(layout.spec.block.d_model),
      tp_(tp),
      tp_group_(tp_group),
      b_(buffers),
      norm_(ctx, layout.spec.block.norm, layout.spec.block.norm_eps, C_,
            layout.outer[PartId::kFinalNorm], format, tp.sequence_parallel() ? tp_group : nullptr),
      projection_(ctx, C_, layout.vocab.local, PartOffsets{layout.head_weight(), -1}, tp, tp_group,
                  format, scratch, dy_low, int8_scratch) {}

void Head::norm(const ParamAccess& p, const float* x, int64_t R) const {
  norm_.forward(p, x, b_.normed, b_.mean, b_.rstd, R);
}

void Head::logits(const ParamAccess& p, int64_t N) const {
  projection_.forward(p, b_.normed, b_.logits, N);
}

void Head::logits_of_rows(const ParamAccess& p, int64_t first, int64_t rows) const {
  const MatmulInput from{b_.normed.f32 + first * C_,
                         b_.normed.low != nullptr ? b_.normed.low + first * C_ : nullptr};
  projection_.forward(p, from, b_.logits, rows);
}

double Head::loss_sum(const int32_t* targets, int64_t N, float grad_scale) const {
  float* losses = b_.losses;
  if (!tp_.active()) {
    k::softmax_cross_entropy(ctx_, b_.logits, targets, losses, N, vocab_.vocab_size, grad_scale);
  } else {
    const VocabShard& v = vocab_;
    float* max = b_.row_stats;
    float* sums = max + N;  // then the target logits, summed together
    float* target = sums + N;
    k::vocab_shard_row_max(ctx_, b_.logits, N, v.real(), v.local, max);
    tp_group_->all_gather(max, b_.rank_maxima, N);
    for (int64_t i = 0; i < N; ++i) {
      float m = b_.rank_maxima[i];
      for (int r = 1; r < tp_.ranks(); ++r) m = std::max(m, b_.rank_maxima[r * N + i]);
      max[i] = m;
    }
    k::vocab_shard_exp_sums(ctx_, b_.logits, max, targets, v.begin, N, v.real(), v.local, sums,
                            target, grad_scale != 0.0f);
    tp_group_->all_reduce(sums, 2 * N);
    for (int64_t i = 0; i < N; ++i) {
      losses[i] = targets[i] == kIgnoredTarget ? 0.0f : std::log(sums[i]) + max[i] - target[i];
    }
    if (grad_scale != 0.0f) {
      k::vocab_shard_softmax_grad(ctx_, b_.logits, targets, v.begin, sums, N, v.real(), v.local,
                                  grad_scale);
    }
  }
  if (ctx_.on_cuda()) {
    k::copy_to_host(ctx_, b_.host_losses, losses, sizeof(float) * size_t(N));
    losses = b_.host_losses;
  }
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += losses[i];
  return sum;
}

void Head::backward(const ParamAccess& p, const float* x, float* d_res, int64_t N) {
  const int64_t R = tp_.rows(N);
  const float* d_normed = projection_.backward(p, b_.logits, b_.normed, N);
  k::fill_zeros(ctx_, d_res, sizeof(float) * R * C_);
  norm_.backward(p, d_normed, x, b_.mean, b_.rstd, d_res, R);
}

}  // namespace tessera::model
