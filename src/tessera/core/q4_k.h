// ggml's Q4_K encoding: super-blocks of 256 values in 8 sub-blocks of 32. A super-block keeps
// two f16 scales d and dmin and, per sub-block, a 6-bit scale sc and a 6-bit min m (packed into
// 12 bytes), and each value as 4 bits q in [0, 15]; a value reads back as d sc q - dmin m. The
// values are two to a byte in 64-value runs: value l of a run in byte l's low nibble, value l + 32
// in its high one. 144 bytes for 256 values. Quantised as ggml's quantize_row_q4_K_ref does (the
// sub-blocks' scales and mins by a weighted least-squares search, then the 6-bit grid).
#pragma once

#include <cstdint>
#include <span>

namespace tessera {

inline constexpr int64_t kQ4KBlockSize = 256;
inline constexpr int64_t kQ4KSubBlockSize = 32;
inline constexpr int64_t kQ4KSubBlocks = kQ4KBlockSize / kQ4KSubBlockSize;
inline constexpr int64_t kQ4KScaleBytes = 12;
inline constexpr int64_t kQ4KBlockBytes = 4 + kQ4KScaleBytes + kQ4KBlockSize / 2;

// The parts of one 144-byte block.
struct Q4KBlockView {
  const uint8_t* bytes;
  uint16_t d() const;     // f16
  uint16_t dmin() const;  // f16
  // Sub-block j's 6-bit scale and min.
  void scale_min(int64_t j, uint8_t& scale, uint8_t& min) const;
  // Value i's level in [0, 15].
  uint8_t level(int64_t i) const;
};

// One super-block of x[256] into block[144].
void quantize_q4_k_block(const float* x, uint8_t* block);
// `values` is a whole number of super-blocks long, and `blocks` holds exactly that many.
void quantize_q4_k(std::span<const float> values, std::span<uint8_t> blocks);

}  // namespace tessera
