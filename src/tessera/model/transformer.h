#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/paged_attention.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/adapter_bank.h"
#include "tessera/model/block.h"
#include "tessera/model/collectives.h"
#include "tessera/model/embedding.h"
#include "tessera/model/execution.h"
#include "tessera/model/head.h"
#include "tessera/model/model_config.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/moe_layer.h"
#include "tessera/model/parameter_store.h"
#include "tessera/model/quantized_weights.h"
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
  // Micro-batches a pipeline stage holds between their forward and backward (the slots of
  // begin_pass).
  int64_t in_flight = 1;
  // Whether backward_blocks may leave weight gradients for weight_backward_blocks (zero-bubble
  // schedules): each slot then also holds what they need.
  bool split_backward = false;
  // Documents packed into rows for training: a token after this one starts a new document, and
  // attention does not look past the start of a token's document. Every pipeline stage then
  // needs the pass's tokens.
  std::optional<int32_t> document_separator;
  // LoRA adapters served per request: forward_paged applies each chunk's (inference, split over
  // ranks as the model is; must outlive the model).
  AdapterBank* adapters = nullptr;
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
  const kernels::Context& context() const { return ctx_; }
  bool training() const { return training_; }
  // The tensor-, sequence- and expert-parallel split the model was built with.
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Tokens the activation buffers take in one pass: max_batch x max_seq.
  int64_t max_tokens() const { return max_batch_ * max_seq_; }
  const ParameterLayout& layout() const { return layout_.params; }
  const ModelLayout& model_layout() const { return layout_; }
  int64_t num_parameters() const;  // of the whole model: the tied embedding once, no padding
  // Writable parameters, and the gradients, of a model that keeps them itself (no store). Copies
  // in other formats (bf16, int8) are refreshed from them when next used.
  std::span<float> params();
  std::span<float> grads();

  // See initial_parameters; only for a model that keeps its parameters itself.
  void init_weights(uint64_t seed);
  // Zeroes the gradients of a model that keeps them itself.
  void zero_grad();

  // Runs the model over inputs[B,T] in slot 0. With targets, returns the mean cross-entropy over
  // the targets trained on (kIgnoredTarget marks the others);
  // without, returns 0 and leaves the logits readable. A pipeline stage runs its part: the first
  // reads the tokens, the others stage_input(0); all but the last return 0 and leave their output
  // in stage_output(). dropout_key: as set_dropout_key gives it to slot 0 (0: none).
  float forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                uint64_t dropout_key = 0);
  // [B*T, this rank's vocabulary slice] (the whole vocabulary on one rank).
  const float* logits() const { return acts_.logits; }
  // Logits of the next token after tokens[0..T), for sampling (one rank).
  const float* next_token_logits(const int32_t* tokens, int64_t T);
  // The forward of a model built for inference over N tokens in paged chunks (each a piece of
  // one sequence, at its positions): reads tokens[N] (the first stage) or stage_input(0) ([N, C],
  // the others), writes each chunk's keys and values into kv[l] for its layers and attends over
  // the positions the cache holds before them. Returns the next-token logits after each chunk's
  // last logit_rows[c] tokens (1 to its n), chunk after chunk, [sum of logit_rows, this rank's
  // vocabulary slice], or on a stage without the head its output rows, [N, C]. With served
  // adapters (ModelOptions::adapters), chunk_adapters gives each chunk's slot, or -1 (or none at
  // all) for the base alone. Checked by runtime::Decoder, which runs it.
  const float* forward_paged(const int32_t* tokens, std::span<const kernels::PagedChunk> chunks,
                             std::span<const int64_t> logit_rows,
                             std::span<const kernels::PagedKv> kv, int64_t N,
                             std::span<const int32_t> chunk_adapters = {});

  // The pieces a runner (runtime/) composes a training pass from, in this order, between
  // begin_pass and end_pass, which bind a slot of activations and hold the parameters the
  // embedding and head share. Up to in_flight micro-batches keep their activations in slots
  // between their forward and backward.
  void begin_pass(int64_t slot);
  void end_pass();
  // The key of the dropout (train.lora_dropout) of the micro-batch in `slot`, set before its
  // forward and kept for its backward: the same key draws the same masks. 0: no dropout.
  void set_dropout_key(int64_t slot, uint64_t key);
  // The embedding (first stage) or stage_input(slot) (the others), every block, and on the last
  // stage the head's norm, over B x T tokens.
  void forward_blocks(const int32_t* inputs, int64_t B, int64_t T);
  // The last stage's logits and mean cross-entropy over the N rows' trained targets, with the
  // gradient of loss_scale x the loss fused into the logits.
  float head_loss(const int32_t* targets, int64_t N, float loss_scale);
  // The head's gradients from the fused logits, and d(loss)/d(head input) in stage_gradient().
  void head_backward(int64_t N);
  // From stage_gradient() = d(loss)/d(last block output): every block's backward, then the
  // embedding's (first stage); stage_gradient() is left holding d(loss)/d(input) on the others.
  // loss_scale scales the MoE auxiliary loss. With hold_weights (a model built with
  // split_backward) the weights of the attention and dense-MLP linears wait for
  // weight_backward_blocks.
  void backward_blocks(const int32_t* inputs, int64_t B, int64_t T, float loss_scale,
                       bool hold_weights);
  void weight_backward_blocks(int64_t N);

  // The rows between pipeline stages, each R x C floats for a B x T micro-batch (R = this
  // rank's rows of the residual stream): a slot's input (stages without the embedding), the
  // output of the pass last run in `slot` (the last block's, overwritten by the next forward in
  // it), and the gradient at the stage's boundary (stage_gradient, shared by the slots).
  float* stage_input(int64_t slot);
  float* stage_output(int64_t slot);
  const float* stage_output() const;  // of the bound slot
  float* stage_gradient() { return acts_.d_res; }
  int64_t stage_floats(int64_t B, int64_t T) const { return tp_.rows(B * T) * config_.d_model; }

  // Throws unless every one of tokens[n] is in the vocabulary.
  void check_tokens(const int32_t* tokens, int64_t n) const;
  // The targets among targets[n] that are trained on (not kIgnoredTarget); throws unless each of
  // them is in the vocabulary.
  int64_t trained_targets(const int32_t* targets, int64_t n) const;
  // Wall seconds spent inside this model's collectives since it was built.
  double communication_seconds() const;

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

  // Host tokens where the kernels read them: on another device, copied to device_tokens_ + at.
  const int32_t* tokens_for_kernels(const int32_t* tokens, int64_t n, int64_t at);
  // Builds the parameters the model keeps itself (without a store) and their quantised copy.
  void hold_parameters();
  ResidentParameters& resident();
  void acquire(int64_t unit);
  void release(int64_t unit);
  void acquire_block(int64_t l);
  void release_block(int64_t l);
  const float* input_of(int64_t l) const;
  void find_documents(const int32_t* inputs, int64_t B, int64_t T);
  // The head's mean cross-entropy over the trained targets of N rows of logits, with the gradient
  // of loss_scale x it fused into them when loss_scale is not 0.
  float mean_loss(const int32_t* targets, int64_t N, float loss_scale);
  template <typename Body>
  void for_each_block(Body&& body);
  void check_batch(int64_t B, int64_t T) const;
  void select_slot(int64_t slot);
  template <typename Body>
  void with_block_gradients(int64_t l, Body&& body);

  ModelConfig config_;
  ModelOptions options_;
  const kernels::Context& ctx_;
  SingleRank alone_;  // before parallel_, which may point at it
  ModelParallel parallel_;
  SequenceSplit split_;  // context parallelism's, of parallel_
  int64_t max_batch_, max_seq_;
  bool training_;
  MatmulFormat format_;
  ModelLayout layout_;
  TensorParallel tp_;
  kernels::DeviceArray<std::byte> device_activations_;  // the arena's memory on another device
  Arena arena_;
  kernels::DeviceArray<int32_t> device_tokens_;  // [2 N]: inputs (or decode chunks), targets
  std::vector<float> host_losses_;               // [N], where another device's losses are summed
  std::vector<int32_t> host_doc_starts_;         // [cp N], the document starts another device reads
  // With context parallelism and packed documents: the ranks' tokens as gathered, then whole
  // sequences, [cp N] each.
  std::vector<float> sequence_tokens_;
  ModelActivations acts_;
  ActivationBytes activation_bytes_;
  std::unique_ptr<ResidentParameters> resident_;
  std::unique_ptr<QuantizedWeights> quantized_;  // quantised weight formats only
  ParameterStore* store_;
  std::vector<ParameterStore::Weights> weights_;  // of acquired units
  std::vector<float*> unit_grads_;                // of units in backward
  std::unique_ptr<Access> access_;
  std::vector<std::unique_ptr<MoeLayer<float>>> moe_;
  std::unique_ptr<Embedding> embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<AdapterBank::Segment> adapter_rows_;  // forward_paged's, for the served adapters
  std::unique_ptr<Head> head_;
  std::vector<std::vector<int64_t>> expert_tokens_;
  double aux_loss_ = 0;
  int64_t dropped_ = 0;
  int64_t slot_ = 0;  // the slot the blocks and input_of point at
  std::vector<uint64_t> slot_dropout_keys_;
  uint64_t dropout_key_ = 0;  // slot_'s, which the blocks' adapters read
  int scratch_threads_ = 0;
};

}  // namespace tessera::model
