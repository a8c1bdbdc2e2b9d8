#include "tessera/model/parallel_linear.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

ColumnParallelLinear::ColumnParallelLinear(const kernels::Context& ctx, int64_t in, int64_t out,
                                           PartOffsets params, const TensorParallel& tp,
                                           Collectives* tp_group, MatmulFormat format,
                                           const ParallelScratch& scratch, uint16_t* dy_low,
                                           float* int8_scratch, std::optional<SharedHeads> shared,
                                           const LinearAdapter* lora)
    : ctx_(ctx),
      linear_(ctx, in, out, params, format, dy_low, int8_scratch),
      tp_(tp),
      tp_group_(tp_group),
      format_(format),
      scratch_(scratch),
      shared_(shared),
      lora_(lora) {
  check(!shared_ || params.bias < 0, "shared key/value heads with a bias");
}

MatmulInput ColumnParallelLinear::input(const MatmulInput& rows, int64_t N) const {
  if (!tp_.sequence_parallel()) return rows;
  tp_.gather(rows.f32, scratch_.full.f32, N);
  format_.finish(ctx_, scratch_.full, N * linear_.in());
  return scratch_.full;
}

void ColumnParallelLinear::forward(const ParamAccess& p, const MatmulInput& rows, float* y,
                                   int64_t N) const {
  const MatmulInput x = input(rows, N);
  linear_.forward(p, x, y, N);
  if (lora_ != nullptr) lora_->forward(p, x.f32, y, N);
}

const float* ColumnParallelLinear::backward(const ParamAccess& p, const float* dy,
                                            const MatmulInput& rows, int64_t N,
                                            const HeldGradient* held) const {
  const MatmulInput g =
      held != nullptr ? linear_.output_gradient(dy, held->dy, N) : linear_.output_gradient(dy, N);
  linear_.input_backward(p, dy, g, scratch_.d_input, N);
  if (lora_ != nullptr) lora_->backward(p, dy, input(rows, N), scratch_.d_input, N);
  if (held != nullptr) {
    keep_matmul_input(ctx_, rows, held->x, tp_.rows(N) * linear_.in());
  } else {
    weight_backward(p, g, input(rows, N), N);
  }
  float* completed = tp_.sequence_parallel() ? scratch_.d_rows : scratch_.d_input;
  tp_.complete(scratch_.d_input, completed, N);
  return completed;
}

void ColumnParallelLinear::held_weight_backward(const ParamAccess& p, const HeldGradient& held,
                                                int64_t N) const {
  weight_backward(p, held.dy, input(held.x, N), N);
}

void ColumnParallelLinear::weight_backward(const ParamAccess& p, const MatmulInput& g,
                                           const MatmulInput& x, int64_t N) const {
  if (p.grad(linear_.params().weight) == nullptr) return;  // a frozen weight
  if (shared_) {
    weight_backward_shared(p, g, x, N);
  } else {
    linear_.weight_backward(g, x, p.grad(linear_.params().weight), N);
  }
}

// The shared rows' gradient is each rank's part of it, summed over the ranks that share them.
void ColumnParallelLinear::weight_backward_shared(const ParamAccess& p, const MatmulInput& g,
                                                  const MatmulInput& x, int64_t N) const {
  const int64_t C = linear_.in(), local = linear_.out() * C;
  float* mine = scratch_.shared_rows;  // [out, C]: this micro-batch's gradient of the local rows
  std::fill(mine, mine + local, 0.0f);
  linear_.weight_backward(g, x, mine, N);
  add_shared_gradient(ctx_, *tp_group_, *shared_, mine, mine + local,
                      p.grad(linear_.params().weight), linear_.out(), C);
}

RowParallelLinear::RowParallelLinear(const kernels::Context& ctx, int64_t in, int64_t out,
                                     PartOffsets params, const TensorParallel& tp,
                                     MatmulFormat format, const ParallelScratch& scratch,
                                     uint16_t* dy_low, float* int8_scratch,
                                     const LinearAdapter* lora)
    : ctx_(ctx),
      linear_(ctx, in, out, params, format, dy_low, int8_scratch),
      tp_(tp),
      scratch_(scratch),
      lora_(lora) {}

void RowParallelLinear::forward(const ParamAccess& p, const MatmulInput& in, const float* residual,
                                float* out, int64_t N) const {
  const int64_t R = tp_.rows(N), C = linear_.out();
  if (!tp_.active()) {
    linear_.forward(p, in, out, N);
    if (lora_ != nullptr) lora_->forward(p, in.f32, out, N);
  } else {
    float* partial = tp_.sequence_parallel() ? scratch_.partial : out;
    linear_.forward(p, in, partial, N, /*with_bias=*/false);
    if (lora_ != nullptr) lora_->forward(p, in.f32, partial, N);
    tp_.complete(partial, out, N);
    if (linear_.params().bias >= 0) k::add_bias(ctx_, out, p.f32(linear_.params().bias), R, C);
  }
  k::add(ctx_, residual, out, out, R * C);
}

// The bias gradient comes from the whole dL/d(out) every rank gathers, so it needs no sum.
void RowParallelLinear::backward(const ParamAccess& p, const float* d_out, const MatmulInput& in,
                                 float* dx, int64_t N, const HeldGradient* held) const {
  const float* dy = tp_.gather(d_out, scratch_.full.f32, N);
  const MatmulInput g =
      held != nullptr ? linear_.output_gradient(dy, held->dy, N) : linear_.output_gradient(dy, N);
  linear_.input_backward(p, dy, g, dx, N);
  if (lora_ != nullptr) lora_->backward(p, dy, in, dx, N);
  if (held != nullptr) {
    keep_matmul_input(ctx_, in, held->x, N * linear_.in());
  } else {
    linear_.weight_backward(g, in, p.grad(linear_.params().weight), N);
  }
}

void RowParallelLinear::held_weight_backward(const ParamAccess& p, const HeldGradient& held,
                                             int64_t N) const {
  linear_.weight_backward(held.dy, held.x, p.grad(linear_.params().weight), N);
}

}  // namespace tessera::model
