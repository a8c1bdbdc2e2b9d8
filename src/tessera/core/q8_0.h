// GGUF's q8_0 encoding: blocks of 32 int8 values, each block led by its f16 scale (34 bytes for 32
// values). Quantised as ggml's reference code does: per block, the scale is max|x| / 127 and each
// value is round(x / scale), halves away from zero; a value reads back as its f16 scale times q.
#pragma once

#include <cstdint>
#include <span>

namespace tessera {

inline constexpr int64_t kQ8BlockSize = 32;
inline constexpr int64_t kQ8BlockBytes = 2 + kQ8BlockSize;

// `values` is a whole number of blocks long, and `blocks` holds exactly that many.
void quantize_q8_0(std::span<const float> values, std::span<uint8_t> blocks);
void dequantize_q8_0(std::span<const uint8_t> blocks, std::span<float> values);

}  // namespace tessera
