// The constants of the GGUF container that its writer and reader share.
#pragma once

#include <cstdint>

namespace tessera::interop {

// The data section's alignment unless general.alignment sets another.
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// The types of GGUF's metadata values.
enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

}  // namespace tessera::interop
