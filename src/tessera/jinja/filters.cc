#include "tessera/jinja/filters.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "tessera/core/error.h"
#include "tessera/jinja/access.h"
#include "tessera/jinja/text.h"

namespace tessera::jinja {

namespace {

using Filter = Value (*)(const Value& input, const CallArgs& call, Budget& budget);
using Test = bool (*)(const Value& value, const CallArgs& call);

Value list_of(std::vector<Value> items, Budget& budget) {
  budget.items(int64_t(items.size()));
  return Value::list(std::move(items));
}

// jinja2's attribute getter for filters: "a.b.0" reads item a, then b, then index 0.
Value attribute_of(const Value& item, const std::string& path, Budget& budget) {
  Value value = item;
  for (const std::string& part : python_split(path, std::string("."), -1)) {
    int64_t index = 0;
    const auto parsed = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool is_index = !part.empty() && part[0] != '-' && parsed.ec == std::errc() &&
                          parsed.ptr == part.data() + part.size();
    value = get_item(value, is_index ? Value(index) : Value(part), budget);
  }
  return value;
}

// Text without surrounding whitespace and with underscores only between digits, or nothing.
std::optional<std::string> python_number_text(std::string_view text) {
  const std::string stripped = python_strip(text, std::nullopt, true, true);
  std::string out;
  for (size_t i = 0; i < stripped.size(); ++i) {
    if (stripped[i] != '_') {
      out += stripped[i];
      continue;
    }
    const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)); };
    if (i == 0 || i + 1 == stripped.size() || !alnum(stripped[i - 1]) || !alnum(stripped[i + 1])) {
      return std::nullopt;
    }
  }
  return out;
}

// Python's int(text, base), or nothing where Python raises ValueError.
std::optional<int64_t> parse_int(std::string_view text, int base) {
  std::optional<std::string> digits = python_number_text(text);
  if (!digits || digits->empty()) return std::nullopt;
  std::string_view rest = *digits;
  const bool negative = rest.front() == '-';
  if (rest.front() == '-' || rest.front() == '+') rest.remove_prefix(1);
  const char prefix = base == 16 ? 'x' : base == 8 ? 'o' : base == 2 ? 'b' : '\0';
  if (prefix && rest.size() > 2 && rest[0] == '0' && std::tolower(rest[1]) == prefix) {
    rest.remove_prefix(2);
  }
  uint64_t magnitude = 0;
  const auto result = std::from_chars(rest.data(), rest.data() + rest.size(), magnitude, base);
  if (rest.empty() || result.ptr != rest.data() + rest.size()) return std::nullopt;
  check(result.ec == std::errc() && magnitude <= uint64_t(INT64_MAX) + negative,
        "the integer {} is too large", text);
  return negative ? int64_t(0 - magnitude) : int64_t(magnitude);
}

// Python's float(text), or nothing where Python raises ValueError.
std::optional<double> parse_float(std::string_view text) {
  std::optional<std::string> digits = python_number_text(text);
  if (!digits || digits->empty()) return std::nullopt;
  std::string lower = python_lower(*digits);
  const bool negative = lower.front() == '-';
  std::string_view rest = lower;
  if (rest.front() == '-' || rest.front() == '+') rest.remove_prefix(1);
  if (rest == "inf" || rest == "infinity") return negative ? -INFINITY : INFINITY;
  if (rest == "nan") return NAN;
  if (rest.empty() ||
      !(std::isdigit(static_cast<unsigned char>(rest.front())) || rest.front() == '.')) {
    return std::nullopt;
  }
  double value = 0;
  const auto result = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (result.ptr != rest.data() + rest.size() || result.ec == std::errc::invalid_argument) {
    return std::nullopt;
  }
  // Out of range: strtod gives infinity or zero, as Python's float() does.
  if (result.ec == std::errc::result_out_of_range)
    value = std::strtod(std::string(rest).c_str(), nullptr);
  return negative ? -value : value;
}

std::optional<int64_t> float_to_int(double value) {
  if (std::isnan(value)) return std::nullopt;
  check(std::isfinite(value) && std::fabs(value) < 9.2e18, "cannot convert {} to an integer",
        python_float_repr(value));
  return int64_t(value);
}

Value filter_abs(const Value& input, const CallArgs& call, Budget&) {
  check_no_args("abs()", call);
  switch (input.kind()) {
    case Value::Kind::kBool:
      return int64_t{input.as_bool()};
    case Value::Kind::kInt:
      check(input.as_int() != INT64_MIN, "abs() of {} overflows", input.as_int());
      return input.as_int() < 0 ? -input.as_int() : input.as_int();
    case Value::Kind::kFloat:
      return std::fabs(input.as_float());
    case Value::Kind::kUndefined:
      fail_undefined(input);
    default:
      fail("bad operand type for abs(): '{}'", type_name(input));
  }
}

