#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::tokenizer {

// What the data pipeline and the sampler need from any tokenizer.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Special tokens are never recognised: text that spells one encodes as ordinary characters.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The same, except that each special token spelled in `text` is that token (the longest one
  // where several start at the same place), as a chat template's markers must be.
  std::vector<int32_t> encode_allowing_special(std::string_view text) const;
  // Text -> id, empty for a vocabulary without any.
  virtual const std::vector<std::pair<std::string, int32_t>>& special_tokens() const = 0;
  // Throws an Error naming the first id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The document separator (<|endoftext|>; Llama 3's <|end_of_text|>), where the vocabulary
  // has one.
  virtual std::optional<int32_t> end_of_text() const = 0;
  // "byte", "gpt2-bpe", "hf-bpe", "tessera-bpe": recorded in datasets and checkpoints.
  virtual std::string kind() const = 0;
};

// "byte" gives the byte-level tokenizer; otherwise a tokenizer directory in any supported
// format: Tessera's own (tokenizer.json + ranks.tiktoken), Hugging Face's tokenizer.json (GPT-2
// or Llama 3 style) or vocab.json + merges.txt, GPT-2's encoder.json + vocab.bpe, or one
// .tiktoken rank file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_dir);

// The vocabulary of a byte-level BPE tokenizer directory in any of those formats; "byte" gives
// the 256 single bytes with no merges, which encodes as the byte tokenizer does.
BpeVocab read_bpe_vocab(const std::string& name_or_dir);

// Whether `dir` holds the files of any of those formats (it may still fail to load); a format
// whose files are incomplete, such as vocab.json without merges.txt, is an error.
bool holds_tokenizer(const std::filesystem::path& dir);

// The files of the tokenizer directory `dir` that load_tokenizer reads: what a copy of the
// tokenizer needs (a Hugging Face model folder also holds the weights, which it leaves out).
std::vector<std::filesystem::path> tokenizer_files(const std::filesystem::path& dir);

}  // namespace tessera::tokenizer
