#include "tessera/jinja/operators.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/jinja/access.h"

namespace tessera::jinja {

namespace {

bool is_integral(const Value& value) {
  return value.kind() == Value::Kind::kInt || value.kind() == Value::Kind::kBool;
}

int64_t integer(const Value& value) {
  return value.kind() == Value::Kind::kBool ? int64_t{value.as_bool()} : value.as_int();
}

[[noreturn]] void unsupported(std::string_view op, const Value& left, const Value& right) {
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(left), type_name(right));
}

void check_overflow(bool overflowed, std::string_view op) {
  check(!overflowed, "integer overflow in {}: chat templates compute with 64-bit integers", op);
}

Value integer_power(int64_t base, int64_t exponent) {
  int64_t result = 1;
  for (; exponent > 0; exponent >>= 1) {
    if (exponent & 1) check_overflow(__builtin_mul_overflow(result, base, &result), "**");
    if (exponent > 1) check_overflow(__builtin_mul_overflow(base, base, &base), "**");
  }
  return result;
}

Value arithmetic(std::string_view op, const Value& left, const Value& right) {
  if (is_integral(left) && is_integral(right)) {
    const int64_t a = integer(left), b = integer(right);
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      check_overflow(op == "+"   ? __builtin_add_overflow(a, b, &r)
                     : op == "-" ? __builtin_sub_overflow(a, b, &r)
                                 : __builtin_mul_overflow(a, b, &r),
                     op);
      return r;
    }
    if (op == "**") return b >= 0 ? integer_power(a, b) : Value(std::pow(double(a), double(b)));
    check(b != 0, "{} by zero",
          op == "/"    ? "division"
          : op == "//" ? "integer division"
                       : "modulo");
    if (op == "/") return double(a) / double(b);
    check(!(a == INT64_MIN && b == -1), "integer overflow in {}", op);
    const int64_t quotient = a / b, remainder = a % b;
    const bool adjust = remainder != 0 && ((remainder < 0) != (b < 0));
    return op == "//" ? quotient - adjust : remainder + (adjust ? b : 0);
  }
  const double a = left.as_number(), b = right.as_number();
  if (op == "+") return a + b;
  if (op == "-") return a - b;
  if (op == "*") return a * b;
  if (op == "**") {
    check(!(a == 0 && b < 0), "0.0 cannot be raised to a negative power");
    check(a >= 0 || b == std::floor(b), "a negative number raised to a fractional power");
    return std::pow(a, b);
  }
  check(b != 0, "float {} by zero",
        op == "/"    ? "division"
        : op == "//" ? "floor division"
                     : "modulo");
  if (op == "/") return a / b;
  const double remainder = std::fmod(a, b);
  const bool adjust = remainder != 0 && ((remainder < 0) != (b < 0));
  if (op == "%") return adjust ? remainder + b : remainder;
  return std::floor((a - remainder) / b + 0.5) - (adjust ? 1 : 0);
}

Value repeat(const Value& sequence, const Value& count, Budget& budget) {
  const int64_t times = std::max<int64_t>(0, integer(count));
  if (sequence.is_string()) {
    const std::string& text = sequence.as_string();
    check(text.empty() || times <= int64_t(kMaxStringBytes / text.size()),
          "repeating a string of {} bytes {} times passes the {} byte limit", text.size(), times,
          kMaxStringBytes);
    std::string out;
    out.reserve(text.size() * times);
    for (int64_t i = 0; i < times; ++i) out += text;
    return make_string(budget, std::move(out));
  }
  const List& list = sequence.as_list();
  budget.items(int64_t(list.items.size()) * std::min<int64_t>(times, kMaxItems + 1));
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i)
    items.insert(items.end(), list.items.begin(), list.items.end());
  return list.is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

}  // namespace

Value binary_operation(std::string_view op, const Value& left, const Value& right, Budget& budget) {
  if (op == "~") {
    const std::string a = to_str(left), b = to_str(right);
    budget.string(a.size() + b.size());
    return a + b;
  }
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  if (left.is_number() && right.is_number()) return arithmetic(op, left, right);
  if (op == "+" && left.is_string() && right.is_string()) {
    budget.string(left.as_string().size() + right.as_string().size());
    return left.as_string() + right.as_string();
  }
  if (op == "+" && left.is_sequence() && right.is_sequence() &&
      left.as_list().is_tuple == right.as_list().is_tuple) {
    budget.items(int64_t(left.as_list().items.size() + right.as_list().items.size()));
    std::vector<Value> items = left.as_list().items;
    items.insert(items.end(), right.as_list().items.begin(), right.as_list().items.end());
    return left.as_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (op == "*" && is_integral(right) && (left.is_string() || left.is_sequence())) {
    return repeat(left, right, budget);
  }
  if (op == "*" && is_integral(left) && (right.is_string() || right.is_sequence())) {
    return repeat(right, left, budget);
  }
  if (op == "%" && left.is_string()) fail("formatting strings with % is not supported");
  unsupported(op, left, right);
}

Value unary_sign(const Value& value, bool negate) {
  if (value.is_undefined()) fail_undefined(value);
  if (is_integral(value)) {
    const int64_t n = integer(value);
    check(!(negate && n == INT64_MIN), "integer overflow in unary -");
    return negate ? -n : n;
  }
  check(value.kind() == Value::Kind::kFloat, "bad operand type for unary {}: '{}'",
        negate ? '-' : '+', type_name(value));
  return negate ? -value.as_float() : value.as_float();
}

}  // namespace tessera::jinja