// The filters that turn str(input) into another string.
template <std::string (*transform)(std::string_view)>
Value string_filter(const Value& input, const CallArgs& call, Budget& budget) {
  check_no_args("this filter", call);
  return make_string(budget, transform(to_str(input)));
}

Value filter_default(const Value& input, const CallArgs& call, Budget&) {
  const BoundArgs args("default", call, {"default_value", "boolean"});
  if (input.is_undefined() || (truthy(args.get(1, false)) && !truthy(input))) {
    return args.get(0, "");
  }
  return input;
}

Value filter_first(const Value& input, const CallArgs& call, Budget&) {
  check_no_args("first()", call);
  const std::vector<Value> items = iterate(input);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(const Value& input, const CallArgs& call, Budget&) {
  check_no_args("last()", call);
  const std::vector<Value> items = iterate(input);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value filter_int(const Value& input, const CallArgs& call, Budget&) {
  const BoundArgs args("int", call, {"default", "base"});
  const Value fallback = args.get(0, int64_t{0});
  std::optional<int64_t> value;
  if (input.is_string()) {
    value = parse_int(input.as_string(), int(int_arg(args.get(1, int64_t{10}), "base")));
    if (!value) {
      if (std::optional<double> number = parse_float(input.as_string())) {
        value = float_to_int(*number);
      }
    }
  } else if (input.kind() == Value::Kind::kBool || input.kind() == Value::Kind::kInt) {
    return int_arg(input, "int");
  } else if (input.kind() == Value::Kind::kFloat) {
    value = float_to_int(input.as_float());
  }
  return value ? Value(*value) : fallback;
}

Value filter_float(const Value& input, const CallArgs& call, Budget&) {
  const BoundArgs args("float", call, {"default"});
  if (input.is_number()) return input.as_number();
  if (input.is_string()) {
    if (std::optional<double> value = parse_float(input.as_string())) return *value;
  }
  return args.get(0, 0.0);
}

Value filter_indent(const Value& input, const CallArgs& call, Budget& budget) {
  const BoundArgs args("indent", call, {"width", "first", "blank"});
  const Value width = args.get(0, int64_t{4});
  const std::string indent =
      width.is_string()
          ? width.as_string()
          : std::string(std::max<int64_t>(0, std::min<int64_t>(int_arg(width, "width"), 4096)),
                        ' ');
  // As jinja2 does: a line break is added so that splitlines() keeps a trailing empty line.
  const std::vector<std::string> lines = python_splitlines(to_str(input) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool indented =
        i == 0 ? truthy(args.get(1, false)) : truthy(args.get(2, false)) || !lines[i].empty();
    if (indented) out += indent;
    out += lines[i];
    check(out.size() <= kMaxStringBytes, "indent would build a string of more than {} bytes",
          kMaxStringBytes);
  }
  return make_string(budget, std::move(out));
}

Value filter_items(const Value& input, const CallArgs& call, Budget& budget) {
  check_no_args("items()", call);
  if (input.is_undefined()) return Value::list({});
  check(input.kind() == Value::Kind::kDict, "can only get item pairs from a mapping, not '{}'",
        type_name(input));
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries()) {
    pairs.push_back(Value::tuple({Value(key), value}));
  }
  return list_of(std::move(pairs), budget);
}

Value filter_join(const Value& input, const CallArgs& call, Budget& budget) {
  const BoundArgs args("join", call, {"d", "attribute"});
  const std::string separator = to_str(args.get(0, ""));
  std::string out;
  bool first = true;
  for (const Value& item : iterate(input)) {
    if (!first) out += separator;
    first = false;
    out += to_str(args.has(1) ? attribute_of(item, to_str(args.get(1)), budget) : item);
    check(out.size() <= kMaxStringBytes, "join would build a string of more than {} bytes",
          kMaxStringBytes);
  }
  return make_string(budget, std::move(out));
}

Value filter_length(const Value& input, const CallArgs& call, Budget&) {
  check_no_args("length()", call);
  switch (input.kind()) {
    case Value::Kind::kUndefined:
      return int64_t{0};
    case Value::Kind::kString:
      return int64_t(code_point_count(input.as_string()));
    case Value::Kind::kList:
      return int64_t(input.as_list().items.size());
    case Value::Kind::kDict:
      return int64_t(input.as_dict().entries().size());
    default:
      fail("object of type '{}' has no len()", type_name(input));
  }
}

Value filter_list(const Value& input, const CallArgs& call, Budget& budget) {
  check_no_args("list()", call);
  return list_of(iterate(input), budget);
}

// map, select, reject, selectattr and rejectattr give nothing for a false input (none
// included) without looking at their arguments, as jinja2's do.
Value filter_map(const Value& input, const CallArgs& call, Budget& budget) {
  std::vector<Value> out;
  if (!truthy(input)) return Value::list({});
  if (call.positional.empty()) {
    const BoundArgs args("map", call, {"attribute", "default"});
    check(args.has(0), "map() needs the name of a filter or attribute=");
    const std::string attribute = to_str(args.get(0));
    for (const Value& item : iterate(input)) {
      Value value = attribute_of(item, attribute, budget);
      if (value.is_undefined() && args.has(1) && !args.get(1).is_none()) value = args.get(1);
      out.push_back(std::move(value));
    }
    return list_of(std::move(out), budget);
  }
  const std::string& filter = string_arg(call.positional[0], "map()'s filter name");
  check(is_filter(filter), "map() names no filter: '{}'", filter);
  CallArgs rest{{call.positional.begin() + 1, call.positional.end()}, call.keyword};
  for (const Value& item : iterate(input)) out.push_back(apply_filter(filter, item, rest, budget));
  return list_of(std::move(out), budget);
}

Value filter_replace(const Value& input, const CallArgs& call, Budget& budget) {
  const BoundArgs args("replace", call, {"old", "new", "count"});
  CallArgs method_args{{args.get(0), args.get(1)}, {}};
  if (args.has(2) && !args.get(2).is_none()) method_args.positional.push_back(args.get(2));
  const Value method = get_attribute(Value(to_str(input)), "replace", budget);
  return method.as_callable().call(method_args);
}

Value filter_reverse(const Value& input, const CallArgs& call, Budget& budget) {
  check_no_args("reverse()", call);
  if (input.is_string()) {
    std::u32string cps = to_code_points(input.as_string());
    std::reverse(cps.begin(), cps.end());
    return make_string(budget, to_utf8(cps));
  }
  std::vector<Value> items = iterate(input);
  std::reverse(items.begin(), items.end());
  return list_of(std::move(items), budget);
}

Value filter_safe(const Value& input, const CallArgs& call, Budget&) {
  check_no_args("safe()", call);
  return input;
}

// select, reject, selectattr and rejectattr: keep the items whose test (or truth) is `keep`.
Value select_items(const Value& input, const CallArgs& call, Budget& budget, bool keep,
                   bool by_attribute) {
  if (!truthy(input)) return Value::list({});
  const char* name =
      by_attribute ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    check(!call.positional.empty(), "{}() needs an attribute name", name);
    attribute = to_str(call.positional[next++]);
  }
  std::string test;
  if (next < call.positional.size()) test = string_arg(call.positional[next++], "the test name");
  check(test.empty() || is_test(test), "{}() names no test: '{}'", name, test);
  CallArgs test_args{{call.positional.begin() + next, call.positional.end()}, call.keyword};
  std::vector<Value> out;
  for (const Value& item : iterate(input)) {
    const Value subject = by_attribute ? attribute_of(item, attribute, budget) : item;
    const bool passes = test.empty() ? truthy(subject) : apply_test(test, subject, test_args);
    if (passes == keep) out.push_back(item);
  }
  return list_of(std::move(out), budget);
}

