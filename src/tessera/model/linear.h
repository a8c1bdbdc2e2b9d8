#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"
#include "tessera/model/layer.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// What a linear keeps from the backward of its input gradient until its weight gradient when a
// schedule runs them apart (zero-bubble): its input as the matmul reads it and dL/d(output) [N,
// out] as the weight-gradient matmul reads it, each in the run's format (the low-precision copy,
// or f32). x is the block's saved activation where the slot keeps it, else a copy of its own.
struct HeldGradient {
  MatmulInput x, dy;
};

// y[N, out] = x[N, in] W^T + b over this rank's slice of a linear part: f32, low-precision or
// int8 weights, as the run's format says. Tensor parallelism wraps it (TensorParallel); the layer
// itself only multiplies.
class Linear {
 public:
  // dy_low: working space of at least N * out halves for low-precision backward; int8_scratch:
  // kernels::int8_linear_scratch_size(in, N) floats for int8 weights. Either may be null when
  // unused.
  Linear(const kernels::Context& ctx, int64_t in, int64_t out, PartOffsets params,
         MatmulFormat format, uint16_t* dy_low, float* int8_scratch);

  // A row-parallel slice leaves its bias to be added once the ranks' sums are complete.
  void forward(const ParamAccess& p, const MatmulInput& x, float* y, int64_t N,
               bool with_bias = true) const;
  // The backward in two halves, which a zero-bubble schedule runs apart. output_gradient gives dy
  // as the matmuls read it: cast into into.low in low precision, else into.f32 (a copy, unless it
  // is dy). input_backward writes dx (= dy W) from it and accumulates db from the f32 dy;
  // weight_backward accumulates g^T x into dw, unless dw is null (a frozen weight).
  MatmulInput output_gradient(const float* dy, const MatmulInput& into, int64_t N) const;
  // output_gradient into the layer's own working space, for a weight gradient taken at once.
  MatmulInput output_gradient(const float* dy, int64_t N) const;
  void input_backward(const ParamAccess& p, const float* dy, const MatmulInput& g, float* dx,
                      int64_t N) const;
  void weight_backward(const MatmulInput& g, const MatmulInput& x, float* dw, int64_t N) const;

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  const PartOffsets& params() const { return params_; }

 private:
  const kernels::Context& ctx_;
  int64_t in_, out_;
  PartOffsets params_;
  MatmulFormat format_;
  uint16_t* dy_low_;
  float* int8_scratch_;
};

}  // namespace tessera::model
