#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/paged_attention.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/block.h"
#include "tessera/model/collectives.h"
#include "tessera/model/embedding.h"
#include "tessera/model/execution.h"
#include "tessera/model/head.h"
#include "tessera/model/int8_weights.h"
#include "tessera/model/model_config.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/moe_layer.h"
#include "tessera/model/parameter_store.h"
#include "tessera/model/tensor_parallel.h"

namespace tessera::model {

struct ModelOptions {
  // Where the model computes and keeps its activations and gradients (and reads a copy of its
  // parameters); it must outlive the model. Null: the CPU. Buffers the model returns (logits,
  // stage outputs, gradients) are on that device.
  const kernels::Context* context = nullptr;
  Precision precision = Precision::kF32;
  WeightFormat weights = WeightFormat::kDense;
  Recompute recompute = Recompute::kNone;
  // Where parameters and gradients live; null keeps them all in the model, in f32.
  ParameterStore* store = nullptr;
  // How the model is split over ranks (tensor, sequence and expert parallelism, and the blocks
  // of a pipeline stage); null: all of it on one rank.
  const ModelParallel* parallel = nullptr;
  // Micro-batches a pipeline stage holds between their forward and backward (stage_forward's
  // slots).
  int64_t in_flight = 1;
  // Whether stage_backward_input and stage_backward_weight may run a slot's backward in two
  // (zero-bubble schedules): each slot then also holds what its weight gradients need.
  bool split_backward = false;
};

// Keys and values of earlier tokens, one k and one v pointer per layer, each laid out as
// kernels::PagedKv describes. The serving layer's cache owns the storage and the block tables.
struct KvCacheView {
  std::span<float*const> k, v;
  int64_t block_tokens = 0;
};

// One sequence's next n tokens for Transformer::decode, at positions [start, start + n): start
// is how many of its tokens the cache already holds, and block_table lists the blocks that hold
// positions [0, start + n), the new ones included.
struct DecodeChunk {
  const int32_t* tokens = nullptr;
  int64_t n = 0, start = 0;
  std::span<const int32_t> block_table;
};

// A decoder-only transformer: GPT-2 or Llama blocks, each MLP dense or a mixture of experts,
// composed of the layers of block.h over its blocks, with the embedding, head and loss around
// them. Split over ranks it holds its tensor- and expert-parallel slices (ModelParallel), and as
// a pipeline stage only its range of blocks, the embedding on the first stage and the head and
// loss on the last.
// Parameters, gradients and every activation backward needs are allocated once, at
// construction, for batches up to max_batch x max_seq; forward and backward never allocate.
class Transformer {
 public:
  Transformer(const ModelConfig& config, int64_t max_batch, int64_t max_seq, bool training,
              const ModelOptions& options = {});
  ~Transformer();

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const ParameterLayout& layout() const { return layout_.params; }
  const ModelLayout& model_layout() const { return layout_; }
  int64_t num_parameters() const;  // of the whole model: the tied embedding once, no padding
  // Writable parameters, and the gradients, of a model that keeps them itself (no store). Copies
  // in other formats (bf16, int8) are refreshed from them when next used.
  std::span<float> params();
  std::span<float> grads();

  // See initial_parameters; only for a model that keeps its parameters itself.
  void init_weights(uint64_t seed);

