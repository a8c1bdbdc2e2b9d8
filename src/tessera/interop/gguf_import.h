// A model and its tokenizer read back from GGUF as llama.cpp's "gpt2", "llama" and "qwen3"
// architectures store them (the inverse of gguf_export.h): hyperparameters from <arch>.* keys,
// tensors by ggml's names (Llama's q and k rows back from interleaved pairs into rotate-half
// order, every type of ggml_types.h decoded to f32). Its vocabulary: gguf_tokenizer.h.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/interop/gguf_reader.h"
#include "tessera/model/model_config.h"

namespace tessera::interop {

struct GgufImport {
  model::ModelConfig config;
  std::string architecture;   // llama.cpp's: "gpt2", "llama", "qwen3"
  std::vector<float> params;  // the flat buffer model_layout(config) describes
  // The file's tensor types and how many tensors have each, e.g. "Q4_K x 97, Q6_K x 13, F32 x 45".
  std::string types;
};

// Reads the model; every tensor of the file must be one of its parameters (or rope_freqs.weight,
// the frequencies of Llama 3 RoPE scaling, which must be that scaling's). Errors name the file and
// the key or tensor at fault: an architecture Tessera does not run, a mixture of experts, a
// tensor missing or of the wrong shape.
GgufImport import_gguf(const GgufFile& file);

}  // namespace tessera::interop
