#include "tessera/jinja/lexer.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <utility>

#include "tessera/core/utf8.h"
#include "tessera/jinja/limits.h"
#include "tessera/jinja/text.h"

namespace tessera::jinja {

namespace {

bool is_tag_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// jinja2 keeps only \n line breaks and drops one at the very end (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The text without the Python whitespace at its end.
std::string_view rstrip_space(std::string_view text) {
  while (!text.empty()) {
    size_t start = text.size() - 1;
    while (start > 0 && text.size() - start < 4 && (text[start] & 0xC0) == 0x80) --start;
    const Utf8Char c = decode_utf8(text, start);
    if (start + c.length != text.size() || !is_python_space(c.code_point)) break;
    text.remove_suffix(c.length);
  }
  return text;
}

// A string literal's escapes, decoded as Python's unicode-escape codec does (jinja2 uses it):
// an unknown escape keeps its backslash.
std::string unescape(std::string_view raw, Position position) {
  std::string out;
  char32_t pending_high_surrogate = 0;
  const auto append_code_point = [&](char32_t c) {
    if (pending_high_surrogate && c >= 0xDC00 && c <= 0xDFFF) {
      c = 0x10000 + ((pending_high_surrogate - 0xD800) << 10) + (c - 0xDC00);
    } else if (pending_high_surrogate) {
      append_utf8(out, pending_high_surrogate);
    }
    pending_high_surrogate = 0;
    if (c >= 0xD800 && c <= 0xDBFF) {
      pending_high_surrogate = c;
    } else {
      append_utf8(out, c);
    }
  };
  const auto flush = [&] {
    if (pending_high_surrogate) append_utf8(out, pending_high_surrogate);
    pending_high_surrogate = 0;
  };
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 == raw.size()) {
      flush();
      out += raw[i];
      continue;
    }
    const char e = raw[++i];
    const auto read_hex = [&](int digits) {
      char32_t value = 0;
      for (int d = 0; d < digits; ++d) {
        const int h = i + 1 < raw.size() ? hex_value(raw[i + 1]) : -1;
        if (h < 0) fail_at(position, fmt::format("a truncated \\{} escape in a string", e));
        value = value * 16 + h;
        ++i;
      }
      return value;
    };
    static constexpr std::string_view kSimple = "\\'\"abfnrtv";
    static constexpr std::string_view kSimpleValues = "\\'\"\a\b\f\n\r\t\v";
    if (e == '\n') {
      flush();  // a backslash before a line break joins the lines
    } else if (kSimple.find(e) != std::string_view::npos) {
      flush();
      out += kSimpleValues[kSimple.find(e)];
    } else if (e >= '0' && e <= '7') {
      char32_t value = e - '0';
      for (int d = 1; d < 3 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++d) {
        value = value * 8 + (raw[++i] - '0');
      }
      append_code_point(value);
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const char32_t value = read_hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
      if (value > 0x10FFFF) fail_at(position, "a \\U escape beyond U+10FFFF in a string");
      append_code_point(value);
    } else if (e == 'N') {
      fail_at(position, "\\N{...} escapes are not supported in strings");
    } else {
      flush();
      out += '\\';
      out += e;
    }
  }
  flush();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t start = find_tag_start();
      std::string_view text(src_.data() + pos_, std::min(start, src_.size()) - pos_);
      const size_t text_offset = pos_;
      if (start == std::string::npos) {
        add_text(text_offset, text);
        break;
      }
      const char kind = src_[start + 1];
      const char marker = at(start + 2);
      if (marker == '-') {
        text = rstrip_space(text);
      } else if (marker != '+' && kind != '{') {
        text = lstrip_block(text);
      }
      add_text(text_offset, text);
      pos_ = start;
      if (kind == '#') {
        lex_comment();
      } else if (kind != '%' || !lex_raw()) {
        lex_tag(kind == '%');
      }
    }
    add(TokenKind::kEnd, src_.size());
    return std::move(tokens_);
  }

 private:
  char at(size_t offset) const { return offset < src_.size() ? src_[offset] : '\0'; }
  bool starts_with(size_t offset, std::string_view prefix) const {
    return std::string_view(src_).substr(std::min(offset, src_.size())).starts_with(prefix);
  }

  size_t find_tag_start() const {
    for (size_t brace = src_.find('{', pos_); brace != std::string::npos;
         brace = src_.find('{', brace + 1)) {
      const char next = at(brace + 1);
      if (next == '{' || next == '%' || next == '#') return brace;
    }
    return std::string::npos;
  }

  // Offsets are asked for in increasing order, so the line and column are counted once.
  Position position_of(size_t offset) {
    for (; cursor_offset_ < offset; ++cursor_offset_) {
      const char c = src_[cursor_offset_];
      if (c == '\n') {
        ++cursor_.line;
        cursor_.column = 1;
      } else if ((c & 0xC0) != 0x80) {
        ++cursor_.column;
      }
    }
    return cursor_;
  }

  Token& add(TokenKind kind, size_t offset, std::string text = {}) {
    tokens_.push_back(Token{kind, position_of(offset), std::move(text)});
    return tokens_.back();
  }

  void add_text(size_t offset, std::string_view text) {
    if (!text.empty()) add(TokenKind::kText, offset, std::string(text));
  }

  // lstrip_blocks: spaces and tabs between a line's start and a block or comment tag go.
  std::string_view lstrip_block(std::string_view text) const {
    const size_t line_start = text.rfind('\n') + 1;  // 0 when there is no line break
    if (line_start == 0 && !line_starting_) return text;
    if (text.find_first_not_of(" \t", line_start) != std::string_view::npos) return text;
    return text.substr(0, line_start);
  }

  // After a tag's end: - removes the whitespace that follows, trim_blocks one line break.
  void after_tag(char marker, bool trims_newline) {
    if (marker == '-') {
      while (pos_ < src_.size()) {
        const Utf8Char c = decode_utf8(src_, pos_);
        if (!is_python_space(c.code_point)) break;
        pos_ += c.length;
      }
    } else if (marker != '+' && trims_newline && at(pos_) == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void lex_comment() {
    const size_t start = pos_;
    size_t content = start + 2;
    if (at(content) == '-' || at(content) == '+') ++content;
    const size_t end = src_.find("#}", content);
    if (end == std::string::npos) {
      fail_at(position_of(start), "the comment is never closed with '#}'");
    }
    const char marker = end > content ? src_[end - 1] : '\0';
    pos_ = end + 2;
    after_tag(marker, true);
  }

  // {% raw %}...{% endraw %}: the text between is output as it stands.
  bool lex_raw() {
    const size_t start = pos_;
    const Position open = position_of(start);
    size_t p = start + 2;
    if (at(p) == '-' || at(p) == '+') ++p;
    while (is_tag_space(at(p))) ++p;
    if (!starts_with(p, "raw") || is_name_char(at(p + 3))) return false;
    p += 3;
    while (is_tag_space(at(p))) ++p;
    const bool strips_after = starts_with(p, "-%}");
    if (!strips_after && !starts_with(p, "%}")) return false;
    pos_ = p + (strips_after ? 3 : 2);
    after_tag(strips_after ? '-' : '+', false);
    const size_t content = pos_;
    for (size_t q = src_.find("{%", content); q != std::string::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      const char open_marker = at(r) == '-' || at(r) == '+' ? src_[r++] : '\0';
      while (is_tag_space(at(r))) ++r;
      if (!starts_with(r, "endraw") || is_name_char(at(r + 6))) continue;
      r += 6;
      while (is_tag_space(at(r))) ++r;
      const char close_marker = at(r) == '-' || at(r) == '+' ? src_[r++] : '\0';
      if (!starts_with(r, "%}")) continue;
      std::string_view text(src_.data() + content, q - content);
      text = open_marker == '-'   ? rstrip_space(text)
             : open_marker == '+' ? text
                                  : lstrip_block(text);
      add_text(content, text);
      pos_ = r + 2;
      after_tag(close_marker, true);
      return true;
    }
    fail_at(open, "'{% raw %}' is never closed with '{% endraw %}'");
  }

  void lex_tag(bool block) {
    const Position open =
        add(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, pos_).position;
    pos_ += 2;
    if (at(pos_) == '-' || at(pos_) == '+') ++pos_;
    std::vector<char> brackets;
    while (true) {
      while (is_tag_space(at(pos_))) ++pos_;
      if (pos_ >= src_.size()) {
        fail_at(open, block ? "'{%' is never closed with '%}'" : "'{{' is never closed with '}}'");
      }
      if (brackets.empty()) {
        const char marker = at(pos_) == '-' || at(pos_) == '+' ? at(pos_) : '\0';
        const size_t close = pos_ + (marker ? 1 : 0);
        if (block && starts_with(close, "%}")) {
          add(TokenKind::kBlockEnd, pos_);
          pos_ = close + 2;
          after_tag(marker, true);
          return;
        }
        if (!block && marker != '+' && starts_with(close, "}}")) {
          add(TokenKind::kVariableEnd, pos_);
          pos_ = close + 2;
          after_tag(marker, false);
          return;
        }
      }
      const char c = src_[pos_];
      if (is_name_start(c)) {
        lex_name();
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(brackets);
      }
    }
  }

  void lex_name() {
    size_t end = pos_;
    while (is_name_char(at(end))) ++end;
    add(TokenKind::kName, pos_, src_.substr(pos_, end - pos_));
    pos_ = end;
  }

  // Digits with single underscores between them, from `p`; returns where they end.
  size_t digits_end(size_t p, bool hex = false) const {
    const auto digit = [&](char c) { return hex ? hex_value(c) >= 0 : is_digit(c); };
    while (digit(at(p)) || (at(p) == '_' && digit(at(p + 1)) && p > 0 && digit(src_[p - 1]))) ++p;
    return p;
  }

  void lex_number() {
    const size_t start = pos_;
    const Position position = position_of(start);
    const char prefix = static_cast<char>(std::tolower(static_cast<unsigned char>(at(start + 1))));
    std::string digits;
    const auto without_underscores = [&](size_t from, size_t to) {
      for (size_t i = from; i < to; ++i) {
        if (src_[i] != '_') digits += src_[i];
      }
    };
    if (src_[start] == '0' && (prefix == 'x' || prefix == 'o' || prefix == 'b')) {
      const size_t end = digits_end(start + 2, prefix == 'x');
      without_underscores(start + 2, end);
      const int base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2;
      int64_t value = 0;
      const auto result =
          std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
      if (digits.empty() || result.ec != std::errc() ||
          result.ptr != digits.data() + digits.size()) {
        fail_at(position, "an invalid or too large integer literal");
      }
      add(TokenKind::kInteger, start).integer = value;
      pos_ = end;
      return;
    }
    size_t end = digits_end(start);
    bool is_float = false;
    // As in jinja2, no float starts right after a dot: x.0.1 is an item of an item.
    if (start == 0 || src_[start - 1] != '.') {
      if (at(end) == '.' && is_digit(at(end + 1))) {
        end = digits_end(end + 1);
        is_float = true;
      }
      const size_t exponent = end + ((at(end + 1) == '+' || at(end + 1) == '-') ? 2 : 1);
      if ((at(end) == 'e' || at(end) == 'E') && is_digit(at(exponent))) {
        end = digits_end(exponent);
        is_float = true;
      }
    }
    without_underscores(start, end);
    Token& token = add(is_float ? TokenKind::kFloat : TokenKind::kInteger, start);
    const auto result =
        is_float ? std::from_chars(digits.data(), digits.data() + digits.size(), token.number)
                 : std::from_chars(digits.data(), digits.data() + digits.size(), token.integer);
    if (result.ec != std::errc()) fail_at(position, "a number literal too large");
    pos_ = end;
  }

  void lex_string() {
    const size_t start = pos_;
    const char quote = src_[start];
    size_t p = start + 1;
    while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
    const Position position = position_of(start);
    if (p >= src_.size()) fail_at(position, "the string is never closed");
    add(TokenKind::kString, start,
        unescape(std::string_view(src_).substr(start + 1, p - start - 1), position));
    pos_ = p + 1;
  }

  void lex_operator(std::vector<char>& brackets) {
    static constexpr std::string_view kPairs[] = {"//", "**", "==", "!=", "<=", ">="};
    static constexpr std::string_view kSingles = "+-*/%~<>=()[]{},.:|;";
    for (std::string_view pair : kPairs) {
      if (starts_with(pos_, pair)) {
        add(TokenKind::kOperator, pos_, std::string(pair));
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (kSingles.find(c) == std::string_view::npos) {
      const Utf8Char character = decode_utf8(src_, pos_);
      fail_at(position_of(pos_), fmt::format("unexpected character '{}' inside a tag",
                                             printable(src_.substr(pos_, character.length))));
    }
    static constexpr std::string_view kOpen = "([{", kClose = ")]}";
    if (kOpen.find(c) != std::string_view::npos) {
      brackets.push_back(kClose[kOpen.find(c)]);
    } else if (kClose.find(c) != std::string_view::npos) {
      if (brackets.empty()) fail_at(position_of(pos_), fmt::format("unexpected '{}'", c));
      if (brackets.back() != c) {
        fail_at(position_of(pos_),
                fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      }
      brackets.pop_back();
    }
    add(TokenKind::kOperator, pos_, std::string(1, c));
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
  size_t cursor_offset_ = 0;
  Position cursor_;
};

}  // namespace

TemplateError::TemplateError(Position position, const std::string& message)
    : Error(fmt::format("template line {}, column {}: {}", position.line, position.column,
                        message)) {}

void fail_at(Position position, const std::string& message) {
  throw TemplateError(position, message);
}

std::vector<Token> tokenize(std::string_view source) {
  check(source.size() <= kMaxTemplateBytes, "the template has {} bytes; the limit is {}",
        source.size(), kMaxTemplateBytes);
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace tessera::jinja
