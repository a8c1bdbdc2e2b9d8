// The one description of what a model is made of: the parameterised parts of its embedding, of
// each block and of its head, in parameter order, each with its shape, how tensor and expert
// parallelism split it, how it is initialised, how Hugging Face and GGUF files name it, and the
// elementwise work of its norms. The parameter layout, the activation-memory formula, the
// planner's parameter, FLOP and elementwise split, calibration's GEMM list and the Hugging Face
// and GGUF tensor lists are all derived from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// How a parameter is split over the tensor-parallel ranks (and, for experts, the expert-parallel
// ranks). Column: the matrix's output rows (and its bias) are split, so each rank computes a
// slice of the outputs. Row: the matrix's input columns are split, so each rank computes a
// partial sum of the full output, which an all-reduce (or reduce-scatter) completes; its bias is
// replicated. Vocab: the rows of an embedding or head matrix, padded so tp divides them. Expert:
// a stack of expert matrices split over the ep ranks by whole experts, replicated over tp.
enum class Role { kReplicated, kColumn, kRow, kVocab, kExpert };

enum class PartKind { kNorm, kLinear, kEmbedding };

// Every parameterised part a model can have, so code names a part without comparing strings.
enum class PartId {
  kTokenEmbedding,
  kPositionEmbedding,
  kAttentionNorm,
  kQkv,
  kQueryNorm,  // QK-norm's gains, each over one head's channels
  kKeyNorm,
  kAttentionOut,
  kMlpNorm,
  kMlpIn,   // GPT-2's fc, Llama's fused gate and up
  kMlpOut,  // GPT-2's fcproj, Llama's down
  kRouter,
  kExpertsIn,   // each expert's fused gate and up, [E, 2F, C]
  kExpertsOut,  // each expert's down, [E, C, F]
  kSharedIn,    // the merged shared experts' gate and up
  kSharedOut,
  kFinalNorm,
  kHead,
};

enum class Init {
  kNormal,    // N(0, 0.02)
  kResidual,  // N(0, 0.02 / sqrt(2 n_layer)): the projections that write into the residual stream
  kOnes,      // norm gains
  kZeros,     // LoRA's B: an adapter starts as no change
  // LoRA's A: N(0, 1 / (3 in)), the variance of PEFT's default Kaiming-uniform draw
  kLoraDown,
};

// Which matrix of a LoRA adapter a part is: A [rank, in] multiplies the input down to the rank, B
// [out, rank] up to the output; none for the model's own parts.
enum class LoraMatrix { kNone, kA, kB };

// How another format stores rows of a part, per parameter (".weight", and ".bias" when it has
// one). A part is one slice of all its rows, or several consecutive slices (Llama's q, k and v of
// the fused qkv; gate and up); an expert stack repeats its slices for every expert, "{e}" in a
// name standing for the expert's number.
struct ExternalSlice {
  std::string hf;    // the Hugging Face name, after the block's prefix for a block's part
  std::string gguf;  // the GGUF name, after the block's prefix; empty: GGUF has none
  int64_t rows = 0;  // of the part's out rows (per expert); 0: all of them
  // GGUF keeps each head's rows of Llama's q and k in interleaved pairs (llama.cpp's permute of
  // rotate-half); the heads this slice holds, or 0.
  int64_t gguf_rope_heads = 0;
};

// What a block keeps from its forward for its backward, by name, so that the layers and the
// allocation agree.
enum class ActivationId {
  kAttentionNormOutput,
  kAttentionNormMean,
  kAttentionNormRstd,
  kQkv,          // after RoPE
  kQkNormInput,  // QK-norm's input: the query and key heads before it
  kQkNormRstd,   // and each head's 1/rms
  kAttentionLse,
  kAttentionOutput,  // the attention's output, before its projection
  kResidualMid,      // the residual stream after attention
  kMlpNormOutput,
  kMlpNormMean,
  kMlpNormRstd,
  kMlpHidden,      // the MLP's first matmul's output
  kMlpActivation,  // the activation's output, before the second matmul
};
inline constexpr int kActivationIdCount = int(ActivationId::kMlpActivation) + 1;

// A row's width in floats, as one tensor-parallel rank holds it: a sum of multiples of the block's
// dimensions on that rank (model_layout's Sharding).
struct Width {
  int64_t model = 0;     // d_model
  int64_t query = 0;     // the rank's query heads x head_dim
  int64_t kv = 0;        // its key/value heads x head_dim
  int64_t heads = 0;     // its query heads
  int64_t kv_heads = 0;  // its key/value heads
  int64_t ffn = 0;       // its share of the MLP's width
  int64_t one = 0;
};