Value filter_select(const Value& in, const CallArgs& c, Budget& b) {
  return select_items(in, c, b, true, false);
}
Value filter_reject(const Value& in, const CallArgs& c, Budget& b) {
  return select_items(in, c, b, false, false);
}
Value filter_selectattr(const Value& in, const CallArgs& c, Budget& b) {
  return select_items(in, c, b, true, true);
}
Value filter_rejectattr(const Value& in, const CallArgs& c, Budget& b) {
  return select_items(in, c, b, false, true);
}

// The key sort and unique compare items by: strings lowercased unless case matters.
Value comparison_key(const Value& item, bool case_sensitive, const Value& attribute,
                     Budget& budget) {
  Value key = attribute.is_undefined() || attribute.is_none()
                  ? item
                  : attribute_of(item, to_str(attribute), budget);
  if (!case_sensitive && key.is_string()) return python_lower(key.as_string());
  return key;
}

Value filter_sort(const Value& input, const CallArgs& call, Budget& budget) {
  const BoundArgs args("sort", call, {"reverse", "case_sensitive", "attribute"});
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : iterate(input)) {
    Value key = comparison_key(item, truthy(args.get(1, false)), args.get(2), budget);
    keyed.emplace_back(std::move(key), std::move(item));
  }
  const bool descending = truthy(args.get(0, false));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return descending ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return list_of(std::move(out), budget);
}

