#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/model/block.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// How a model is built, as far as its activation memory goes.
struct ActivationOptions {
  int64_t max_batch = 1, max_seq = 1;
  bool training = false;
  Precision precision = Precision::kF32;
  Recompute recompute = Recompute::kNone;
  WeightFormat weights = WeightFormat::kDense;
  bool sequence_parallel = false;
  int threads = 1;  // the OpenMP threads attention keeps scratch for
  // The ranks whose micro-batches a mixture of experts routes together (the data-parallel
  // ranks): a capacity factor bounds what its experts receive by their share of them.
  int64_t batch_ranks = 1;
  // Micro-batches a pipeline stage holds between their forward and backward (its schedule's
  // peak): each has a slot of its own input and saved activations.
  int64_t in_flight = 1;
  // The backward runs as an input-gradient and a later weight-gradient pass (zero-bubble): each
  // slot's blocks also hold their linears' output gradients, and the inputs recomputation drops.
  bool split_backward = false;
  // Documents are packed into rows: each slot keeps the first position of every token's
  // document ([N] ints), which attention reads forward and backward.
  bool document_mask = false;
  // Ranks each sequence is split over (context parallelism): max_seq is one rank's share of it,
  // and attention works over whole sequences of context_ranks x max_seq positions.
  int64_t context_ranks = 1;
};

// Hands out zeroed arena storage and totals the bytes requested (without alignment padding),
// so the model can report exactly what it keeps. On a counting arena the pointers are null.
class Allocator {
 public:
  explicit Allocator(Arena& arena) : arena_(arena) {}
  float* floats(int64_t n);
  uint16_t* halves(int64_t n);
  int32_t* ints(int64_t n);
  int64_t bytes() const { return bytes_; }

 private:
  Arena& arena_;
  int64_t bytes_ = 0;
};

// Every activation buffer of a model, allocated once: what each block keeps for its backward
// (views of one shared working set where it keeps nothing), the working space the blocks share,
// and the embedding's, head's and loss's buffers.
struct ModelActivations {
  std::vector<BlockActivations> blocks;  // slot 0's
  // [in_flight]: each micro-batch slot's blocks and input, slot 0 being `blocks` and `embedded`.
  // A stage without the head sends its last block's output on: every slot writes slot 0's. With
  // the head, that buffer holds the head's input gradient between forward and backward.
  std::vector<std::vector<BlockActivations>> slot_blocks;
  std::vector<float*> slot_inputs;
  // [in_flight] with document_mask, each [context_ranks N]: of the whole sequences' positions
  std::vector<int32_t*> slot_doc_starts;
  BlockWorkspace workspace;
  float* embedded = nullptr;  // [R, C]
  MatmulInput lnf;            // [R, C]
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;
  float* logits = nullptr;  // [N, this rank's vocabulary]
  float* losses = nullptr;  // [N]
  // Vocab-parallel cross-entropy: per-row max, exponential sums and target logits [3N], and
  // every rank's maxima [tp N].
  float *row_stats = nullptr, *rank_maxima = nullptr;
  float* position_grads = nullptr;  // [max_seq, C]: sequence-parallel wpe gradients, before the sum
  float* d_res = nullptr;           // [R, C]
  // Bytes: kept per block, the shared working set, the stage's input (the embedding's output on
  // the first pipeline stage, what the previous stage sent on the others), and everything in all.
  int64_t saved_per_layer = 0, working = 0, stage_input = 0, total = 0;
  // Of saved_per_layer, the f32 state (norm statistics, q/k/v, log-sum-exp, the residual after
  // attention, the MLP's first output), which other systems keep in the compute precision.
  int64_t saved_f32_state_per_layer = 0;
};

ModelActivations allocate_activations(const ModelConfig& config, const ModelLayout& layout,
                                      const ActivationOptions& options, Allocator& allocator);

// The activation bytes a model (or a pipeline stage of one) built this way holds (its arena,
// and what its MoE layers keep), as `tessera plan` counts them: the same allocation, on a
// counting arena. The options' in_flight slots are counted in total; per_micro_batch is what
// each slot past the first adds: its input and its blocks' saved activations (the last block's
// output only where the head reads it).
struct ActivationBytes {
  int64_t saved_per_layer = 0, working = 0, total = 0;
  int64_t per_micro_batch = 0;
  int64_t saved_f32_state_per_layer = 0;  // ModelActivations'
};
ActivationBytes activation_bytes(const ModelConfig& config, const Sharding& sharding,
                                 const ActivationOptions& options);
// The same for a layout already built (model_layout(config, sharding)).
ActivationBytes activation_bytes(const ModelConfig& config, const ModelLayout& layout,
                                 const ActivationOptions& options);

// Bytes one block keeps between its forward and its backward over `tokens` tokens (batch x
// sequence) on one rank: activation_bytes' saved_per_layer. docs/memory.md gives the formula.
int64_t saved_activation_bytes_per_layer(const ModelConfig& config, int64_t tokens, Precision p,
                                         Recompute r);

}  // namespace tessera::model
