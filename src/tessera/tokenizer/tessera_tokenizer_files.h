#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::tokenizer {

// Tessera's own tokenizer directory: tokenizer.json names the format, version and
// pre-tokenisation pattern and lists the special tokens; ranks.tiktoken holds the mergeable
// tokens in tiktoken's rank format.
inline constexpr char kTesseraConfigFile[] = "tokenizer.json";
inline constexpr char kTesseraRanksFile[] = "ranks.tiktoken";

// The special tokens of a tokenizer.json; errors name `source`.
std::vector<std::pair<std::string, int32_t>> parse_tessera_config(std::string_view json,
                                                                  const std::string& source);

// Writes tokenizer.json and ranks.tiktoken into `dir`, creating it if needed.
void save_tessera_tokenizer(const BpeVocab& vocab, const std::filesystem::path& dir);

}  // namespace tessera::tokenizer
