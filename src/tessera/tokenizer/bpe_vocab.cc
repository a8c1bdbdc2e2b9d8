#include "tessera/tokenizer/bpe_vocab.h"

#include <string_view>
#include <unordered_map>

namespace tessera::tokenizer {

DocumentTokens document_tokens(const BpeVocab& vocab) {
  DocumentTokens bounds;
  for (const auto& [text, id] : vocab.special_tokens) {
    if (text == kEndOfText || text == kLlama3EndOfText) {
      bounds.eos = SpecialToken{text, id};
      if (!bounds.bos) bounds.bos = bounds.eos;
    }
    if (text == "<|begin_of_text|>") bounds.bos = SpecialToken{text, id};
  }
  return bounds;
}

std::vector<BpeMerge> merges_from_ranks(const std::vector<std::string>& tokens) {
  std::unordered_map<std::string_view, int32_t> ids;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id].empty()) ids.emplace(tokens[id], int32_t(id));
  }
  std::vector<BpeMerge> merges;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view token = tokens[id];
    for (size_t cut = 1; cut < token.size(); ++cut) {
      auto left = ids.find(token.substr(0, cut));
      auto right = ids.find(token.substr(cut));
      if (left != ids.end() && right != ids.end()) {
        merges.push_back({left->second, right->second, int32_t(id), int32_t(id)});
      }
    }
  }
  return merges;
}

}  // namespace tessera::tokenizer
