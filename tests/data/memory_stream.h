// Token streams held in memory, for tests that need no files.
#pragma once

#include <numeric>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/shard.h"

namespace tessera::testing {

// The tokens 0, 1, ..., n - 1 (so a token's value is its position) cut into shards of the given
// sizes, which must sum to n. With `masked`, the shards carry a loss mask that trains on the
// tokens not divisible by 3.
class MemoryStream {
 public:
  explicit MemoryStream(const std::vector<int64_t>& shard_sizes, bool masked = false) {
    int32_t next = 0;
    for (int64_t size : shard_sizes) {
      std::vector<int32_t> tokens(size);
      std::iota(tokens.begin(), tokens.end(), next);
      next += int32_t(size);
      std::vector<uint8_t> trained;
      for (const int32_t token : tokens) {
        if (masked) trained.push_back(token % 3 != 0 ? 1 : 0);
      }
      files_.push_back(data::encode_shard(tokens, 1 << 20, trained));
    }
    std::vector<data::ShardView> views;
    for (const auto& bytes : files_) views.push_back(data::parse_shard(bytes, "memory"));
    stream_ = std::make_unique<data::TokenStream>(std::move(views));
  }
  const data::TokenStream& stream() const { return *stream_; }

 private:
  std::vector<std::vector<uint8_t>> files_;
  std::unique_ptr<data::TokenStream> stream_;
};

}  // namespace tessera::testing
