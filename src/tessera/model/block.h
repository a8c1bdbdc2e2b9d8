#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/kernels/context.h"
#include "tessera/kernels/paged_attention.h"
#include "tessera/model/attention.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/collectives.h"
#include "tessera/model/execution.h"
#include "tessera/model/layer.h"
#include "tessera/model/lora_adapter.h"
#include "tessera/model/mlp.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/moe_layer.h"
#include "tessera/model/norm.h"
#include "tessera/model/tensor_parallel.h"

namespace tessera::model {

// A block's widths on this rank: the tensor-parallel slice of its heads and MLP.
struct BlockWidths {
  int64_t C, heads, kv_heads, head_dim, qkv, attention_out, ffn, mlp_in;

  BlockWidths(const BlockSpec& spec, const Sharding& sharding);
};

// What one block keeps between its forward and its backward: the tensors its parts save
// (block_spec's SavedActivation, over N tokens of a micro-batch, R of them this rank's rows of
// the residual stream), f32 and, for a matmul's input in low precision, the matmul format; and the
// block's output. A model built to split its backward (zero-bubble schedules) also holds, per
// block, what its linears keep until their weight gradients (a mixture of experts takes its own
// at once).
struct BlockActivations {
  std::array<MatmulInput, kActivationIdCount> saved{};
  float* res_out = nullptr;
  const int32_t* doc_start = nullptr;  // the slot's document starts, with packed documents
  AttentionHeld attention_held;
  MlpHeld mlp_held;

  MatmulInput& operator[](ActivationId id) { return saved[int(id)]; }
  const MatmulInput& operator[](ActivationId id) const { return saved[int(id)]; }
};

// Floats per row of `width` on a rank with these widths.
int64_t floats_per_row(const Width& width, const BlockWidths& w);

// Working space every block shares (one set per model).
struct BlockWorkspace {
  // The tensor-parallel linears' scratch; its d_input ([N, max(C, heads * head_dim)]) also holds
  // the attention output's gradient, and its shared_rows the gradients of shared kv heads
  // ([qkv + 2 kv_heads head_dim, C]).
  ParallelScratch parallel;
  float *d_qkv = nullptr, *d_hidden = nullptr;
  float* attention_scratch = nullptr;
  SequenceBuffers sequences;  // context parallelism's
  float* decode_scratch = nullptr;
  uint16_t* dy_low = nullptr;
  float* int8_scratch = nullptr;
  // LoRA adapters' scratch, and their input widened from a low precision or with dropout applied
  // (lora_scratch); the dropout key of the pass in progress (0: none), which the model sets.
  float *lora_u = nullptr, *lora_du = nullptr, *lora_x = nullptr;
  const uint64_t* lora_dropout_key = nullptr;
};

// One transformer block on this rank: its attention norm, attention, MLP norm, and dense MLP or
// mixture of experts, with tensor (and sequence) parallelism applied around its linears by the
// layers themselves. It owns them and the views of its saved activations. Blocks hold references
// into themselves: they are built in place and never moved.
class Block {
 public:
  // max_context: the longest sequence decode attends over (model.max_seq).
  Block(const kernels::Context& ctx, const ModelSpec& spec, const ModelLayout& layout,
        int64_t layer, const ModelParallel& parallel, MatmulFormat format,
        const BlockWorkspace& workspace, const BlockActivations& activations, MoeLayer<float>* moe,
        int64_t max_context, const AdapterBank* served_adapters = nullptr);
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // x: this rank's rows of the block input; writes activations().res_out. Returns the MoE
  // auxiliary loss (0 for a dense block).
  double forward(const ParamAccess& p, const float* x, int64_t B, int64_t T);
  // Inference over a paged cache holding this rank's key/value heads; every tensor-parallel rank
  // runs all N rows (no sequence parallelism).
  void decode(const ParamAccess& p, const float* x, const kernels::PagedKv& kv,
              std::span<const kernels::PagedChunk> chunks, int64_t N);
  // d_res holds dL/d(output rows) on entry and dL/d(input rows) on exit. aux_scale is
  // dL/d(MoE auxiliary loss). With hold_weights, the linears' weight gradients are left for
  // weight_backward, their inputs and output gradients held in activations().
  void backward(const ParamAccess& p, const float* x, float* d_res, int64_t B, int64_t T,
                Recompute recompute, float aux_scale, bool hold_weights = false);
  void weight_backward(const ParamAccess& p, int64_t N);

  const BlockActivations& activations() const { return a_; }
  MoeLayer<float>* moe() const { return moe_; }
  // Points the block at another micro-batch's saved activations (a pipeline stage's slot).
  void bind(const BlockActivations& activations, MoeLayer<float>* moe);

 private:
  const kernels::Context& ctx_;
  void recompute_selected(const ParamAccess& p, const float* x, int64_t N);
  AttentionActivations attention_activations() const {
    return {a_[ActivationId::kQkv].f32,         a_[ActivationId::kAttentionLse].f32,
            a_[ActivationId::kAttentionOutput], a_[ActivationId::kQkNormInput].f32,
            a_[ActivationId::kQkNormRstd].f32,  a_.doc_start};
  }
  MlpActivations mlp_activations() const {
    return {a_[ActivationId::kMlpHidden].f32, a_[ActivationId::kMlpActivation]};
  }
  MoeWeights<float> moe_weights(const ParamAccess& p) const;
  MoeGrads<float> moe_grads(const ParamAccess& p) const;
  double moe_forward(const ParamAccess& p, int64_t N);
  const float* moe_backward(const ParamAccess& p, const float* d_res, int64_t N, float aux_scale);

  BlockWidths w_;
  PartTable parts_;
  AdapterTable expert_adapters_;  // the offsets of the experts' LoRA adapters, if any
  TensorParallel tp_;             // before the layers, which hold references to it
  MatmulFormat format_;
  BlockWorkspace ws_;
  BlockActivations a_;
  Norm ln1_, ln2_;
  BlockAdapters adapters_;  // before the linears they adapt
  Attention attention_;
  std::unique_ptr<Mlp> mlp_;
  MoeLayer<float>* moe_;
};

}  // namespace tessera::model
