// ggml's tensor encodings as GGUF stores them: the type ids, the block each packs (values and
// bytes), and their decoding to f32. Decoding follows the layouts of ggml's reference code:
//   q4_0  32 values: f16 scale d, 16 bytes of 4-bit q (low nibbles the first 16 values);
//         value = (q - 8) d
//   q4_1  32 values: f16 d, f16 m, 16 bytes of 4-bit q; value = q d + m
//   q8_0  32 values: f16 d, 32 int8 q; value = q d
//   q4_k  256 values in 8 sub-blocks of 32: f16 d, f16 dmin, 12 bytes of 6-bit sub-block scales
//         and mins, 128 bytes of 4-bit q; value = d sc q - dmin m
//   q5_k  as q4_k, with a fifth bit of each q in 32 more bytes
//   q6_k  256 values in 16 sub-blocks of 16: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8
//         sub-block scales, f16 d; value = d sc (q - 32)
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "tessera/core/enum_names.h"

namespace tessera::interop {

enum class GgmlType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q8_0 = 8,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  bf16 = 30,
};

// ggml's names of the types Tessera reads, as llama.cpp prints them.
inline constexpr EnumName<GgmlType> kGgmlTypeNames[] = {
    {GgmlType::f32, "F32"},   {GgmlType::f16, "F16"},   {GgmlType::bf16, "BF16"},
    {GgmlType::q8_0, "Q8_0"}, {GgmlType::q4_0, "Q4_0"}, {GgmlType::q4_1, "Q4_1"},
    {GgmlType::q4_k, "Q4_K"}, {GgmlType::q5_k, "Q5_K"}, {GgmlType::q6_k, "Q6_K"}};
constexpr const auto& enum_names(GgmlType) { return kGgmlTypeNames; }

// Values per block and bytes per block of an encoding (1 value for the plain floats).
struct GgmlBlock {
  int64_t values, bytes;
};

// The type with ggml id `id`, if Tessera reads it (kGgmlTypeNames lists it).
std::optional<GgmlType> ggml_type(uint32_t id);
GgmlBlock ggml_block(GgmlType type);
// Bytes `numel` values take in `type`; numel must be a whole number of its blocks.
uint64_t ggml_bytes(GgmlType type, int64_t numel);
// Decodes whole blocks: `encoded` holds exactly values.size() values of `type`.
void ggml_to_f32(GgmlType type, std::span<const uint8_t> encoded, std::span<float> values);

}  // namespace tessera::interop
