// The model layer: GPT-2, Llama and Mixture-of-Experts transformers with explicit forward and
// backward passes over one arena. It uses the kernels and never knows about training loops, data
// or checkpoints on disk.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/core/enum_names.h"
#include "tessera/kernels/rope.h"

namespace tessera::model {

// GPT-2: LayerNorm with bias, learned positions, GELU MLP, tied embeddings, biases everywhere.
// Llama: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases.
enum class Architecture { kGpt2, kLlama };
inline constexpr EnumName<Architecture> kArchitectureNames[] = {{Architecture::kGpt2, "gpt2"},
                                                                {Architecture::kLlama, "llama"}};
constexpr const auto& enum_names(Architecture) { return kArchitectureNames; }

struct MoeConfig {
  int64_t n_experts = 0;  // 0: every block has a dense MLP
  int64_t top_k = 2;
  // Shared experts every token passes through; they are merged into one SwiGLU MLP of
  // n_shared * ffn_hidden channels, as DeepSeek-MoE does.
  int64_t n_shared = 0;
  // 0 is dropless. Otherwise each expert takes at most ceil(capacity_factor * tokens * top_k /
  // n_experts) tokens, first come first served in token order; the rest are dropped for it.
  double capacity_factor = 0.0;
  double aux_loss_coef = 0.01;  // Switch Transformer load-balancing loss weight

  bool operator==(const MoeConfig&) const = default;
};

// How a LoRA run holds its frozen model's block matrices (train.lora_quantize): none, as the
// run's precision says; q8_0, in GGUF's 8-bit blocks (core/q8_0.h), each block's matrices widened
// into working space while the step uses them, as QLoRA does with its 4-bit blocks.
enum class FrozenWeights { kPrecision, kQ8_0 };
inline constexpr EnumName<FrozenWeights> kFrozenWeightsNames[] = {
    {FrozenWeights::kPrecision, "none"}, {FrozenWeights::kQ8_0, "q8_0"}};
constexpr const auto& enum_names(FrozenWeights) { return kFrozenWeightsNames; }

// LoRA (the train.lora_* keys): each targeted linear gains the low-rank update
// y += alpha / rank * (x A^T) B^T, A [rank, in] and B [out, rank], one pair per fused piece (q, k
// and v; gate and up) as PEFT keeps them. The adapters are the only parameters trained; the base
// model is frozen. rank 0: no adapters.
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 16;
  // Comma-separated: qkv, attn_out, mlp_in, mlp_out, or attention (both attention linears) and
  // mlp (both MLP linears).
  std::string targets = "attention,mlp";
  // The probability that an input value of an adapter is zeroed in training (the rest scaled by
  // 1 / (1 - dropout)), as PEFT's lora_dropout; the adapted linear's own product sees it whole.
  double dropout = 0;
  FrozenWeights quantize = FrozenWeights::kPrecision;

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / double(rank); }
  bool operator==(const LoraConfig&) const = default;
};

struct ModelConfig {
  Architecture arch = Architecture::kGpt2;
  int64_t vocab_size = 256;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t d_model = 256;
  int64_t max_seq = 256;          // the longest context (GPT-2: the position table's size)
  int64_t n_kv_head = 0;          // 0: n_head (multi-head attention)
  int64_t ffn_hidden = 0;         // 0: 4 * d_model for GPT-2, Llama's rounded 8/3 * d_model
  int64_t head_dim_override = 0;  // 0: d_model / n_head
  // PaLM's parallel block: attention and MLP read the same normed input and add to the residual
  // together (one norm per block). For planning; the engine does not train it.
  bool parallel_block = false;
  double rope_theta = 1e4;  // Llama only
  // Hugging Face's rope_scaling (model.rope_scaling*, kernels/rope.h): the rotary frequencies
  // stretched for contexts past the one the model was trained at (Llama only).
  kernels::RopeScaling rope_scaling;
  double norm_eps = 1e-5;
  // Qwen 3's QK-norm: each query and key head is RMS-normalised over its channels before RoPE,
  // with one gain per channel for all query heads and one for all key heads (Llama only).
  bool qk_norm = false;
  bool tie_embeddings = true;  // the output projection reuses the token embedding
  MoeConfig moe;
  LoraConfig lora;  // a run's adapters, not the model's: never read from or written to its files

  bool operator==(const ModelConfig&) const = default;

  kernels::Rope rope() const { return {rope_theta, rope_scaling}; }
  int64_t head_dim() const { return head_dim_override > 0 ? head_dim_override : d_model / n_head; }
  int64_t kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }
  // Width of the fused q, k, v projection: query heads, then key heads, then value heads.
  int64_t qkv_width() const { return (n_head + 2 * kv_heads()) * head_dim(); }
  int64_t ffn() const;
  // Width of the MLP's first matmul: GPT-2's fc, or Llama's fused gate and up projections.
  int64_t mlp_hidden_width() const { return arch == Architecture::kGpt2 ? ffn() : 2 * ffn(); }
  bool is_moe() const { return moe.n_experts > 0; }
};

// Throws tessera::Error naming the offending model.* key.
void validate(const ModelConfig& config);
// Throws unless the engine can run the shape: some describable shapes are for planning only.
void check_runnable(const ModelConfig& config);

}  // namespace tessera::model
