#pragma once

#include <cstdint>
#include <optional>

#include "tessera/kernels/context.h"
#include "tessera/model/collectives.h"
#include "tessera/model/layer.h"
#include "tessera/model/linear.h"
#include "tessera/model/lora_adapter.h"
#include "tessera/model/shared_heads.h"
#include "tessera/model/tensor_parallel.h"

namespace tessera::model {

// Working space the tensor-parallel linears share (one set per model): a gathered input and its
// low copy [N, C], row-parallel partial sums [N, C], and completed input gradients [R, C] (used
// with sequence parallelism), and the gradient of a linear's input before completion.
struct ParallelScratch {
  MatmulInput full;
  float* partial = nullptr;
  float* d_rows = nullptr;
  float* d_input = nullptr;  // [N, in] of the widest column-parallel input
  float* shared_rows = nullptr;
};

// Megatron's column-parallel linear: this rank computes its slice of the outputs from the whole
// input, which it gathers first (sequence parallelism); its input gradient is a partial sum that
// the ranks complete (TensorParallel). A LoRA adapter, where given, adds its update to the output.
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(const kernels::Context& ctx, int64_t in, int64_t out, PartOffsets params,
                       const TensorParallel& tp, Collectives* tp_group, MatmulFormat format,
                       const ParallelScratch& scratch, uint16_t* dy_low, float* int8_scratch,
                       std::optional<SharedHeads> shared = std::nullopt,
                       const LinearAdapter* lora = nullptr);

  // rows: this rank's rows of the input (all N without sequence parallelism); y [N, out].
  void forward(const ParamAccess& p, const MatmulInput& rows, float* y, int64_t N) const;
  // dy [N, out]. Returns dL/d(input) for this rank's rows, completed over tp. With `held`, the
  // weight gradient waits for held_weight_backward: rows and dy are kept in it.
  const float* backward(const ParamAccess& p, const float* dy, const MatmulInput& rows, int64_t N,
                        const HeldGradient* held = nullptr) const;
  // The weight gradient from what backward kept (gathered again with sequence parallelism).
  void held_weight_backward(const ParamAccess& p, const HeldGradient& held, int64_t N) const;
  // The input as the matmul reads it: rows, or all N gathered into the scratch.
  MatmulInput input(const MatmulInput& rows, int64_t N) const;

 private:
  const kernels::Context& ctx_;
  void weight_backward(const ParamAccess& p, const MatmulInput& g, const MatmulInput& x,
                       int64_t N) const;
  void weight_backward_shared(const ParamAccess& p, const MatmulInput& g, const MatmulInput& x,
                              int64_t N) const;

  Linear linear_;
  const TensorParallel& tp_;
  Collectives* tp_group_;
  MatmulFormat format_;
  ParallelScratch scratch_;
  std::optional<SharedHeads> shared_;
  const LinearAdapter* lora_;
};

// Megatron's row-parallel linear: this rank multiplies its slice of the input, and the ranks'
// partial sums are completed (all-reduced, or reduce-scattered onto each rank's rows with
// sequence parallelism) before the bias, once, and the residual are added. A LoRA adapter, where
// given, adds its update to the partial sums.
class RowParallelLinear {
 public:
  RowParallelLinear(const kernels::Context& ctx, int64_t in, int64_t out, PartOffsets params,
                    const TensorParallel& tp, MatmulFormat format, const ParallelScratch& scratch,
                    uint16_t* dy_low, float* int8_scratch, const LinearAdapter* lora = nullptr);

  // in [N, in]; out, this rank's rows, = residual + the completed sum + bias.
  void forward(const ParamAccess& p, const MatmulInput& in, const float* residual, float* out,
               int64_t N) const;
  // d_out: dL/d(out) on this rank's rows; dx [N, in] is written. With `held`, the weight gradient
  // waits for held_weight_backward: in and the gathered dL/d(out) are kept in it.
  void backward(const ParamAccess& p, const float* d_out, const MatmulInput& in, float* dx,
                int64_t N, const HeldGradient* held = nullptr) const;
  void held_weight_backward(const ParamAccess& p, const HeldGradient& held, int64_t N) const;

 private:
  const kernels::Context& ctx_;
  Linear linear_;
  const TensorParallel& tp_;
  ParallelScratch scratch_;
  const LinearAdapter* lora_;
};

}  // namespace tessera::model
