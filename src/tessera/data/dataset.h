#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/mapped_file.h"
#include "tessera/data/dataset_manifest.h"
#include "tessera/data/shard.h"

namespace tessera::data {

// The shards of one split read as a single token stream: a window may run from one shard into
// the next, as the documents in them do.
class TokenStream {
 public:
  // Views over memory the caller keeps alive.
  explicit TokenStream(std::vector<ShardView> shards);
  // Maps and validates dir/<name> for each name; every shard must have vocab_size.
  TokenStream(const std::filesystem::path& dir, const std::vector<std::string>& shard_names,
              int64_t vocab_size);

  int64_t size() const { return offsets_.back(); }
  // Copies tokens [start, start + count), which must lie inside the stream. Never allocates.
  void copy(int64_t start, int64_t count, int32_t* out) const;
  // Sets targets[i] to kIgnoredTarget where token start + i is not trained on (shards with a
  // loss mask); the range must lie inside the stream. Never allocates.
  void mark_untrained(int64_t start, int64_t count, int32_t* targets) const;
  // Whether any shard carries a loss mask (chat data).
  bool has_loss_mask() const;

 private:
  std::vector<MappedFile> files_;
  std::vector<ShardView> shards_;
  std::vector<int64_t> offsets_;  // offsets_[i]: first token of shard i; back(): the total

  // Calls piece(shard, offset in it, tokens, offset in the range) for each shard's part of
  // tokens [start, start + count).
  template <typename Piece>
  void for_each_piece(int64_t start, int64_t count, Piece&& piece) const;
};

struct Dataset {
  std::filesystem::path dir;
  DatasetManifest manifest;
  TokenStream train, val;
};

// Reads dataset.json, then maps and validates every shard (header, checksum, token ids) and that
// the token counts agree with the manifest.
Dataset open_dataset(const std::filesystem::path& dir);

// Shannon entropy (nats) of the stream's unigram distribution: the loss of the best context-free
// model, a floor a training run must beat to have learned anything.
double unigram_entropy(const TokenStream& tokens, int64_t vocab_size);

}  // namespace tessera::data