// A string equal for values Python's set treats as one (1, 1.0 and True are one).
std::string hash_key(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat: {
      const double number = value.as_number();
      if (value.kind() != Value::Kind::kFloat || number == std::floor(number)) {
        return "n" + std::to_string(value.kind() == Value::Kind::kFloat  ? int64_t(number)
                                    : value.kind() == Value::Kind::kBool ? int64_t{value.as_bool()}
                                                                         : value.as_int());
      }
      return "n" + python_float_repr(number);
    }
    case Value::Kind::kList: {
      check(value.as_list().is_tuple, "unhashable type: 'list'");
      std::string key = "t";
      for (const Value& item : value.as_list().items) key += hash_key(item) + '\x1f';
      return key;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      fail("unhashable type: '{}'", type_name(value));
    default:
      return type_name(value) + ":" + to_str(value);
  }
}

Value filter_unique(const Value& input, const CallArgs& call, Budget& budget) {
  const BoundArgs args("unique", call, {"case_sensitive", "attribute"});
  std::set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(input)) {
    const Value key = comparison_key(item, truthy(args.get(0, false)), args.get(1), budget);
    if (seen.insert(hash_key(key)).second) out.push_back(item);
  }
  return list_of(std::move(out), budget);
}

Value filter_string(const Value& input, const CallArgs& call, Budget& budget) {
  check_no_args("string()", call);
  return input.is_string() ? input : make_string(budget, to_str(input));
}

Value filter_tojson(const Value& input, const CallArgs& call, Budget& budget) {
  const BoundArgs args("tojson", call, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonFormat format;
  format.ensure_ascii = truthy(args.get(0, false));
  const Value indent = args.get(1, nullptr);
  if (indent.is_string()) {
    format.indent = indent.as_string();
  } else if (!indent.is_none()) {
    format.indent = std::string(std::clamp<int64_t>(int_arg(indent, "indent"), 0, 4096), ' ');
  }
  const Value separators = args.get(2, nullptr);
  if (separators.is_none()) {
    format.item_separator = format.indent ? "," : ", ";
  } else {
    check(separators.is_sequence() && separators.as_list().items.size() == 2,
          "separators must be a pair of strings");
    format.item_separator = string_arg(separators.as_list().items[0], "the item separator");
    format.key_separator = string_arg(separators.as_list().items[1], "the key separator");
  }
  format.sort_keys = truthy(args.get(3, false));
  return make_string(budget, to_json(input, format));
}

Value filter_trim(const Value& input, const CallArgs& call, Budget& budget) {
  const BoundArgs args("trim", call, {"chars"});
  const Value chars = args.get(0, nullptr);
  return make_string(
      budget,
      python_strip(to_str(input),
                   chars.is_none() ? std::nullopt : std::optional(string_arg(chars, "chars")), true,
                   true));
}

const std::map<std::string_view, Filter>& filters() {
  static const std::map<std::string_view, Filter> kFilters = {
      {"abs", filter_abs},
      {"capitalize", string_filter<python_capitalize>},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"first", filter_first},
      {"float", filter_float},
      {"indent", filter_indent},
      {"int", filter_int},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_last},
      {"length", filter_length},
      {"list", filter_list},
      {"lower", string_filter<python_lower>},
      {"map", filter_map},
      {"reject", filter_reject},
      {"rejectattr", filter_rejectattr},
      {"replace", filter_replace},
      {"reverse", filter_reverse},
      {"safe", filter_safe},
      {"select", filter_select},
      {"selectattr", filter_selectattr},
      {"sort", filter_sort},
      {"string", filter_string},
      {"title", string_filter<jinja_title>},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"unique", filter_unique},
      {"upper", string_filter<python_upper>},
  };
  return kFilters;
}

// Python's value % 2 (or % n) for the number tests, as an exact remainder with the divisor's sign.
double python_remainder(const Value& value, const Value& divisor) {
  if (value.is_undefined()) fail_undefined(value);
  check(value.is_number() && divisor.is_number(),
        "unsupported operand type(s) for %: '{}' and '{}'", type_name(value), type_name(divisor));
  const double d = divisor.as_number();
  check(d != 0, "division by zero");
  const double r = std::fmod(value.as_number(), d);
  return r != 0 && (r < 0) != (d < 0) ? r + d : r;
}

template <bool (*predicate)(const Value&)>
bool plain_test(const Value& value, const CallArgs& call) {
  check_no_args("this test", call);
  return predicate(value);
}