// One tensor a part's layer keeps for its backward (its input or output, or its statistics).
struct SavedActivation {
  ActivationId id;
  Width width;
  // Rows: this rank's rows of the residual stream (a micro-batch's tokens over tp with sequence
  // parallelism), else every token of the micro-batch.
  bool residual_rows = false;
  // A matmul's input, which a low precision also holds in the matmul format (beside an f32 copy
  // the blocks share).
  bool matmul_operand = false;
  // Recomputation at least this deep drops it: backward rebuilds it (selective: norm outputs and
  // the MLP activation; full: everything but the block's input).
  Recompute dropped_by = Recompute::kFull;
};

struct Part {
  PartId id;
  PartKind kind;
  std::string name;  // the parameter name without ".weight" / ".bias": "attn.qkv", "ln1", "wte"
  // A linear part is a matrix [out, in] (a stack of `stack` of them for experts); a norm has a
  // gain of `in` values; an embedding is a table [out rows, in = d_model].
  int64_t in = 0, out = 0, stack = 1;
  bool bias = false;
  Role role = Role::kReplicated;
  // Column parts whose output is several fused tensors (q, k and v heads; gate and up), each
  // split over the tensor-parallel ranks on its own: their widths, summing to `out`. Each is also
  // split in units of `out_unit` rows (a head's width), so a rank never holds half a head.
  std::vector<int64_t> out_parts;
  int64_t out_unit = 1;
  Init init = Init::kNormal;
  // The share of a step's tokens each matrix multiplies (top_k / E for routed experts).
  double token_share = 1.0;
  // A norm normalises this many rows of `in` values per token (one: the residual stream's).
  int64_t rows_per_token = 1;
  std::vector<ExternalSlice> external;
  bool hf_transposed = false;  // Hugging Face stores the matrix as [in, out] (GPT-2's Conv1D)
  std::vector<SavedActivation> saves;
  // An adapter's matrix: `id` is then the part it adapts, and A has one block of rank rows per
  // module Hugging Face names in that part (external), so that PEFT's separate q, k and v (gate
  // and up) adapters are each one block of A and the matching rows of B.
  LoraMatrix lora = LoraMatrix::kNone;
};

struct AttentionGeometry {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool rope = false;
  kernels::Rope rope_frequencies;
  double norm_eps = 0;  // QK-norm's, in a block with its parts
};

enum class NormKind { kLayerNorm, kRmsNorm };
enum class Activation { kGelu, kSwiglu };

struct BlockSpec {
  std::vector<Part> parts;  // in parameter order, which is also the order forward uses them
  // LoRA adapters (ModelConfig::lora): A then B of each targeted linear, in parts' order. They sit
  // after every part of the model in the parameter layout, where the trained state begins.
  std::vector<Part> adapters;
  int64_t lora_rank = 0;
  double lora_scale = 0;  // alpha / rank: what each adapter's update is multiplied by
  double lora_dropout = 0;
  FrozenWeights lora_quantize = FrozenWeights::kPrecision;  // how the run holds the frozen model
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  AttentionGeometry attention;
  Activation activation = Activation::kGelu;
  int64_t d_model = 0, ffn = 0;
  std::optional<MoeConfig> moe;

  const Part& part(PartId id) const;
  bool has(PartId id) const;
};

// The whole model: the parts before the blocks (embeddings), the block (the same for every
// layer) and the parts after them (final norm and head). With tied embeddings the head has no
// part of its own: it multiplies by the token embedding.
struct ModelSpec {
  std::vector<Part> embedding;
  BlockSpec block;
  std::vector<Part> head;
  int64_t n_layer = 0, vocab_size = 0;
  bool tied_head = false;
  // Where block l's parts are named, "{}" standing for l; embedding and head parts are named
  // whole. GGUF's llama.cpp reads the head of GPT-2 even when it is tied, under the head's name.
  std::string hf_block_prefix, gguf_block_prefix = "blk.{}.";
  bool gguf_stores_tied_head = false;
  std::string gguf_arch;  // llama.cpp's name of the architecture: "gpt2", "llama", "qwen3"
};

BlockSpec block_spec(const ModelConfig& config);
// The linear parts config.lora.targets names, in the block's order; throws naming
// train.lora_targets for an unknown name or a part the model's block lacks.
std::vector<PartId> lora_target_parts(const ModelConfig& config);
// The rows of an adapter's B (or of the part it adapts) that each piece holds in the whole model.
std::vector<int64_t> lora_piece_rows(const Part& b);
ModelSpec model_spec(const ModelConfig& config);

// The matmul weights one token passes through: in one block (routed experts by their token
// share) and in the head (the tied embedding's matrix when the head has none of its own).
struct MatmulWeights {
  double block = 0, head = 0;
  // Per block, of LoRA adapters: their A and B matrices, and the A alone (the down-projection that
  // backward computes again); experts' by their token share.
  double adapters = 0, adapters_down = 0;
};
MatmulWeights matmul_weights(const ModelSpec& spec);

}  // namespace tessera::model
