#include "tessera/jinja/text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/core/utf8.h"

namespace tessera::jinja {

namespace {

constexpr char32_t kEscapedByteBase = 0xDC00;

bool is_escaped_byte(char32_t c) { return c >= 0xDC80 && c <= 0xDCFF; }

// Uppercase letters of the scripts whose case is mapped, and their lowercase partners.
char32_t lower_of(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;     // Latin-1
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;  // Greek
  if (c >= 0x410 && c <= 0x42F) return c + 32;                // Cyrillic
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

char32_t upper_of(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

bool is_cased(char32_t c) { return lower_of(c) != c || upper_of(c) != c || c == 0xDF; }

template <typename Map>
std::string map_code_points(std::string_view text, Map map) {
  std::u32string cps = to_code_points(text);
  for (char32_t& c : cps) c = map(c);
  return to_utf8(cps);
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Characters Python's repr() writes as escapes because str.isprintable() is false for them:
// controls, separators other than the space, format characters, surrogates, private use.
bool is_unprintable(char32_t c) {
  return c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
         (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 ||
         (c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
         c == 0xFFFE || c == 0xFFFF;
}

}  // namespace

std::u32string to_code_points(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    out += c.code_point == Utf8Char::kInvalidByte
               ? kEscapedByteBase + static_cast<unsigned char>(text[pos])
               : c.code_point;
    pos += c.length;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (is_escaped_byte(c)) {
    out += static_cast<char>(c - kEscapedByteBase);
  } else if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | c >> 6);
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | c >> 12);
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | c >> 18);
    out += static_cast<char>(0x80 | (c >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string to_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) append_utf8(out, c);
  return out;
}

size_t code_point_count(std::string_view text) {
  size_t count = 0;
  for (size_t pos = 0; pos < text.size(); ++count) pos += decode_utf8(text, pos).length;
  return count;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string python_upper(std::string_view text) { return map_code_points(text, upper_of); }

std::string python_lower(std::string_view text) { return map_code_points(text, lower_of); }

std::string python_title(std::string_view text) {
  bool previous_cased = false;
  return map_code_points(text, [&](char32_t c) {
    const bool cased = is_cased(c);
    const char32_t mapped = !cased ? c : previous_cased ? lower_of(c) : upper_of(c);
    previous_cased = cased;
    return mapped;
  });
}

std::string python_capitalize(std::string_view text) {
  bool first = true;
  return map_code_points(text, [&](char32_t c) {
    const char32_t mapped = first ? upper_of(c) : lower_of(c);
    first = false;
    return mapped;
  });
}

std::string jinja_title(std::string_view text) {
  bool word_start = true;
  return map_code_points(text, [&](char32_t c) {
    if (is_python_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      word_start = true;
      return c;
    }
    const char32_t mapped = word_start ? upper_of(c) : lower_of(c);
    word_start = false;
    return mapped;
  });
}

std::string python_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                         bool right) {
  const std::u32string cps = to_code_points(text);
  const std::u32string strip_set = chars ? to_code_points(*chars) : std::u32string();
  const auto strips = [&](char32_t c) {
    return chars ? strip_set.find(c) != std::u32string::npos : is_python_space(c);
  };
  size_t begin = 0, end = cps.size();
  while (left && begin < end && strips(cps[begin])) ++begin;
  while (right && end > begin && strips(cps[end - 1])) --end;
  return to_utf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> python_split(std::string_view text, const std::optional<std::string>& sep,
                                      int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    check(!sep->empty(), "empty separator");
    size_t start = 0;
    for (size_t found; (maxsplit < 0 || int64_t(parts.size()) < maxsplit) &&
                       (found = text.find(*sep, start)) != std::string_view::npos;) {
      parts.emplace_back(text.substr(start, found - start));
      start = found + sep->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  const std::u32string cps = to_code_points(text);
  size_t pos = 0;
  while (true) {
    while (pos < cps.size() && is_python_space(cps[pos])) ++pos;
    if (pos == cps.size()) break;
    if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
      parts.push_back(to_utf8(std::u32string_view(cps).substr(pos)));
      break;
    }
    const size_t start = pos;
    while (pos < cps.size() && !is_python_space(cps[pos])) ++pos;
    parts.push_back(to_utf8(std::u32string_view(cps).substr(start, pos - start)));
  }
  return parts;
}

std::vector<std::string> python_splitlines(std::string_view text) {
  const std::u32string cps = to_code_points(text);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    lines.push_back(to_utf8(std::u32string_view(cps).substr(start, i - start)));
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(to_utf8(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const std::string_view scientific(buffer, result.ptr - buffer);
  const size_t e = scientific.find('e');
  const bool negative = scientific[0] == '-';
  std::string digits;
  for (char c : scientific.substr(negative, e - negative)) {
    if (c != '.') digits += c;
  }
  const int exponent = std::atoi(std::string(scientific.substr(e + 1)).c_str());
  const int point = exponent + 1;  // digits before the decimal point
  std::string out = negative ? "-" : "";
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (size_t(point) >= digits.size()) {
      out += digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return out;
}

std::string python_string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : to_code_points(text)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (!is_unprintable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", uint32_t(c));
    } else {
      out += fmt::format("\\u{:04x}", uint32_t(c));
    }
  }
  out += quote;
  return out;
}

void append_json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  out += '"';
  const auto append_escape = [&](char32_t c) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
    }
    if (c >= 0x10000) {
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + ((c - 0x10000) >> 10),
                         0xDC00 + ((c - 0x10000) & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", uint32_t(c));
    }
  };
  if (ensure_ascii) {
    for (char32_t c : to_code_points(text)) {
      if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
        out += static_cast<char>(c);
      } else {
        append_escape(c);
      }
    }
  } else {
    for (char byte : text) {
      const auto c = static_cast<unsigned char>(byte);
      if (c < 0x20 || c == '"' || c == '\\') {
        append_escape(c);
      } else {
        out += byte;
      }
    }
  }
  out += '"';
}

}  // namespace tessera::jinja
