#pragma once

#include <string>
#include <string_view>

#include "tessera/data/bpe_vocab.h"

namespace tessera::data {

// GPT-2's own vocabulary files. encoder.json maps each token to its id, the token's bytes
// written through GPT-2's byte-to-unicode table (every byte a printable character, a space
// as 'Ġ'); its "<|endoftext|>" entry is the special token. vocab.bpe lists the merges in rank
// order, "left right" on each line, after an optional "#version" line. Errors name the file
// and, in vocab.bpe, the line.
BpeVocab parse_gpt2_vocab(std::string_view encoder_json, const std::string& encoder_source,
                          std::string_view vocab_bpe, const std::string& bpe_source);

}  // namespace tessera::data
