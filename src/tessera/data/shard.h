// The token shard format. A shard is a little-endian 48-byte header followed by the token ids:
//
//   offset  size  field
//        0     8  magic "TSRASHRD"
//        8     4  format version: 1, or 2 when a loss mask follows the tokens
//       12     4  header size in bytes (48)
//       16     4  bytes per token: 2 (u16, vocabularies up to 65536) or 4 (u32)
//       20     4  CRC-32 of the payload (the tokens, and the loss mask in version 2)
//       24     8  vocabulary size
//       32     8  token count
//       40     4  CRC-32 of header bytes 0..39
//       44     4  reserved, 0
//
// Version 2 (chat data) follows the tokens with a loss mask of ceil(count / 8) bytes: bit i % 8
// (least significant first) of byte i / 8 is set when token i is trained on as a target, and the
// bits past the last token are 0.
//
// Shards are outside input: parse_shard trusts nothing in them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace tessera::data {

inline constexpr char kShardMagic[8] = {'T', 'S', 'R', 'A', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kMaskedShardVersion = 2;
inline constexpr size_t kShardHeaderBytes = 48;

// 2 when every id of a vocabulary of this size fits in a u16, else 4.
int shard_token_bytes(int64_t vocab_size);

// The complete shard file for tokens, with their loss mask (trained[i] != 0: token i is a
// trained target) when `trained` is not empty; throws an Error naming the first id outside
// [0, vocab_size).
std::vector<uint8_t> encode_shard(std::span<const int32_t> tokens, int64_t vocab_size,
                                  std::span<const uint8_t> trained = {});

// encode_shard written to path.
void write_shard(const std::filesystem::path& path, std::span<const int32_t> tokens,
                 int64_t vocab_size, std::span<const uint8_t> trained = {});

// A validated view of a shard's tokens; it does not own the bytes.
class ShardView {
 public:
  int64_t size() const { return token_count_; }
  int64_t vocab_size() const { return vocab_size_; }
  int token_bytes() const { return token_bytes_; }
  // Copies tokens [start, start + count) as int32; the range must lie inside the shard.
  void copy(int64_t start, int64_t count, int32_t* out) const;
  bool has_loss_mask() const { return mask_ != nullptr; }
  // Sets targets[i] to kIgnoredTarget where token start + i is not trained on.
  void mark_untrained(int64_t start, int64_t count, int32_t* targets) const;

 private:
  friend ShardView parse_shard(std::span<const uint8_t>, const std::string&);
  const uint8_t* payload_ = nullptr;
  const uint8_t* mask_ = nullptr;
  int64_t token_count_ = 0;
  int64_t vocab_size_ = 0;
  int token_bytes_ = 2;
};

// Checks the whole shard once: magic, version, header checksum, sizes, payload checksum and that
// every token id is below the vocabulary size. Throws an Error naming `name` (the file) and what
// is wrong, e.g. the index of the first bad token.
ShardView parse_shard(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace tessera::data
