#pragma once

#include <cstdint>
#include <cstring>

#include "tessera/core/enum_names.h"

namespace tessera {

// f16 and bf16 elements are held as their uint16_t bit patterns.
enum class DType : uint8_t { f32, bf16, f16, i32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
  }
  return 0;
}

inline constexpr EnumName<DType> kDTypeNames[] = {
    {DType::f32, "f32"}, {DType::bf16, "bf16"}, {DType::f16, "f16"}, {DType::i32, "i32"}};
constexpr const auto& enum_names(DType) { return kDTypeNames; }

// bf16 is the upper half of an f32; conversion rounds to nearest even.
inline uint16_t f32_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_f32(uint16_t x) {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// IEEE half precision; conversion rounds to nearest even, overflows to infinity and keeps NaN.
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);

}  // namespace tessera
