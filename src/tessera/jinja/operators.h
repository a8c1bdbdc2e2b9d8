// Python's arithmetic on template values: + - * / // % ** on numbers, + and * on strings and
// lists, and jinja2's ~, which joins anything as strings. Integers are 64-bit: a result beyond
// that is an Error where Python would grow the integer.
#pragma once

#include <string_view>

#include "tessera/jinja/limits.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja {

Value binary_operation(std::string_view op, const Value& left, const Value& right, Budget& budget);
// -value, or +value when `negate` is false.
Value unary_sign(const Value& value, bool negate);

}  // namespace tessera::jinja
