#include "tessera/jinja/expression_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "tessera/jinja/filters.h"
#include "tessera/jinja/limits.h"

namespace tessera::jinja {

namespace {

class ExpressionParser {
 public:
  explicit ExpressionParser(TokenStream& stream) : stream_(stream) {}

  ExprPtr parse_tuple(bool with_condition, bool explicit_parentheses, bool in_for = false) {
    const Position position = peek().position;
    const auto at_end = [&] {
      const TokenKind kind = peek().kind;
      return kind == TokenKind::kVariableEnd || kind == TokenKind::kBlockEnd || at_operator(")") ||
             (in_for && at_name("recursive"));
    };
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_operator(",");
      if (at_end()) break;
      items.push_back(parse_expression(with_condition));
      if (!at_operator(",")) break;
      is_tuple = true;
    }
    if (!is_tuple && !items.empty()) return std::move(items[0]);
    if (!is_tuple && !explicit_parentheses) unexpected("an expression");
    return finish(node(ExprKind::kTuple, position, std::move(items)));
  }

  ExprPtr parse_expression(bool with_condition = true) {
    TokenStream::Descend descend(stream_, peek().position);
    return with_condition ? parse_condition() : parse_or();
  }

 private:
  ExprPtr parse_condition() {
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      const Position position = next().position;
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (at_name("else")) {
        next();
        otherwise = parse_condition();
      }
      std::vector<ExprPtr> operands;
      operands.push_back(std::move(expr));
      operands.push_back(std::move(test));
      operands.push_back(std::move(otherwise));
      expr = finish(node(ExprKind::kCondition, position, std::move(operands)));
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      next();
      left = binary(ExprKind::kOr, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      next();
      left = binary(ExprKind::kAnd, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (!at_name("not")) return parse_compare();
    const Position position = next().position;
    TokenStream::Descend descend(stream_, position);
    std::vector<ExprPtr> operands;
    operands.push_back(parse_not());
    return finish(node(ExprKind::kNot, position, std::move(operands)));
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_sum();
    std::vector<ExprPtr> operands;
    std::vector<std::string> comparisons;
    while (true) {
      static constexpr std::string_view kOperators[] = {"==", "!=", "<", "<=", ">", ">="};
      if (peek().kind == TokenKind::kOperator &&
          std::find(std::begin(kOperators), std::end(kOperators), peek().text) !=
              std::end(kOperators)) {
        comparisons.push_back(next().text);
      } else if (at_name("in")) {
        next();
        comparisons.push_back("in");
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        comparisons.push_back("not in");
      } else {
        break;
      }
      operands.push_back(parse_sum());
    }
    if (comparisons.empty()) return first;
    const Position position = first->position;
    operands.insert(operands.begin(), std::move(first));
    ExprPtr expr = node(ExprKind::kCompare, position, std::move(operands));
    expr->comparisons = std::move(comparisons);
    return finish(std::move(expr));
  }

  ExprPtr parse_sum() {
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      std::string op = next().text;
      left = binary(ExprKind::kBinary, std::move(op), std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_product();
    while (at_operator("~")) {
      next();
      left = binary(ExprKind::kBinary, "~", std::move(left), parse_product());
    }
    return left;
  }

  ExprPtr parse_product() {
    ExprPtr left = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      std::string op = next().text;
      left = binary(ExprKind::kBinary, std::move(op), std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_operator("**")) {
      next();
      left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Position position = peek().position;
    TokenStream::Descend descend(stream_, position);
    ExprPtr expr;
    if (at_operator("-") || at_operator("+")) {
      const ExprKind kind = next().text == "-" ? ExprKind::kNegative : ExprKind::kPositive;
      std::vector<ExprPtr> operands;
      operands.push_back(parse_unary(false));
      expr = finish(node(kind, position, std::move(operands)));
    } else {
      expr = parse_primary();
    }
    expr = parse_postfix(std::move(expr));
    return with_filter ? parse_filters_and_tests(std::move(expr)) : std::move(expr);
  }

  ExprPtr parse_primary() {
    const Token& token = peek();
    const Position position = token.position;
    switch (token.kind) {
      case TokenKind::kName: {
        const std::string& name = next().text;
        ExprPtr expr = node(ExprKind::kConstant, position);
        if (name == "true" || name == "True") {
          expr->constant = true;
        } else if (name == "false" || name == "False") {
          expr->constant = false;
        } else if (name == "none" || name == "None") {
          expr->constant = nullptr;
        } else {
          expr->kind = ExprKind::kName;
          expr->name = name;
        }
        return expr;
      }
      case TokenKind::kString: {
        std::string text = next().text;
        while (peek().kind == TokenKind::kString) text += next().text;
        ExprPtr expr = node(ExprKind::kConstant, position);
        expr->constant = std::move(text);
        return expr;
      }
      case TokenKind::kInteger:
      case TokenKind::kFloat: {
        ExprPtr expr = node(ExprKind::kConstant, position);
        expr->constant =
            token.kind == TokenKind::kInteger ? Value(token.integer) : Value(token.number);
        next();
        return expr;
      }
      default:
        break;
    }
    if (at_operator("(")) {
      next();
      ExprPtr expr = parse_tuple(true, true);
      expect_operator(")");
      return expr;
    }
    if (at_operator("[")) {
      next();
      std::vector<ExprPtr> items;
      while (!at_operator("]")) {
        if (!items.empty()) expect_operator(",");
        if (at_operator("]")) break;
        items.push_back(parse_expression());
      }
      next();
      return finish(node(ExprKind::kList, position, std::move(items)));
    }
    if (at_operator("{")) {
      next();
      std::vector<ExprPtr> items;
      while (!at_operator("}")) {
        if (!items.empty()) expect_operator(",");
        if (at_operator("}")) break;
        items.push_back(parse_expression());
        expect_operator(":");
        items.push_back(parse_expression());
      }
      next();
      return finish(node(ExprKind::kDict, position, std::move(items)));
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      const Position position = peek().position;
      if (at_operator(".")) {
        next();
        std::vector<ExprPtr> operands;
        operands.push_back(std::move(expr));
        if (peek().kind == TokenKind::kInteger) {
          ExprPtr index = node(ExprKind::kConstant, peek().position);
          index->constant = next().integer;
          operands.push_back(std::move(index));
          expr = finish(node(ExprKind::kItem, position, std::move(operands)));
        } else {
          expr = node(ExprKind::kAttribute, position, std::move(operands));
          expr->name = expect_name("an attribute name after '.'");
          expr = finish(std::move(expr));
        }
      } else if (at_operator("[")) {
        next();
        expr = parse_subscript(std::move(expr), position);
        expect_operator("]");
      } else if (at_operator("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  // What follows '[': an index or a slice with up to three bounds.
  ExprPtr parse_subscript(ExprPtr object, Position position) {
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(object));
    ExprPtr first;
    if (!at_operator(":")) {
      first = parse_expression();
      if (!at_operator(":")) {
        operands.push_back(std::move(first));
        return finish(node(ExprKind::kItem, position, std::move(operands)));
      }
    }
    operands.push_back(std::move(first));
    for (int bound = 0; bound < 2; ++bound) {
      ExprPtr value;
      if (at_operator(":")) {
        next();
        if (!at_operator("]") && !at_operator(":")) value = parse_expression();
      }
      operands.push_back(std::move(value));
    }
    return finish(node(ExprKind::kSlice, position, std::move(operands)));
  }

  // A call is placed where its callee starts: an error in raise_exception(...) is reported there.
  ExprPtr parse_call(ExprPtr callee) {
    const Position position = callee->position;
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(callee));
    ExprPtr call = node(ExprKind::kCall, position, std::move(operands));
    parse_call_args(*call);
    return finish(std::move(call));
  }

  void parse_call_args(Expr& call) {
    expect_operator("(");
    while (!at_operator(")")) {
      if (!call.args.empty() || !call.kwargs.empty()) expect_operator(",");
      if (at_operator(")")) break;
      if (at_operator("*") || at_operator("**")) {
        fail_at(peek().position, "argument unpacking with * and ** is not supported");
      }
      if (peek().kind == TokenKind::kName && at_operator("=", 1)) {
        std::string name = next().text;
        next();
        call.kwargs.emplace_back(std::move(name), parse_expression());
      } else {
        if (!call.kwargs.empty()) {
          fail_at(peek().position, "a positional argument follows a keyword argument");
        }
        call.args.push_back(parse_expression());
      }
    }
    next();  // )
  }

  std::string dotted_name(const std::string& what) {
    std::string name = expect_name(what);
    while (at_operator(".") && peek(1).kind == TokenKind::kName) {
      next();
      name += "." + next().text;
    }
    return name;
  }

  ExprPtr parse_filters_and_tests(ExprPtr expr) {
    while (true) {
      const Position position = peek().position;
      if (at_operator("|")) {
        next();
        const Position name_position = peek().position;
        std::vector<ExprPtr> operands;
        operands.push_back(std::move(expr));
        expr = node(ExprKind::kFilter, position, std::move(operands));
        expr->name = dotted_name("a filter name after '|'");
        if (!is_filter(expr->name)) {
          fail_at(name_position, fmt::format("no filter named '{}'", expr->name));
        }
        if (at_operator("(")) parse_call_args(*expr);
        expr = finish(std::move(expr));
      } else if (at_name("is")) {
        next();
        const bool negated = at_name("not");
        if (negated) next();
        const Position name_position = peek().position;
        std::vector<ExprPtr> operands;
        operands.push_back(std::move(expr));
        expr = node(ExprKind::kTest, position, std::move(operands));
        expr->name = dotted_name("a test name after 'is'");
        if (!is_test(expr->name))
          fail_at(name_position, fmt::format("no test named '{}'", expr->name));
        if (at_operator("(")) {
          parse_call_args(*expr);
        } else if (starts_test_argument()) {
          if (at_name("is")) fail_at(peek().position, "tests cannot be chained with 'is'");
          expr->args.push_back(parse_postfix(parse_primary()));
        }
        expr = finish(std::move(expr));
        if (negated) {
          std::vector<ExprPtr> inner;
          inner.push_back(std::move(expr));
          expr = finish(node(ExprKind::kNot, position, std::move(inner)));
        }
      } else if (at_operator("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  // jinja2 takes one argument without parentheses: `x is divisibleby 3`, `x is equalto 'user'`.
  bool starts_test_argument() const {
    const Token& token = peek();
    if (token.kind == TokenKind::kName) {
      return token.text != "else" && token.text != "or" && token.text != "and";
    }
    return token.kind == TokenKind::kString || token.kind == TokenKind::kInteger ||
           token.kind == TokenKind::kFloat || at_operator("[") || at_operator("{");
  }

  const Token& peek(size_t ahead = 0) const { return stream_.peek(ahead); }
  const Token& next() { return stream_.next(); }
  bool at_operator(std::string_view op, size_t ahead = 0) const {
    return stream_.at_operator(op, ahead);
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return stream_.at_name(name, ahead);
  }
  [[noreturn]] void unexpected(const std::string& expected) const { stream_.unexpected(expected); }
  void expect_operator(std::string_view op) { stream_.expect_operator(op); }
  std::string expect_name(const std::string& what) { return stream_.expect_name(what); }

  ExprPtr node(ExprKind kind, Position position, std::vector<ExprPtr> operands = {}) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->position = position;
    expr->operands = std::move(operands);
    return expr;
  }

  // Records the node's height once its children are in place.
  ExprPtr finish(ExprPtr expr) {
    int height = 0;
    for (const ExprPtr& child : expr->operands)
      height = std::max(height, child ? child->height : 0);
    for (const ExprPtr& child : expr->args) height = std::max(height, child->height);
    for (const auto& [name, child] : expr->kwargs) height = std::max(height, child->height);
    expr->height = height + 1;
    if (expr->height > kMaxExpressionHeight) {
      fail_at(expr->position,
              fmt::format("an expression nests more than {} levels deep", kMaxExpressionHeight));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, std::string op, ExprPtr left, ExprPtr right) {
    const Position position = left->position;
    std::vector<ExprPtr> operands;
    operands.push_back(std::move(left));
    operands.push_back(std::move(right));
    ExprPtr expr = node(kind, position, std::move(operands));
    expr->name = std::move(op);
    return finish(std::move(expr));
  }

  TokenStream& stream_;
};

}  // namespace

ExprPtr parse_expression(TokenStream& tokens, bool with_condition) {
  return ExpressionParser(tokens).parse_expression(with_condition);
}

ExprPtr parse_tuple(TokenStream& tokens, bool with_condition, bool explicit_parentheses,
                    bool in_for) {
  return ExpressionParser(tokens).parse_tuple(with_condition, explicit_parentheses, in_for);
}

}  // namespace tessera::jinja
