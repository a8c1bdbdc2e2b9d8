#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/kernels/context.h"
#include "tessera/model/collectives.h"
#include "tessera/model/layer.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// The LoRA update of one tensor-parallel linear, y += scale (x A^T) B^T (kernels/lora.h), on this
// rank's slice. Column-parallel: x is the whole input, B this rank's rows of each piece, so the
// down-projection's gradient du is partial until summed over tp (A's gradient needs it whole; the
// input gradient, partial like the linear's own, takes it as it is). Row-parallel: x is this
// rank's columns, A the same columns, so u is partial: added to the output's partial sums as it
// is, and summed over tp in backward, where B's gradient needs it whole. Only f32: the adapter
// reads its input and weights in f32, and recomputes u in backward rather than keeping it.
class LoraAdapter {
 public:
  // widths: this rank's rows of each piece of the linear's output; scratch: two buffers of
  // N x pieces x rank floats (u and du).
  LoraAdapter(const kernels::Context& ctx, AdapterOffsets params, bool row_parallel, int64_t in,
              int64_t rank, std::vector<int64_t> widths, float scale, Collectives* tp_group,
              float* u, float* du);

  // y [N, out] += the update of x [N, in].
  void forward(const ParamAccess& p, const float* x, float* y, int64_t N) const;
  // dy [N, out]: the gradient of this rank's outputs (whole, row-parallel). Accumulates A's and
  // B's gradients, and du A into dx [N, in].
  void backward(const ParamAccess& p, const float* dy, const float* x, float* dx, int64_t N) const;

 private:
  int64_t cols() const { return rank_ * int64_t(widths_.size()); }

  const kernels::Context& ctx_;
  AdapterOffsets params_;
  bool row_parallel_;
  int64_t in_, rank_;
  std::vector<int64_t> widths_;
  float scale_;
  Collectives* tp_group_;
  float *u_, *du_;
};

// The adapters of one block's linears, by the part each adapts; they share the scratch u and du
// (each N x the widest adapter's pieces x rank floats, lora_scratch_floats).
class BlockAdapters {
 public:
  BlockAdapters(const kernels::Context& ctx, const ModelLayout& layout, int64_t layer,
                Collectives* tp_group, float* u, float* du);
  // Null where the part has no adapter.
  const LoraAdapter* operator[](PartId id) const;

 private:
  std::array<std::optional<LoraAdapter>, kPartIdCount> adapters_;
};

// Floats per token of each of the adapters' scratch buffers; 0 without adapters.
int64_t lora_scratch_floats(const BlockSpec& spec);

}  // namespace tessera::model
