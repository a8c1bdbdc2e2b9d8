// What every layer of the model shares: how matmul inputs are held, how a layer reaches the
// parameters of the units the model has acquired, and the run's matmul format.
#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::model {

class QuantizedWeights;

// A matmul input: f32, and in low precision also its low-precision copy, which is what the
// matmul reads and what is kept for backward; there the f32 buffer is transient working space.
struct MatmulInput {
  float* f32 = nullptr;
  uint16_t* low = nullptr;
};

// A layer's parameters and gradients by flat offset, valid while the unit holding them is
// acquired (and, for gradients, during its backward).
class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  virtual const float* f32(int64_t offset) const = 0;
  virtual const uint16_t* low(int64_t offset) const = 0;
  // Null for a frozen parameter, whose gradient is not computed.
  virtual float* grad(int64_t offset) const = 0;
  // The quantised copy of the weight matrices, in an inference model with quantised weights;
  // null otherwise.
  virtual const QuantizedWeights* quantized() const = 0;
};

// The matmul format of a run: f32, or bf16/f16 operands with f32 accumulation.
struct MatmulFormat {
  bool low = false;
  kernels::LowPrecision precision = kernels::LowPrecision::kBf16;

  // Fills x.low from x.f32 when the format is low and x keeps a low copy (sequence-parallel norm
  // outputs keep only f32).
  void finish(const kernels::Context& ctx, const MatmulInput& x, int64_t n) const;
};

// Copies into `to` the fields it has (what a matmul, or the gather before it, reads) from the same
// fields of `from`, unless they are the same buffers: n elements each.
void keep_matmul_input(const kernels::Context& ctx, const MatmulInput& from, const MatmulInput& to,
                       int64_t n);

}  // namespace tessera::model