  // Runs the model over inputs[B,T]. With targets, returns the mean cross-entropy; without,
  // returns 0 and leaves the logits readable. A pipeline stage runs its part in slot 0: the
  // first reads the tokens, the others stage_input(0); all but the last return 0 and leave their
  // output in stage_output().
  float forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);
  // One training micro-step: returns the mean cross-entropy and accumulates
  // d(loss_scale * (mean cross-entropy + MoE auxiliary loss))/d(params) into the gradients. The
  // loss gradient is fused into the softmax: the [B*T, vocab] logits are overwritten by it.
  float forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                         float loss_scale);
  // Zeroes the gradients of a model that keeps them itself.
  void zero_grad();

  // A pipeline stage (or a whole model) runs a micro-batch's forward and its backward apart,
  // with up to in_flight micro-batches between them, each in a slot of its own activations.
  // The first stage reads tokens; the others read stage_input(slot), which the caller fills with
  // the previous stage's output first. The last stage returns the mean cross-entropy (others 0)
  // and takes its head's gradients, scaled by loss_scale, at once, so that no slot keeps logits.
  float* stage_input(int64_t slot);
  float stage_forward(int64_t slot, const int32_t* inputs, const int32_t* targets, int64_t B,
                      int64_t T, float loss_scale);
  // [R, C]: the last forward's output, for the next stage; overwritten by the next forward.
  const float* stage_output() const;
  // R x C: the floats of stage_input, stage_output and stage_gradient for a B x T micro-batch
  // (R = this rank's rows of the residual stream).
  int64_t stage_floats(int64_t B, int64_t T) const { return tp_.rows(B * T) * config_.d_model; }
  // [R, C]: where the caller writes d(loss)/d(output) before a backward on a stage without the
  // head, and where the backward of a stage without the embedding leaves d(loss)/d(input).
  float* stage_gradient() { return acts_.d_res; }
  // Accumulates the gradients of the micro-batch in `slot` (inputs: its tokens, on the first
  // stage) and frees the slot.
  void stage_backward(int64_t slot, const int32_t* inputs);
  // The same backward in two halves, for a model built with split_backward. The input half leaves
  // stage_gradient() for the previous stage and accumulates every gradient but the weights of the
  // attention and dense-MLP linears (norms, biases, the embedding, a mixture of experts); the
  // weight half, later, accumulates those and frees the slot.
  void stage_backward_input(int64_t slot, const int32_t* inputs);
  void stage_backward_weight(int64_t slot);
  // [B*T, this rank's vocabulary slice] (the whole vocabulary on one rank).
  const float* logits() const { return acts_.logits; }
  // Logits of the next token after tokens[0..T), for sampling (one rank).
  const float* next_token_logits(const int32_t* tokens, int64_t T);
  // Incremental inference over a paged key/value cache, for a model built for inference: runs
  // each sequence's chunk (a prompt, or a piece of one, then one token at a time), writes the
  // chunk's keys and values into the cache, and returns the next-token logits after each chunk's
  // last token, [chunks.size(), layout's vocab.local]: the whole vocabulary on one rank, this
  // rank's slice of it over tensor-parallel ranks, which all run the same chunks over a cache of
  // their own key/value heads (kv_rows of the model's layout). A pipeline stage without the
  // embedding reads its input rows, [N, C] for the chunks' N tokens, from stage_input(0); one
  // without the head returns its output rows, [N, C], for the next stage. The chunks hold at most
  // max_batch x max_seq tokens in all, and no position reaches model.max_seq.
  const float* decode(const KvCacheView& cache, std::span<const DecodeChunk> chunks);
  // Throws what decode would throw for these chunks before it runs anything (so that ranks that
  // exchange rows around a decode all fail before the first exchange); returns their tokens.
  int64_t check_decode(const KvCacheView& cache, std::span<const DecodeChunk> chunks) const;

  // Wall seconds this model has spent in forwards (up to the loss) and in backwards (from the
  // loss's gradient on), and of them inside its collectives, since it was built: a step's
  // breakdown takes their differences.
  struct PhaseSeconds {
    double forward = 0, backward = 0, forward_communication = 0, backward_communication = 0;
  };
  const PhaseSeconds& phase_seconds() const { return phases_; }

  // MoE: the auxiliary load-balancing loss of the last forward (summed over blocks), and the
  // tokens each expert of block l took.
  double aux_loss() const { return aux_loss_; }
  std::span<const int64_t> expert_tokens(int64_t layer) const;
  int64_t dropped_assignments() const { return dropped_; }

  // Activation bytes each block keeps for backward, the bytes shared by all blocks as working
  // space, and every activation byte the model holds (activation_bytes()).
  int64_t saved_activation_bytes_per_layer() const { return activation_bytes_.saved_per_layer; }
  int64_t working_activation_bytes() const { return activation_bytes_.working; }
  int64_t activation_bytes_total() const { return activation_bytes_.total; }

  // Bytes of weights the matmuls read for each token: every linear layer's matrices and the head,
  // in the format they are multiplied in (int8 scales included; for MoE, the router and the
  // experts one token takes, in f32). Embedding rows, norms and biases are not counted.
  int64_t matmul_weight_bytes_per_token() const;
  // Bytes of parameters a model that keeps them itself holds: the f32 values and their bf16, f16
  // or int8 copy; gradients excluded.
  int64_t resident_parameter_bytes() const;

 private:
  class Access;

  void check_tokens(const int32_t* tokens, int64_t n) const;
  // Host tokens where the kernels read them: on another device, copied to device_tokens_ + at.
  const int32_t* tokens_for_kernels(const int32_t* tokens, int64_t n, int64_t at);
  ResidentParameters& resident();
  void acquire(int64_t unit);
  void release(int64_t unit);
  void acquire_block(int64_t l);
  void release_block(int64_t l);
  const float* input_of(int64_t l) const;
  template <typename Body>
  void for_each_block(Body&& body);
  void check_batch(int64_t B, int64_t T) const;
  enum class Phase { kIdle, kForward, kBackward };
  // Ends the phase under way, counting its time, and starts `next`.
  void enter(Phase next);
  double communication_seconds() const;
  void select_slot(int64_t slot);
  void run_blocks(const int32_t* inputs, int64_t B, int64_t T);
  float head_loss_and_backward(const int32_t* targets, int64_t N, float loss_scale);
  void backward_slot(int64_t slot, const int32_t* inputs, bool hold_weights);
  template <typename Body>
  void with_block_gradients(int64_t l, Body&& body);
  void backward_blocks(const int32_t* inputs, int64_t B, int64_t T, bool hold_weights);

  ModelConfig config_;
  ModelOptions options_;
  const kernels::Context& ctx_;
  SingleRank alone_;  // before parallel_, which may point at it
  ModelParallel parallel_;
  int64_t max_batch_, max_seq_;
  bool training_;
  MatmulFormat format_;
  ModelLayout layout_;
  TensorParallel tp_;
  kernels::DeviceArray<std::byte> device_activations_;  // the arena's memory on another device
  Arena arena_;
  kernels::DeviceArray<int32_t> device_tokens_;  // [2 N]: inputs (or decode chunks), targets
  std::vector<float> host_losses_;               // [N], where another device's losses are summed
  ModelActivations acts_;
  ActivationBytes activation_bytes_;
  std::unique_ptr<ResidentParameters> resident_;
  std::unique_ptr<Int8Weights> int8_;  // WeightFormat::kInt8 only
  ParameterStore* store_;
  std::vector<ParameterStore::Weights> weights_;  // of acquired units
  std::vector<float*> unit_grads_;                // of units in backward
  std::unique_ptr<Access> access_;
  std::vector<std::unique_ptr<MoeLayer<float>>> moe_;
  std::unique_ptr<Embedding> embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<Head> head_;
  std::vector<std::vector<int64_t>> expert_tokens_;
  double aux_loss_ = 0;
  int64_t dropped_ = 0;
  float loss_scale_ = 1;  // of the backward in progress, for the MoE auxiliary loss
  // What stage_forward left in each slot for its backward.
  struct SlotState {
    int64_t B = 0, T = 0;
    float loss_scale = 1;
  };
  std::vector<SlotState> slots_;
  PhaseSeconds phases_;
  Phase phase_ = Phase::kIdle;
  std::chrono::steady_clock::time_point phase_start_;
  double phase_communication_start_ = 0;
  int64_t slot_ = 0;                               // the slot the blocks and input_of point at
  std::vector<kernels::PagedChunk> paged_chunks_;  // of the decode call in progress
  std::vector<int32_t> decode_tokens_;             // its chunks' tokens, one after another
  int scratch_threads_ = 0;
};

}  // namespace tessera::model
