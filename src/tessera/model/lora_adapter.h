#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/kernels/context.h"
#include "tessera/model/adapter_bank.h"
#include "tessera/model/collectives.h"
#include "tessera/model/layer.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/shared_heads.h"

namespace tessera::model {

// What a linear adds to its output beside its own weight's product: a LoRA update, trained with
// the model (LoraAdapter) or served per request (BankedAdapter).
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  // y [N, out] += the update of x [N, in].
  virtual void forward(const ParamAccess& p, const float* x, float* y, int64_t N) const = 0;
  // dy [N, out]: the gradient of this rank's outputs (whole, row-parallel); x: the input as the
  // linear keeps it for its backward. Accumulates the adapter's gradients, and its input gradient
  // into dx [N, in].
  virtual void backward(const ParamAccess& p, const float* dy, const MatmulInput& x, float* dx,
                        int64_t N) const = 0;
};

// What the trained adapters of a block share: the scratch u and du (each N x the widest adapter's
// pieces x rank floats, lora_scratch), the input scratch (N x the widest input) a low precision
// or dropout needs, and where the dropout key of the pass in progress is (0: no dropout).
struct LoraBuffers {
  float *u = nullptr, *du = nullptr, *x = nullptr;
  const uint64_t* dropout_key = nullptr;
};

// Where an adapter's dropout draws: each input value (row, column) of the pass keeps or drops by
// the pass's key, the adapter's stream (its block and part), and the value's column in the whole
// input (first_column + column of this rank's columns, of `columns`), so every tensor-parallel
// rank and a recomputed forward draw the same mask.
struct LoraDropout {
  float p = 0;
  const uint64_t* key = nullptr;
  uint64_t stream = 0;
  int64_t first_column = 0, columns = 0;
};

// The LoRA update of one tensor-parallel linear, y += scale (x A^T) B^T (kernels/lora.h), on this
// rank's slice. Column-parallel: x is the whole input, B this rank's rows of each piece, so the
// down-projection's gradient du is partial until summed over tp (A's gradient needs it whole; the
// input gradient, partial like the linear's own, takes it as it is). Row-parallel: x is this
// rank's columns, A the same columns, so u is partial: added to the output's partial sums as it
// is, and summed over tp in backward, where B's gradient needs it whole. The adapter multiplies
// in f32, whatever the run's format: it reads its weights in f32, its input in f32 forward and,
// where a low precision keeps only the input's low copy for backward, that copy widened
// (buffers.x); it computes u again in backward rather than keeping it. With dropout, in a pass
// with a key, the adapter reads its input with the pass's mask applied (in buffers.x), and its
// input gradient passes the same mask.
class LoraAdapter final : public LinearAdapter {
 public:
  // widths: this rank's rows of each piece of the linear's output; shared: the rows of B that
  // tensor-parallel ranks share (qkv's key and value heads when tp exceeds them), whose
  // gradients are summed over the ranks that share them.
  LoraAdapter(const kernels::Context& ctx, AdapterOffsets params, bool row_parallel, int64_t in,
              int64_t rank, std::vector<int64_t> widths, float scale, Collectives* tp_group,
              MatmulFormat format, LoraBuffers buffers, LoraDropout dropout,
              std::optional<SharedHeads> shared = std::nullopt);

  void forward(const ParamAccess& p, const float* x, float* y, int64_t N) const override;
  void backward(const ParamAccess& p, const float* dy, const MatmulInput& x, float* dx,
                int64_t N) const override;

 private:
  int64_t cols() const { return rank_ * int64_t(widths_.size()); }
  bool drops() const { return dropout_.p > 0 && dropout_.key != nullptr && *dropout_.key != 0; }
  // The input the adapter multiplies: x, or x widened from its low copy and with the pass's
  // dropout applied, in buffers_.x.
  const float* adapter_input(const float* x, const uint16_t* low, int64_t N) const;
  // out[N, in] (+)= the dropout mask of the pass applied to values.
  void apply_dropout(const float* values, float* out, int64_t N, bool accumulate) const;

  const kernels::Context& ctx_;
  AdapterOffsets params_;
  bool row_parallel_;
  int64_t in_, rank_;
  std::vector<int64_t> widths_;
  float scale_;
  Collectives* tp_group_;
  MatmulFormat format_;
  LoraBuffers buffers_;
  LoraDropout dropout_;
  std::optional<SharedHeads> shared_;
  // With shared rows: B's gradient of this rank's rows, and add_shared_gradient's scratch.
  mutable std::vector<float> b_rows_grad_, shared_summed_;
};

// A linear's update from the adapters of an AdapterBank, each on the rows that asked for it.
// Inference only.
class BankedAdapter final : public LinearAdapter {
 public:
  BankedAdapter(const AdapterBank& bank, int64_t layer, PartId part)
      : bank_(bank), layer_(layer), part_(part) {}
  void forward(const ParamAccess&, const float* x, float* y, int64_t) const override {
    bank_.apply(layer_, part_, x, y);
  }
  void backward(const ParamAccess&, const float*, const MatmulInput&, float*,
                int64_t) const override;

 private:
  const AdapterBank& bank_;
  int64_t layer_;
  PartId part_;
};

// The adapters of one block's linears, by the part each adapts: the model's own LoRA adapters,
// which share `buffers`, or those of a bank of served adapters.
class BlockAdapters {
 public:
  BlockAdapters(const kernels::Context& ctx, const ModelLayout& layout, int64_t layer,
                Collectives* tp_group, MatmulFormat format, LoraBuffers buffers,
                const AdapterBank* bank);
  // Null where the part has no adapter.
  const LinearAdapter* operator[](PartId id) const { return adapters_[int(id)].get(); }

 private:
  std::array<std::unique_ptr<LinearAdapter>, kPartIdCount> adapters_;
};

// Floats per token of each of the adapters' scratch buffers u and du (the widest down-projection),
// and of the input scratch a low precision needs; 0 without adapters.
struct LoraScratch {
  int64_t down = 0, input = 0;
};
LoraScratch lora_scratch(const BlockSpec& spec);

}  // namespace tessera::model
