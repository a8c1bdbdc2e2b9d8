#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/kernels/paged_attention.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/collectives.h"
#include "tessera/model/execution.h"
#include "tessera/model/layer.h"
#include "tessera/model/linear.h"
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

// What one block keeps between its forward and its backward, as tensors of N tokens (a
// micro-batch) of which R are this rank's rows of the residual stream (R = N / tp with sequence
// parallelism, else N). The norm outputs are matmul inputs of R rows; with sequence parallelism
// they are kept in f32 and gathered (and narrowed) when a matmul needs them.
struct BlockActivations {
  MatmulInput ln1, atty, ln2, act;
  float *ln1_mean, *ln1_rstd, *qkv, *lse, *res_mid, *ln2_mean, *ln2_rstd, *fch, *res_out;
};

// Working space every block shares (one set per model).
struct BlockWorkspace {
  MatmulInput full;  // [N, C]: a gathered column-parallel input (sequence parallelism)
  float* partial;    // [N, C]: row-parallel partial sums (sequence parallelism)
  float* d_rows;     // [R, C]: a completed input gradient (sequence parallelism)
  float *d_c, *d_qkv, *d_hidden;
  float* kv_grads;  // [2 kv_heads head_dim, C] of the whole model: replicated kv heads
  float* attention_scratch;
  float* decode_scratch;
  uint16_t* dy_low;
  float* int8_scratch;
};

// One transformer block on this rank: its norms, attention, MLP or mixture of experts, with
// tensor (and sequence) parallelism applied around its linears. Forward and backward of each
// part sit side by side; the block owns its layers and the views of its saved activations.
class Block {
 public:
  // max_context: the longest sequence decode attends over (model.max_seq).
  Block(const ModelSpec& spec, const ModelLayout& layout, int64_t layer,
        const ModelParallel& parallel, MatmulFormat format, const BlockWorkspace& workspace,
        const BlockActivations& activations, MoeLayer<float>* moe, int64_t max_context);

  // x: this rank's R rows of the block input; writes activations().res_out. Returns the MoE
  // auxiliary loss (0 for a dense block).
  double forward(const ParamAccess& p, const float* x, int64_t B, int64_t T);
  // Inference over a paged cache (one rank): each chunk's queries attend over its cached
  // positions, and their keys and values are written into the cache.
  void decode(const ParamAccess& p, const float* x, const kernels::PagedKv& kv,
              std::span<const kernels::PagedChunk> chunks, int64_t N);
  // d_res holds dL/d(output rows) on entry and dL/d(input rows) on exit. aux_scale is
  // dL/d(MoE auxiliary loss).
  void backward(const ParamAccess& p, const float* x, float* d_res, int64_t B, int64_t T,
                Recompute recompute, float aux_scale);

  const BlockActivations& activations() const { return a_; }
  MoeLayer<float>* moe() const { return moe_; }

 private:
  void attention_forward(const ParamAccess& p, const float* x, int64_t B, int64_t T);
  void finish_forward(const ParamAccess& p, const float* x, int64_t N);
  void recompute_selected(const ParamAccess& p, const float* x, int64_t N);
  MatmulInput column_input(const MatmulInput& rows, int64_t N) const;
  void row_output(const ParamAccess& p, const Linear& linear, const MatmulInput& in,
                  const float* residual, float* out, int64_t N);
  void qkv_backward(const ParamAccess& p, const MatmulInput& x, int64_t N);
  MoeWeights<float> moe_weights(const ParamAccess& p) const;

  const BlockSpec& spec_;
  BlockWidths w_;
  PartTable parts_;
  TensorParallel tp_;
  Collectives* tp_group_;
  MatmulFormat format_;
  BlockWorkspace ws_;
  BlockActivations a_;
  Norm ln1_, ln2_;
  Linear qkv_, proj_;
  std::unique_ptr<Linear> fc_, fcproj_;
  MoeLayer<float>* moe_;
  // GQA with tp above the kv heads: this rank's kv head (shared with tp / kv_heads other ranks),
  // whose weight gradients are summed over the ranks that share it.
  bool kv_replicated_ = false;
  int64_t kv_head_ = 0;
  int64_t max_context_;
  double moe_aux_ = 0;
};

}  // namespace tessera::model
