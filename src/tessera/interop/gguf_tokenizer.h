// A byte-level BPE vocabulary as llama.cpp reads it from GGUF metadata, written and read back: its
// "gpt2" tokenizer model, tokens and merges spelled through GPT-2's byte-to-unicode table, and
// the pre-tokenizer named by the split it uses ("gpt-2" or Llama 3's "llama-bpe").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessera/interop/gguf_reader.h"
#include "tessera/interop/gguf_writer.h"
#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::interop {

// Sets the tokenizer.ggml.* keys for a model of `n_vocab` ids (at least the vocabulary's); ids
// the vocabulary leaves unused are written as unused "[PAD<id>]" tokens, as llama.cpp's own
// converter pads them.
void add_gguf_tokenizer(const tokenizer::BpeVocab& vocab, int64_t n_vocab, GgufWriter& gguf);

// The byte-level BPE vocabulary of tokenizer.ggml.* (tokenizer.ggml.model "gpt2", with the GPT-2
// or Llama 3 pre-tokenizer); a file without one gives none. Any other tokenizer is an error naming
// it.
std::optional<tokenizer::BpeVocab> import_gguf_vocab(const GgufFile& file);

// What a tokenizer_config.json would say of the file's tokenizer: its chat template
// (tokenizer.chat_template) and the texts of its bos and eos tokens (tokenizer.ggml.bos_token_id,
// eos_token_id), each where the file has it. An id outside the vocabulary is an error naming it.
nlohmann::json gguf_tokenizer_config(const GgufFile& file);

}  // namespace tessera::interop
