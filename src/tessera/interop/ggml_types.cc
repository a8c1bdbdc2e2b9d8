#include "tessera/interop/ggml_types.h"

#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/q4_k.h"
#include "tessera/core/q8_0.h"

namespace tessera::interop {
namespace {

constexpr int64_t kSuperBlock = 256;  // ggml's QK_K

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = float((b[2 + j] & 0x0F) - 8) * d;
    y[j + 16] = float((b[2 + j] >> 4) - 8) * d;
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(b[4 + j] & 0x0F) * d + m;
    y[j + 16] = float(b[4 + j] >> 4) * d + m;
  }
}

// q4_k (high == nullptr) and q5_k (high: the fifth bits) share their scales and layout.
void k_quant(const uint8_t* b, const uint8_t* high, const uint8_t* q, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const Q4KBlockView scales{b};
  uint8_t bit_low = 1, bit_high = 2;
  for (int j = 0; j < 8; j += 2) {
    uint8_t s1, m1, s2, m2;
    scales.scale_min(j, s1, m1);
    scales.scale_min(j + 1, s2, m2);
    for (int l = 0; l < 32; ++l) {
      const int fifth_low = high != nullptr && (high[l] & bit_low) ? 16 : 0;
      const int fifth_high = high != nullptr && (high[l] & bit_high) ? 16 : 0;
      y[l] = d * float(s1) * float((q[l] & 0x0F) + fifth_low) - dmin * float(m1);
      y[l + 32] = d * float(s2) * float((q[l] >> 4) + fifth_high) - dmin * float(m2);
    }
    y += 64;
    q += 32;
    bit_low = uint8_t(bit_low << 2);
    bit_high = uint8_t(bit_high << 2);
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* low = b;
  const uint8_t* high = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((low[l] & 0x0F) | (((high[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((low[l + 32] & 0x0F) | (((high[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((low[l] >> 4) | (((high[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((low[l + 32] >> 4) | (((high[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(scales[is]) * float(q1);
      y[l + 32] = d * float(scales[is + 2]) * float(q2);
      y[l + 64] = d * float(scales[is + 4]) * float(q3);
      y[l + 96] = d * float(scales[is + 6]) * float(q4);
    }
    y += 128;
    low += 64;
    high += 32;
    scales += 8;
  }
}

}  // namespace

std::optional<GgmlType> ggml_type(uint32_t id) {
  for (const EnumName<GgmlType>& known : kGgmlTypeNames) {
    if (uint32_t(known.value) == id) return known.value;
  }
  return std::nullopt;
}

GgmlBlock ggml_block(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return {1, 4};
    case GgmlType::f16:
    case GgmlType::bf16:
      return {1, 2};
    case GgmlType::q4_0:
      return {32, 18};
    case GgmlType::q4_1:
      return {32, 20};
    case GgmlType::q8_0:
      return {kQ8BlockSize, kQ8BlockBytes};
    case GgmlType::q4_k:
      return {kQ4KBlockSize, kQ4KBlockBytes};
    case GgmlType::q5_k:
      return {kSuperBlock, 176};
    case GgmlType::q6_k:
      return {kSuperBlock, 210};
  }
  fail("unknown ggml type {}", uint32_t(type));
}

uint64_t ggml_bytes(GgmlType type, int64_t numel) {
  const GgmlBlock block = ggml_block(type);
  check(numel % block.values == 0, "{} values are not a whole number of {} blocks of {}", numel,
        enum_name(type), block.values);
  return uint64_t(numel / block.values) * uint64_t(block.bytes);
}

void ggml_to_f32(GgmlType type, std::span<const uint8_t> encoded, std::span<float> values) {
  const GgmlBlock block = ggml_block(type);
  check(encoded.size() == ggml_bytes(type, int64_t(values.size())),
        "{} bytes of {} do not hold {} values", encoded.size(), enum_name(type), values.size());
  const uint8_t* b = encoded.data();
  float* y = values.data();
  const int64_t blocks = int64_t(values.size()) / block.values;
  switch (type) {
    case GgmlType::f32:
      std::memcpy(y, b, encoded.size());
      return;
    case GgmlType::f16:
      for (int64_t i = 0; i < blocks; ++i) y[i] = half_at(b + 2 * i);
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < blocks; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        y[i] = bf16_to_f32(h);
      }
      return;
    case GgmlType::q8_0:
      dequantize_q8_0(encoded, values);
      return;
    default:
      break;
  }
  for (int64_t i = 0; i < blocks; ++i, b += block.bytes, y += block.values) {
    switch (type) {
      case GgmlType::q4_0:
        q4_0(b, y);
        break;
      case GgmlType::q4_1:
        q4_1(b, y);
        break;
      case GgmlType::q4_k:
        k_quant(b, nullptr, b + 16, y);
        break;
      case GgmlType::q5_k:
        k_quant(b, b + 16, b + 48, y);
        break;
      case GgmlType::q6_k:
        q6_k(b, y);
        break;
      default:
        fail("ggml type {} has no block decoder", enum_name(type));
    }
  }
}

}  // namespace tessera::interop
