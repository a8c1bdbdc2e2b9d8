#include "tessera/core/utf8.h"

#include <fmt/format.h>

namespace tessera {

Utf8Char decode_utf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  int length;
  char32_t cp, min;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, cp = lead & 0x1F, min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, cp = lead & 0x0F, min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return {Utf8Char::kInvalidByte, 1};
  }
  if (text.size() - pos < size_t(length)) return {Utf8Char::kInvalidByte, 1};
  for (int i = 1; i < length; ++i) {
    const unsigned char next = byte(pos + i);
    if ((next & 0xC0) != 0x80) return {Utf8Char::kInvalidByte, 1};
    cp = (cp << 6) | (next & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return {Utf8Char::kInvalidByte, 1};
  }
  return {cp, length};
}

std::string printable(std::string_view text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    if (c.code_point == Utf8Char::kInvalidByte || c.code_point < 0x20 || c.code_point == 0x7F) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[pos]));
    } else {
      out.append(text, pos, c.length);
    }
    pos += c.length;
  }
  return out;
}

}  // namespace tessera
