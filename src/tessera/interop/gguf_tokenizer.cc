#include "tessera/interop/gguf_tokenizer.h"

#include <fmt/format.h>

#include "tessera/core/error.h"
#include "tessera/tokenizer/gpt2_vocab_files.h"

namespace tessera::interop {
namespace {

// llama.cpp's token types.
constexpr int32_t kNormal = 1;
constexpr int32_t kControl = 3;
constexpr int32_t kUnused = 5;

}  // namespace

void add_gguf_tokenizer(const tokenizer::BpeVocab& vocab, int64_t n_vocab, GgufWriter& gguf) {
  check(n_vocab >= int64_t(vocab.tokens.size()),
        "the tokenizer has {} tokens, more than the model's {} (model.vocab_size)",
        vocab.tokens.size(), n_vocab);
  std::vector<std::string> tokens(static_cast<size_t>(n_vocab));
  std::vector<int32_t> types(static_cast<size_t>(n_vocab), kUnused);
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.tokens[id].empty()) continue;
    tokens[id] = tokenizer::map_gpt2_bytes(vocab.tokens[id]);
    types[id] = kNormal;
  }
  for (const auto& [text, id] : vocab.special_tokens) {
    tokens[size_t(id)] = text;
    types[size_t(id)] = kControl;
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] == kUnused) tokens[id] = fmt::format("[PAD{}]", id);
  }
  std::vector<std::string> merges;
  merges.reserve(vocab.merges.size());
  for (const tokenizer::BpeMerge& m : vocab.merges) {
    merges.push_back(tokenizer::map_gpt2_bytes(vocab.tokens[size_t(m.left)]) + " " +
                     tokenizer::map_gpt2_bytes(vocab.tokens[size_t(m.right)]));
  }
  gguf.set("tokenizer.ggml.model", std::string("gpt2"));
  gguf.set("tokenizer.ggml.pre",
           std::string(vocab.pattern == tokenizer::SplitPattern::kLlama3 ? "llama-bpe" : "gpt-2"));
  gguf.set("tokenizer.ggml.tokens", std::move(tokens));
  gguf.set("tokenizer.ggml.token_type", std::move(types));
  gguf.set("tokenizer.ggml.merges", std::move(merges));
  const tokenizer::DocumentTokens bounds = tokenizer::document_tokens(vocab);
  if (bounds.bos) gguf.set("tokenizer.ggml.bos_token_id", uint32_t(bounds.bos->id));
  if (bounds.eos) gguf.set("tokenizer.ggml.eos_token_id", uint32_t(bounds.eos->id));
  gguf.set("tokenizer.ggml.add_bos_token", false);
}

}  // namespace tessera::interop
