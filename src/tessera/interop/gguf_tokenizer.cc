#include "tessera/interop/gguf_tokenizer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"
#include "tessera/tokenizer/gpt2_vocab_files.h"

namespace tessera::interop {
namespace {

// llama.cpp's token types.
constexpr int32_t kNormal = 1;
constexpr int32_t kControl = 3;
constexpr int32_t kUserDefined = 4;
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

std::optional<tokenizer::BpeVocab> import_gguf_vocab(const GgufFile& f) {
  if (!f.has("tokenizer.ggml.model")) return std::nullopt;
  const std::string& kind = f.text("tokenizer.ggml.model");
  check(kind == "gpt2",
        "{}: tokenizer.ggml.model is '{}'; Tessera reads byte-level BPE vocabularies ('gpt2'); "
        "give the model's tokenizer folder with --tokenizer instead",
        f.source(), kind);
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.text("tokenizer.ggml.pre") : "gpt-2";
  check(pre == "gpt-2" || pre == "default" || pre == "llama-bpe",
        "{}: tokenizer.ggml.pre is '{}'; Tessera splits text as GPT-2 ('gpt-2') and Llama 3 "
        "('llama-bpe') do",
        f.source(), pre);
  const std::vector<std::string>& tokens = f.texts("tokenizer.ggml.tokens");
  const std::vector<int64_t> none;
  const std::vector<int64_t>& types =
      f.has("tokenizer.ggml.token_type") ? f.integers("tokenizer.ggml.token_type") : none;
  check(types.empty() || types.size() == tokens.size(),
        "{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.source(), types.size(),
        tokens.size());
  nlohmann::json encoder = nlohmann::json::object();
  std::set<std::string> special;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = types.empty() ? kNormal : types[id];
    if (type == kControl || type == kUserDefined) special.insert(tokens[id]);
    if (type == kNormal || type == kControl || type == kUserDefined) {
      check(!encoder.contains(tokens[id]), "{}: token '{}' appears twice", f.source(),
            tokens[id].substr(0, 40));
      encoder[tokens[id]] = int64_t(id);
    }
  }
  tokenizer::Gpt2VocabBuilder builder(encoder, f.source() + " tokenizer.ggml.tokens", special);
  if (f.has("tokenizer.ggml.merges")) {
    const std::vector<std::string>& merges = f.texts("tokenizer.ggml.merges");
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t space = merges[i].find(' ');
      const std::string where = fmt::format("{} tokenizer.ggml.merges[{}]", f.source(), i);
      check(space != std::string::npos, "{}: '{}' is not two tokens apart", where,
            merges[i].substr(0, 40));
      builder.add_merge(std::string_view(merges[i]).substr(0, space),
                        std::string_view(merges[i]).substr(space + 1), where);
    }
  }
  tokenizer::BpeVocab vocab = builder.take();
  vocab.pattern =
      pre == "llama-bpe" ? tokenizer::SplitPattern::kLlama3 : tokenizer::SplitPattern::kGpt2;
  return vocab;
}

nlohmann::json gguf_tokenizer_config(const GgufFile& f) {
  nlohmann::json config = nlohmann::json::object();
  if (f.has("tokenizer.chat_template")) config["chat_template"] = f.text("tokenizer.chat_template");
  if (!f.has("tokenizer.ggml.tokens")) return config;
  const std::vector<std::string>& tokens = f.texts("tokenizer.ggml.tokens");
  for (const char* name : {"bos", "eos"}) {
    const std::string key = fmt::format("tokenizer.ggml.{}_token_id", name);
    if (!f.has(key)) continue;
    const int64_t id = f.integer(key);
    check(id >= 0 && id < int64_t(tokens.size()), "{}: {} is {}, outside the {} tokens", f.source(),
          key, id, tokens.size());
    config[fmt::format("{}_token", name)] = tokens[size_t(id)];
  }
  return config;
}

}  // namespace tessera::interop
