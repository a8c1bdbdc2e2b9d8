// A model's parameters and hyperparameters as llama.cpp's "gpt2", "llama" and "qwen3" (a Llama
// with QK-norm) architectures read them from GGUF: ggml's tensor names, GPT-2's fused qkv, and
// Llama's q and k rows permuted from Tessera's (and Hugging Face's) rotate-half order into the
// interleaved pairs llama.cpp's llama rotates.
#pragma once

#include <span>
#include <string>

#include "tessera/interop/gguf_writer.h"
#include "tessera/model/model_config.h"

namespace tessera::interop {

// The element type of the weights llama.cpp multiplies by; norms, biases and rows too narrow
// for q8_0 or q4_0 blocks are kept wider, as llama.cpp's own converter keeps them. In q4_0 and
// q4_k_m the head (output.weight, or a tied token_embd.weight) is q8_0, as `--quantize q4_0|q4_k`
// serves it int8 (llama-quantize keeps it in Q6_K, which this writer does not encode). q4_k_m
// follows llama-quantize's Q4_K_M otherwise: Q4_K, with attn_v and ffn_down in 8 bits (there Q6_K)
// in the layers it gives more bits; a row that is not whole super-blocks of 256 is q4_0 (there
// Q5_0).
enum class GgufWeights { f32, f16, q8_0, q4_0, q4_k_m };
inline constexpr EnumName<GgufWeights> kGgufWeightsNames[] = {{GgufWeights::f32, "f32"},
                                                              {GgufWeights::f16, "f16"},
                                                              {GgufWeights::q8_0, "q8_0"},
                                                              {GgufWeights::q4_0, "q4_0"},
                                                              {GgufWeights::q4_k_m, "q4_k_m"}};
constexpr const auto& enum_names(GgufWeights) { return kGgufWeightsNames; }

// Adds general.*, <arch>.* and the tensors of `params`, the flat buffer model_layout(config)
// describes; the tensors read `params` when the file is written. Returns llama.cpp's
// architecture name. A Mixture-of-Experts model is refused: it is not exported to GGUF yet.
std::string add_gguf_model(const model::ModelConfig& config, std::span<const float> params,
                           GgufWeights weights, GgufWriter& gguf);

}  // namespace tessera::interop
