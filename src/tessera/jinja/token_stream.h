// The parser's view of a template's tokens: looking ahead, taking, expecting with messages that
// name what was found, and counting how deeply the parse has descended.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/jinja/lexer.h"

namespace tessera::jinja {

class TokenStream {
 public:
  // `tokens` end with one of kind kEnd, as tokenize() gives them.
  explicit TokenStream(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
  }
  // The next token, which is then passed; the end stays the next token.
  const Token& next() {
    const Token& token = peek();
    if (index_ < tokens_.size() - 1) ++index_;
    return token;
  }
  bool at_operator(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }

  [[noreturn]] void unexpected(const std::string& expected) const;
  void expect_operator(std::string_view op);
  std::string expect_name(const std::string& what);

  // Counts one level of nesting for as long as it lives; too many is an Error at `position`.
  class Descend {
   public:
    Descend(TokenStream& stream, Position position);
    ~Descend() { --stream_.depth_; }
    Descend(const Descend&) = delete;
    Descend& operator=(const Descend&) = delete;

   private:
    TokenStream& stream_;
  };

 private:
  std::vector<Token> tokens_;
  size_t index_ = 0;
  int depth_ = 0;
};

// "line 3, column 5"
std::string where(Position position);

}  // namespace tessera::jinja
