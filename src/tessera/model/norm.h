#pragma once

#include <cstdint>
#include <vector>

#include "tessera/kernels/context.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/collectives.h"
#include "tessera/model/layer.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// LayerNorm (GPT-2) or RMSNorm (Llama) over rows of C channels, writing a matmul input.
class Norm {
 public:
  // With sequence parallelism each tensor-parallel rank normalises its own rows, so its gain and
  // bias gradients are partial: `partial_over` is then the tensor-parallel group, over which
  // each backward's contribution is summed before it is added (null: the gradients are whole).
  Norm(const kernels::Context& ctx, NormKind kind, double eps, int64_t C, PartOffsets params,
       MatmulFormat format, Collectives* partial_over);

  // mean is unused (and may be null) for RMSNorm.
  void forward(const ParamAccess& p, const float* x, const MatmulInput& y, float* mean, float* rstd,
               int64_t N) const;
  // dx accumulates (+=); gain and bias gradients accumulate.
  void backward(const ParamAccess& p, const float* dy, const float* x, const float* mean,
                const float* rstd, float* dx, int64_t N);

  // Per-row statistics the forward saves: mean and 1/std, or 1/rms.
  static int64_t stats_per_row(NormKind kind) { return kind == NormKind::kLayerNorm ? 2 : 1; }

 private:
  const kernels::Context& ctx_;
  NormKind kind_;
  float eps_;
  int64_t C_;
  PartOffsets params_;
  MatmulFormat format_;
  Collectives* partial_over_;
  std::vector<float> partial_;  // [2C]: this backward's gain and bias gradients, before the sum
};

}  // namespace tessera::model
