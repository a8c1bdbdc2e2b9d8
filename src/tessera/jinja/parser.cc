#include "tessera/jinja/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "tessera/jinja/expression_parser.h"
#include "tessera/jinja/token_stream.h"

namespace tessera::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_template() { return parse_body({}); }

 private:
  // An open block, for messages about what closes it.
  struct OpenBlock {
    std::string tag;
    Position position;
  };

  const Token& peek(size_t ahead = 0) const { return tokens_.peek(ahead); }
  const Token& next() { return tokens_.next(); }
  bool at_operator(std::string_view op) const { return tokens_.at_operator(op); }
  bool at_name(std::string_view name) const { return tokens_.at_name(name); }
  [[noreturn]] void unexpected(const std::string& expected) const { tokens_.unexpected(expected); }
  std::string expect_name(const std::string& what) { return tokens_.expect_name(what); }
  void expect_operator(std::string_view op) { tokens_.expect_operator(op); }
  ExprPtr parse_expression() { return jinja::parse_expression(tokens_); }
  ExprPtr parse_tuple(bool with_condition, bool in_for = false) {
    return jinja::parse_tuple(tokens_, with_condition, false, in_for);
  }

  void expect_block_end(std::string_view tag) {
    if (peek().kind != TokenKind::kBlockEnd) unexpected(fmt::format("'%}}' to end '{}'", tag));
    next();
  }
  // {% name %}, the tag that closes a block.
  void expect_end_tag(std::string_view name) {
    next();  // {%
    next();  // the name, which parse_body stopped at
    expect_block_end(name);
  }

  // Statements up to one of the `ends` tags (left for the caller) or, with no ends, the end.
  Body parse_body(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& token = peek();
      switch (token.kind) {
        case TokenKind::kEnd: {
          if (ends.size() == 0) return body;
          const OpenBlock& open = open_blocks_.back();
          fail_at(token.position,
                  fmt::format("the template ends before '{{% {} %}}' closes the '{}' at {}",
                              *(ends.end() - 1), open.tag, where(open.position)));
        }
        case TokenKind::kText:
          body.push_back(Stmt{token.position, TextStmt{next().text}});
          break;
        case TokenKind::kVariableBegin: {
          const Position position = next().position;
          ExprPtr value = parse_tuple(true);
          if (peek().kind != TokenKind::kVariableEnd) unexpected("'}}'");
          next();
          body.push_back(Stmt{position, PrintStmt{std::move(value)}});
          break;
        }
        case TokenKind::kBlockBegin: {
          if (peek(1).kind == TokenKind::kName &&
              std::find(ends.begin(), ends.end(), peek(1).text) != ends.end()) {
            return body;
          }
          parse_statement(body);
          break;
        }
        default:
          unexpected("text or a tag");
      }
    }
  }

  void parse_statement(Body& body) {
    const Position position = next().position;  // {%
    TokenStream::Descend descend(tokens_, position);
    if (peek().kind != TokenKind::kName) unexpected("a tag name after '{%'");
    const Token& tag = next();
    if (tag.text == "if") {
      body.push_back(Stmt{position, parse_if(position)});
    } else if (tag.text == "for") {
      body.push_back(Stmt{position, parse_for(position)});
    } else if (tag.text == "set") {
      body.push_back(Stmt{position, parse_set(position)});
    } else if (tag.text == "macro") {
      body.push_back(Stmt{position, parse_macro(position)});
    } else if (tag.text == "break" || tag.text == "continue") {
      if (loop_depth_ == 0) fail_at(tag.position, fmt::format("'{}' outside a loop", tag.text));
      expect_block_end(tag.text);
      body.push_back(Stmt{position, LoopControlStmt{tag.text == "break"}});
    } else if (tag.text == "generation") {
      // Transformers' {% generation %} marks the assistant's text for training masks; rendering
      // it is rendering its body.
      expect_block_end(tag.text);
      open_blocks_.push_back({"generation", position});
      Body inner = parse_body({"endgeneration"});
      open_blocks_.pop_back();
      expect_end_tag("endgeneration");
      for (Stmt& stmt : inner) body.push_back(std::move(stmt));
    } else if (tag.text.starts_with("end") || tag.text == "elif" || tag.text == "else") {
      if (open_blocks_.empty()) {
        fail_at(tag.position, fmt::format("'{}' with no open block for it to close", tag.text));
      }
      const OpenBlock& open = open_blocks_.back();
      fail_at(tag.position, fmt::format("unexpected '{}': the innermost open block is the '{}' "
                                        "at {}, which '{{% end{} %}}' closes",
                                        tag.text, open.tag, where(open.position), open.tag));
    } else {
      fail_at(tag.position,
              fmt::format("unknown tag '{}' (chat templates may use if, for, set, macro, raw, "
                          "generation, break and continue)",
                          tag.text));
    }
  }

  IfStmt parse_if(Position position) {
    IfStmt stmt;
    open_blocks_.push_back({"if", position});
    ExprPtr condition = parse_tuple(false);
    expect_block_end("if");
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      stmt.branches.emplace_back(std::move(condition), std::move(body));
      const std::string tag = peek(1).text;
      if (tag == "elif") {
        next();  // {%
        next();  // elif
        condition = parse_tuple(false);
        expect_block_end("elif");
        continue;
      }
      if (tag == "else") {
        expect_end_tag("else");
        stmt.otherwise = parse_body({"endif"});
      }
      expect_end_tag("endif");
      break;
    }
    open_blocks_.pop_back();
    return stmt;
  }

  ForStmt parse_for(Position position) {
    ForStmt stmt;
    open_blocks_.push_back({"for", position});
    const bool parenthesized = at_operator("(");
    if (parenthesized) next();
    stmt.targets.push_back(expect_name("a loop variable"));
    while (at_operator(",")) {
      next();
      stmt.unpacks = true;
      if (parenthesized && at_operator(")")) break;
      stmt.targets.push_back(expect_name("a loop variable"));
    }
    if (parenthesized) {
      expect_operator(")");
      stmt.unpacks = true;
    }
    if (!at_name("in")) unexpected("'in'");
    next();
    stmt.iterable = parse_tuple(false, true);
    if (at_name("if")) {
      next();
      stmt.condition = parse_expression();
    }
    if (at_name("recursive")) fail_at(peek().position, "recursive loops are not supported");
    expect_block_end("for");
    ++loop_depth_;
    stmt.body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (peek(1).text == "else") {
      expect_end_tag("else");
      stmt.otherwise = parse_body({"endfor"});
    }
    expect_end_tag("endfor");
    open_blocks_.pop_back();
    return stmt;
  }

  SetStmt parse_set(Position position) {
    SetStmt stmt;
    stmt.targets.push_back(expect_name("a variable to set"));
    if (at_operator(".")) {
      next();
      stmt.attribute = expect_name("an attribute name");
    } else {
      while (at_operator(",")) {
        next();
        stmt.unpacks = true;
        stmt.targets.push_back(expect_name("a variable to set"));
      }
    }
    if (at_operator("=")) {
      next();
      stmt.value = parse_tuple(true);
      expect_block_end("set");
      return stmt;
    }
    if (!stmt.attribute.empty() || stmt.unpacks) unexpected("'='");
    expect_block_end("set");
    open_blocks_.push_back({"set", position});
    stmt.body = parse_body({"endset"});
    expect_end_tag("endset");
    open_blocks_.pop_back();
    return stmt;
  }

  MacroStmt parse_macro(Position position) {
    MacroStmt stmt;
    stmt.name = expect_name("the macro's name");
    expect_operator("(");
    while (!at_operator(")")) {
      if (!stmt.params.empty()) expect_operator(",");
      if (at_operator(")")) break;
      const Position param = peek().position;
      std::string name = expect_name("a parameter name");
      ExprPtr default_value;
      if (at_operator("=")) {
        next();
        default_value = parse_expression();
      } else if (!stmt.params.empty() && stmt.params.back().second) {
        fail_at(param,
                fmt::format("parameter '{}' without a default follows one with a default", name));
      }
      stmt.params.emplace_back(std::move(name), std::move(default_value));
    }
    next();  // )
    expect_block_end("macro");
    open_blocks_.push_back({"macro", position});
    const int enclosing_loops = std::exchange(loop_depth_, 0);
    stmt.body = parse_body({"endmacro"});
    loop_depth_ = enclosing_loops;
    expect_end_tag("endmacro");
    open_blocks_.pop_back();
    return stmt;
  }

  TokenStream tokens_;
  int loop_depth_ = 0;
  std::vector<OpenBlock> open_blocks_;
};

}  // namespace

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace tessera::jinja
