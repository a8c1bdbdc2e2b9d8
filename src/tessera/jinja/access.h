// Reading attributes and items as jinja2's sandbox does: `obj.name` looks for an attribute (a
// method of str, dict or list) before an item, `obj[key]` for an item before an attribute, and
// what neither finds is undefined. Methods that would change a value are refused, as the
// immutable sandbox Hugging Face renders chat templates in refuses them.
#pragma once

#include <string>

#include "tessera/jinja/limits.h"
#include "tessera/jinja/value.h"

namespace tessera::jinja {

Value get_attribute(const Value& object, const std::string& name, Budget& budget);
Value get_item(const Value& object, const Value& key, Budget& budget);
// object[start:stop:step], each bound possibly undefined (left out).
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step,
                Budget& budget);

// A string the template built, counted against the budget.
Value make_string(Budget& budget, std::string text);
// An argument that must be a string or an integer; `what` names it in the error.
const std::string& string_arg(const Value& value, std::string_view what);
int64_t int_arg(const Value& value, std::string_view what);

}  // namespace tessera::jinja
