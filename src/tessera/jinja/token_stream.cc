#include "tessera/jinja/token_stream.h"

#include <fmt/format.h>

#include "tessera/jinja/limits.h"

namespace tessera::jinja {

namespace {

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEnd:
      return "the end of the template";
    case TokenKind::kText:
      return "text";
    case TokenKind::kVariableBegin:
      return "'{{'";
    case TokenKind::kVariableEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kString:
      return "a string";
    case TokenKind::kInteger:
      return fmt::format("'{}'", token.integer);
    default:
      return fmt::format("'{}'", token.text);
  }
}

}  // namespace

void TokenStream::unexpected(const std::string& expected) const {
  fail_at(peek().position, fmt::format("expected {}, found {}", expected, describe(peek())));
}

void TokenStream::expect_operator(std::string_view op) {
  if (!at_operator(op)) unexpected(fmt::format("'{}'", op));
  next();
}

std::string TokenStream::expect_name(const std::string& what) {
  if (peek().kind != TokenKind::kName) unexpected(what);
  return next().text;
}

TokenStream::Descend::Descend(TokenStream& stream, Position position) : stream_(stream) {
  if (++stream_.depth_ > kMaxParseNesting) {
    --stream_.depth_;
    fail_at(position, fmt::format("the template nests more than {} levels deep", kMaxParseNesting));
  }
}

std::string where(Position position) {
  return fmt::format("line {}, column {}", position.line, position.column);
}

}  // namespace tessera::jinja
