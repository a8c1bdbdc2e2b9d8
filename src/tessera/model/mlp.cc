#include "tessera/model/mlp.h"

#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

Mlp::Mlp(const kernels::Context& ctx, Activation activation, int64_t C, int64_t ffn,
         const PartTable& parts, const TensorParallel& tp, Collectives* tp_group,
         MatmulFormat format, const ParallelScratch& scratch, uint16_t* dy_low, float* int8_scratch,
         const BlockAdapters& adapters)
    : ctx_(ctx),
      activation_(activation),
      ffn_(ffn),
      in_(ctx, C, activation == Activation::kSwiglu ? 2 * ffn : ffn, parts[PartId::kMlpIn], tp,
          tp_group, format, scratch, dy_low, int8_scratch, std::nullopt, adapters[PartId::kMlpIn]),
      out_(ctx, ffn, C, parts[PartId::kMlpOut], tp, format, scratch, dy_low, int8_scratch,
           adapters[PartId::kMlpOut]),
      format_(format) {}

void Mlp::recompute(const MlpActivations& a, int64_t N) const {
  if (activation_ == Activation::kGelu) {
    k::gelu_forward(ctx_, a.hidden, a.act.f32, N * ffn_);
  } else {
    k::swiglu_forward(ctx_, a.hidden, a.act.f32, N, ffn_);
  }
  format_.finish(ctx_, a.act, N * ffn_);
}

void Mlp::forward(const ParamAccess& p, const MatmulInput& normed, const float* residual,
                  const MlpActivations& a, float* out, int64_t N) const {
  in_.forward(p, normed, a.hidden, N);
  recompute(a, N);
  out_.forward(p, a.act, residual, out, N);
}

const float* Mlp::backward(const ParamAccess& p, const float* d_out, const MatmulInput& normed,
                           const MlpActivations& a, float* d_hidden, int64_t N,
                           const MlpHeld* held) const {
  float* d_act = d_hidden;
  float* d_pre = activation_ == Activation::kGelu ? d_hidden : d_hidden + N * ffn_;
  out_.backward(p, d_out, a.act, d_act, N, held != nullptr ? &held->out : nullptr);
  if (activation_ == Activation::kGelu) {
    k::gelu_backward(ctx_, d_act, a.hidden, d_pre, N * ffn_);
  } else {
    k::swiglu_backward(ctx_, d_act, a.hidden, d_pre, N, ffn_);
  }
  return in_.backward(p, d_pre, normed, N, held != nullptr ? &held->in : nullptr);
}

void Mlp::weight_backward(const ParamAccess& p, const MlpHeld& held, int64_t N) const {
  out_.held_weight_backward(p, held.out, N);
  in_.held_weight_backward(p, held.in, N);
}

}  // namespace tessera::model