Value test_argument(const char* name, const CallArgs& call) {
  const BoundArgs args(name, call, {"other"});
  check(args.has(0), "the '{}' test needs an argument", name);
  return args.get(0);
}

bool test_odd(const Value& v, const CallArgs& c) {
  check_no_args("odd()", c);
  return python_remainder(v, int64_t{2}) == 1;
}
bool test_even(const Value& v, const CallArgs& c) {
  check_no_args("even()", c);
  return python_remainder(v, int64_t{2}) == 0;
}
bool test_divisibleby(const Value& v, const CallArgs& c) {
  return python_remainder(v, test_argument("divisibleby", c)) == 0;
}
bool test_equalto(const Value& v, const CallArgs& c) { return equal(v, test_argument("eq", c)); }
bool test_ne(const Value& v, const CallArgs& c) { return !equal(v, test_argument("ne", c)); }
bool test_lt(const Value& v, const CallArgs& c) { return compare(v, test_argument("lt", c)) < 0; }
bool test_le(const Value& v, const CallArgs& c) { return compare(v, test_argument("le", c)) <= 0; }
bool test_gt(const Value& v, const CallArgs& c) { return compare(v, test_argument("gt", c)) > 0; }
bool test_ge(const Value& v, const CallArgs& c) { return compare(v, test_argument("ge", c)) >= 0; }
bool test_in(const Value& v, const CallArgs& c) { return contains(test_argument("in", c), v); }

bool is_defined(const Value& v) { return !v.is_undefined(); }
bool is_undefined(const Value& v) { return v.is_undefined(); }
bool is_none(const Value& v) { return v.is_none(); }
bool is_boolean(const Value& v) { return v.kind() == Value::Kind::kBool; }
bool is_true(const Value& v) { return v.kind() == Value::Kind::kBool && v.as_bool(); }
bool is_false(const Value& v) { return v.kind() == Value::Kind::kBool && !v.as_bool(); }
bool is_integer(const Value& v) { return v.kind() == Value::Kind::kInt; }
bool is_float(const Value& v) { return v.kind() == Value::Kind::kFloat; }
bool is_number(const Value& v) { return v.is_number(); }
bool is_string(const Value& v) { return v.is_string(); }
bool is_mapping(const Value& v) { return v.kind() == Value::Kind::kDict; }
bool is_callable(const Value& v) { return v.kind() == Value::Kind::kCallable; }
// Python's iter() and len() accept jinja2's Undefined, so it is iterable and a sequence.
bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.kind() == Value::Kind::kDict;
}
bool is_lower(const Value& v) {
  return v.is_string() && python_lower(v.as_string()) == v.as_string() &&
         python_upper(v.as_string()) != v.as_string();
}
bool is_upper(const Value& v) {
  return v.is_string() && python_upper(v.as_string()) == v.as_string() &&
         python_lower(v.as_string()) != v.as_string();
}

const std::map<std::string_view, Test>& tests() {
  static const std::map<std::string_view, Test> kTests = {
      {"boolean", plain_test<is_boolean>},
      {"callable", plain_test<is_callable>},
      {"defined", plain_test<is_defined>},
      {"divisibleby", test_divisibleby},
      {"eq", test_equalto},
      {"equalto", test_equalto},
      {"even", test_even},
      {"false", plain_test<is_false>},
      {"float", plain_test<is_float>},
      {"ge", test_ge},
      {"gt", test_gt},
      {"greaterthan", test_gt},
      {"in", test_in},
      {"integer", plain_test<is_integer>},
      {"iterable", plain_test<is_iterable>},
      {"le", test_le},
      {"lessthan", test_lt},
      {"lower", plain_test<is_lower>},
      {"lt", test_lt},
      {"mapping", plain_test<is_mapping>},
      {"ne", test_ne},
      {"none", plain_test<is_none>},
      {"number", plain_test<is_number>},
      {"odd", test_odd},
      {"sequence", plain_test<is_iterable>},
      {"string", plain_test<is_string>},
      {"true", plain_test<is_true>},
      {"undefined", plain_test<is_undefined>},
      {"upper", plain_test<is_upper>},
  };
  return kTests;
}

}  // namespace

bool is_filter(std::string_view name) { return filters().contains(name); }

bool is_test(std::string_view name) { return tests().contains(name); }

Value apply_filter(std::string_view name, const Value& input, const CallArgs& args,
                   Budget& budget) {
  budget.step();
  return filters().at(name)(input, args, budget);
}

bool apply_test(std::string_view name, const Value& input, const CallArgs& args) {
  return tests().at(name)(input, args);
}

}  // namespace tessera::jinja
