#include "tessera/data/shard.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "tessera/core/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/targets.h"

namespace tessera::data {
namespace {

// Token payloads are read in place from mapped files, which is only correct on a little-endian
// host; the header is encoded byte by byte and does not depend on it.
static_assert(std::endian::native == std::endian::little);

constexpr size_t kHeaderChecksummed = 40;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

template <typename T>
void widen(const uint8_t* src, int64_t count, int32_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * int64_t(sizeof(T)), sizeof(T));
    out[i] = int32_t(v);
  }
}

// Index of the first token >= vocab_size, or -1.
template <typename T>
int64_t first_out_of_range(const uint8_t* src, int64_t count, uint64_t vocab_size) {
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src + i * int64_t(sizeof(T)), sizeof(T));
    if (v >= vocab_size) return i;
  }
  return -1;
}

uint32_t load_token(const uint8_t* payload, int width, int64_t index) {
  if (width == 2) {
    uint16_t v;
    std::memcpy(&v, payload + 2 * index, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, payload + 4 * index, 4);
  return v;
}

}  // namespace

int shard_token_bytes(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

std::vector<uint8_t> encode_shard(std::span<const int32_t> tokens, int64_t vocab_size,
                                  std::span<const uint8_t> trained) {
  check(vocab_size >= 1 && vocab_size <= std::numeric_limits<int32_t>::max(),
        "token shard: vocabulary size {} is outside [1, 2^31)", vocab_size);
  check(trained.empty() || trained.size() == tokens.size(),
        "token shard: a loss mask of {} entries for {} tokens", trained.size(), tokens.size());
  const int width = shard_token_bytes(vocab_size);
  const size_t mask_bytes = trained.empty() ? 0 : (tokens.size() + 7) / 8;
  std::vector<uint8_t> bytes(kShardHeaderBytes + tokens.size() * width + mask_bytes);
  uint8_t* payload = bytes.data() + kShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    check(tokens[i] >= 0 && tokens[i] < vocab_size,
          "token shard: token id {} at index {} is outside the vocabulary [0, {})", tokens[i], i,
          vocab_size);
    const auto v = uint32_t(tokens[i]);
    if (width == 2) {
      const auto v16 = uint16_t(v);
      std::memcpy(payload + 2 * i, &v16, 2);
    } else {
      std::memcpy(payload + 4 * i, &v, 4);
    }
  }
  uint8_t* mask = payload + tokens.size() * width;
  for (size_t i = 0; i < trained.size(); ++i) {
    if (trained[i] != 0) mask[i / 8] |= uint8_t(1u << (i % 8));
  }
  uint8_t* h = bytes.data();
  std::memcpy(h, kShardMagic, sizeof(kShardMagic));
  put_u32(h + 8, trained.empty() ? kShardVersion : kMaskedShardVersion);
  put_u32(h + 12, kShardHeaderBytes);
  put_u32(h + 16, uint32_t(width));
  put_u32(h + 20, crc32(payload, tokens.size() * width + mask_bytes));
  put_u64(h + 24, uint64_t(vocab_size));
  put_u64(h + 32, tokens.size());
  put_u32(h + 40, crc32(h, kHeaderChecksummed));
  put_u32(h + 44, 0);
  return bytes;
}

void write_shard(const std::filesystem::path& path, std::span<const int32_t> tokens,
                 int64_t vocab_size, std::span<const uint8_t> trained) {
  const std::vector<uint8_t> bytes = encode_shard(tokens, vocab_size, trained);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"),
                                                       &std::fclose);
  if (!file) fail("{}: cannot create the shard ({})", path.string(), std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file.get()) == bytes.size() &&
                  std::fflush(file.get()) == 0;
  if (!ok) fail("{}: cannot write the shard ({})", path.string(), std::strerror(errno));
}

void ShardView::copy(int64_t start, int64_t count, int32_t* out) const {
  const uint8_t* src = payload_ + start * token_bytes_;
  if (token_bytes_ == 2) {
    widen<uint16_t>(src, count, out);
  } else {
    widen<uint32_t>(src, count, out);
  }
}

void ShardView::mark_untrained(int64_t start, int64_t count, int32_t* targets) const {
  if (mask_ == nullptr) return;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t at = start + i;
    if ((mask_[at / 8] >> (at % 8) & 1) == 0) targets[i] = kIgnoredTarget;
  }
}

ShardView parse_shard(std::span<const uint8_t> bytes, const std::string& name) {
  check(bytes.size() >= kShardHeaderBytes,
        "{}: truncated token shard: {} bytes, shorter than the {}-byte header", name, bytes.size(),
        kShardHeaderBytes);
  const uint8_t* h = bytes.data();
  check(std::memcmp(h, kShardMagic, sizeof(kShardMagic)) == 0,
        "{}: not a token shard (the file does not start with \"TSRASHRD\")", name);
  const uint32_t version = get_u32(h + 8);
  check(version == kShardVersion || version == kMaskedShardVersion,
        "{}: unsupported token shard version {} (this build reads {} and {})", name, version,
        kShardVersion, kMaskedShardVersion);
  const uint32_t header_crc = get_u32(h + 40);
  check(header_crc == crc32(h, kHeaderChecksummed),
        "{}: corrupted token shard: the header checksum does not match", name);
  const uint32_t header_bytes = get_u32(h + 12);
  check(header_bytes == kShardHeaderBytes, "{}: token shard header size {} is not {}", name,
        header_bytes, kShardHeaderBytes);
  const uint32_t width = get_u32(h + 16);
  check(width == 2 || width == 4, "{}: token shard width {} bytes per token is not 2 or 4", name,
        width);
  const uint64_t vocab_size = get_u64(h + 24);
  check(vocab_size >= 1 && vocab_size <= uint64_t(std::numeric_limits<int32_t>::max()),
        "{}: token shard vocabulary size {} is outside [1, 2^31)", name, vocab_size);
  check(width == 4 || vocab_size <= 65536,
        "{}: token shard vocabulary size {} does not fit its 2-byte tokens", name, vocab_size);
  const uint64_t count = get_u64(h + 32);
  const uint64_t payload_bytes = bytes.size() - kShardHeaderBytes;
  const bool masked = version == kMaskedShardVersion;
  check(count <= payload_bytes / width &&
            payload_bytes == count * width + (masked ? (count + 7) / 8 : 0),
        "{}: truncated or padded token shard: the header promises {} tokens of {} bytes{} but {} "
        "bytes follow it",
        name, count, width, masked ? " and their loss mask" : "", payload_bytes);
  const uint8_t* payload = h + kShardHeaderBytes;
  const uint32_t stored = get_u32(h + 20), actual = crc32(payload, payload_bytes);
  check(stored == actual,
        "{}: corrupted token shard: payload checksum {:08x} does not match the stored {:08x}", name,
        actual, stored);
  const int64_t bad = width == 2 ? first_out_of_range<uint16_t>(payload, count, vocab_size)
                                 : first_out_of_range<uint32_t>(payload, count, vocab_size);
  if (bad >= 0) {
    fail("{}: token id {} at index {} is outside the vocabulary [0, {})", name,
         load_token(payload, int(width), bad), bad, vocab_size);
  }
  ShardView view;
  if (masked) {
    view.mask_ = payload + count * width;
    check(count % 8 == 0 || view.mask_[count / 8] >> (count % 8) == 0,
          "{}: token shard loss mask has bits set past its last token", name);
  }
  view.payload_ = payload;
  view.token_count_ = int64_t(count);
  view.vocab_size_ = int64_t(vocab_size);
  view.token_bytes_ = int(width);
  return view;
}

}  // namespace tessera::data
