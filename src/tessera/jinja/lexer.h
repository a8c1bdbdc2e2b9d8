// Splits a Jinja template into text and the tokens inside its tags, applying the whitespace rules
// Hugging Face renders chat templates with (trim_blocks and lstrip_blocks, as Python's jinja2
// applies them) and each tag's - and + markers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::jinja {

// 1-based; columns count characters, not bytes.
struct Position {
  int line = 1;
  int column = 1;
};

// An Error whose message starts with the place in the template it concerns.
class TemplateError : public Error {
 public:
  TemplateError(Position position, const std::string& message);
};

[[noreturn]] void fail_at(Position position, const std::string& message);

enum class TokenKind {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd,  // of the template
};

struct Token {
  TokenKind kind;
  Position position;
  std::string text;  // the text, name, operator or (unescaped) string
  int64_t integer = 0;
  double number = 0;
};

// The template's tokens, ending with one of kind kEnd. Comments leave no token.
std::vector<Token> tokenize(std::string_view source);

}  // namespace tessera::jinja
