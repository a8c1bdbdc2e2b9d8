// ggml's Q4_0 encoding: blocks of 32 values, each an f16 scale d (the block's value of largest
// magnitude divided by -8) and the values rounded to q = x / d + 8 in [0, 15], two to a byte
// (value j in the low nibble of byte j, value j + 16 in its high one): 18 bytes for 32 values.
// Quantised as ggml's quantize_row_q4_0_ref does; a value reads back as d (q - 8).
#pragma once

#include <cstdint>
#include <span>

namespace tessera {

inline constexpr int64_t kQ4_0BlockSize = 32;
inline constexpr int64_t kQ4_0BlockBytes = 2 + kQ4_0BlockSize / 2;

// One block of x[32]: its levels q[32] in [0, 15]; returns d (before its rounding to f16).
float quantize_q4_0_block(const float* x, uint8_t* q);
// `values` is a whole number of blocks long, and `blocks` holds exactly that many.
void quantize_q4_0(std::span<const float> values, std::span<uint8_t> blocks);

}  // namespace tessera
