#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::tokenizer {

// Learns a byte-level BPE vocabulary of `vocab_size` ids from texts: the 256 single bytes, then
// one token per merge of the most frequent adjacent pair inside GPT-2 pre-tokens (ties go to
// the smallest pair of ids, so the result is deterministic), then <|endoftext|> as the last id.
// Stops early, with a smaller vocabulary, when no pair is left to merge.
BpeVocab train_bpe(const std::vector<std::string_view>& texts, int64_t vocab_size);

}  // namespace tessera::tokenizer
