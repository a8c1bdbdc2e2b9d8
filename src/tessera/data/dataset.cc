#include "tessera/data/dataset.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::data {
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> prefix_offsets(const std::vector<ShardView>& shards) {
  std::vector<int64_t> offsets{0};
  for (const ShardView& s : shards) offsets.push_back(offsets.back() + s.size());
  return offsets;
}

TokenStream open_split(const fs::path& dir, const DatasetManifest& m, const DatasetSplit& split,
                       const char* name) {
  TokenStream stream(dir, split.shards, m.vocab_size);
  check(stream.size() == split.tokens, "{}: dataset.json lists {} {} tokens but its shards hold {}",
        dir.string(), split.tokens, name, stream.size());
  return stream;
}

}  // namespace

TokenStream::TokenStream(std::vector<ShardView> shards)
    : shards_(std::move(shards)), offsets_(prefix_offsets(shards_)) {}

TokenStream::TokenStream(const fs::path& dir, const std::vector<std::string>& shard_names,
                         int64_t vocab_size) {
  for (const std::string& name : shard_names) {
    const fs::path path = dir / name;
    files_.emplace_back(path);
    shards_.push_back(parse_shard(files_.back().bytes(), path.string()));
    check(shards_.back().vocab_size() == vocab_size,
          "{}: the shard's vocabulary size {} differs from the dataset's {}", path.string(),
          shards_.back().vocab_size(), vocab_size);
  }
  offsets_ = prefix_offsets(shards_);
}

template <typename Piece>
void TokenStream::for_each_piece(int64_t start, int64_t count, Piece&& piece) const {
  // The last shard starting at or before `start`; empty shards are skipped by the loop below.
  size_t i = std::upper_bound(offsets_.begin(), offsets_.end(), start) - offsets_.begin() - 1;
  int64_t done = 0;
  while (done < count) {
    const int64_t offset = start + done - offsets_[i];
    const int64_t n = std::min(count - done, shards_[i].size() - offset);
    piece(shards_[i], offset, n, done);
    done += n;
    ++i;
  }
}

void TokenStream::copy(int64_t start, int64_t count, int32_t* out) const {
  for_each_piece(start, count, [&](const ShardView& shard, int64_t offset, int64_t n, int64_t at) {
    shard.copy(offset, n, out + at);
  });
}

void TokenStream::mark_untrained(int64_t start, int64_t count, int32_t* targets) const {
  for_each_piece(start, count, [&](const ShardView& shard, int64_t offset, int64_t n, int64_t at) {
    shard.mark_untrained(offset, n, targets + at);
  });
}

bool TokenStream::has_loss_mask() const {
  return std::ranges::any_of(shards_, [](const ShardView& s) { return s.has_loss_mask(); });
}

Dataset open_dataset(const fs::path& dir) {
  DatasetManifest manifest = read_dataset_manifest(dir);
  TokenStream train = open_split(dir, manifest, manifest.train, "training");
  TokenStream val = open_split(dir, manifest, manifest.val, "held-out");
  return Dataset{dir, std::move(manifest), std::move(train), std::move(val)};
}

double unigram_entropy(const TokenStream& tokens, int64_t vocab_size) {
  check(tokens.size() > 0, "unigram entropy: no tokens");
  std::vector<int64_t> counts(vocab_size, 0);
  std::vector<int32_t> buffer(1 << 16);
  for (int64_t start = 0; start < tokens.size(); start += int64_t(buffer.size())) {
    const int64_t n = std::min<int64_t>(int64_t(buffer.size()), tokens.size() - start);
    tokens.copy(start, n, buffer.data());
    for (int64_t i = 0; i < n; ++i) {
      check(buffer[i] < vocab_size, "unigram entropy: token id {} at index {} is not below {}",
            buffer[i], start + i, vocab_size);
      ++counts[buffer[i]];
    }
  }
  const double n = double(tokens.size());
  double entropy = 0.0;
  for (int64_t count : counts) {
    if (count == 0) continue;
    const double p = double(count) / n;
    entropy -= p * std::log(p);
  }
  return std::max(entropy, 0.0);
}

}  // namespace tessera::data
