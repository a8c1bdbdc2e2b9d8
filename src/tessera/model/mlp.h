#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/layer.h"
#include "tessera/model/parallel_linear.h"

namespace tessera::model {

// What the MLP keeps for its backward over N tokens: its first matmul's output [N, in_width] and
// the activation's output [N, ffn] (a matmul input).
struct MlpActivations {
  float* hidden;
  MatmulInput act;
};

// What the MLP's two linears hold until their weight gradients (HeldGradient).
struct MlpHeld {
  HeldGradient in, out;
};

// A dense MLP on this rank's slice: the column-parallel first matmul (GPT-2's fc, Llama's fused
// gate and up), GELU or SwiGLU, and the row-parallel second matmul into the residual stream.
class Mlp {
 public:
  Mlp(const kernels::Context& ctx, Activation activation, int64_t C, int64_t ffn,
      const PartTable& parts, const TensorParallel& tp, Collectives* tp_group, MatmulFormat format,
      const ParallelScratch& scratch, uint16_t* dy_low, float* int8_scratch,
      const BlockAdapters& adapters);

  // normed: this rank's rows of the MLP norm's output; out = residual + MLP.
  void forward(const ParamAccess& p, const MatmulInput& normed, const float* residual,
               const MlpActivations& a, float* out, int64_t N) const;
  // The activation's output again from the kept first-matmul output (selective recompute).
  void recompute(const MlpActivations& a, int64_t N) const;
  // d_out: dL/d(out) on this rank's rows. Returns dL/d(normed) for them; d_hidden [N, in_width +
  // (SwiGLU: ffn)] is working space. With `held`, the weight gradients wait for weight_backward.
  const float* backward(const ParamAccess& p, const float* d_out, const MatmulInput& normed,
                        const MlpActivations& a, float* d_hidden, int64_t N,
                        const MlpHeld* held = nullptr) const;
  void weight_backward(const ParamAccess& p, const MlpHeld& held, int64_t N) const;

 private:
  const kernels::Context& ctx_;
  Activation activation_;
  int64_t ffn_;
  ColumnParallelLinear in_;
  RowParallelLinear out_;
  MatmulFormat format_;
};

}  // namespace tessera::model
