#include "tessera/jinja/access.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/jinja/text.h"

namespace tessera::jinja {

namespace {

// How jinja2 names an object in "has no attribute" messages.
std::string object_name(const Value& value) {
  return value.is_none() ? "None" : type_name(value) + " object";
}

Value no_attribute(const Value& object, std::string_view name) {
  return Value::undefined(
      fmt::format("'{}' has no attribute {}", object_name(object), python_string_repr(name)));
}

Value no_element(const Value& object, const Value& key) {
  return Value::undefined(fmt::format("'{}' has no element {}", object_name(object), repr(key)));
}

Value bound(const Value& self, std::string_view name, std::function<Value(CallArgs&)> call) {
  return Value::callable(type_name(self) + "." + std::string(name), std::move(call));
}

Value refused(const Value& self, std::string_view name) {
  const std::string type = type_name(self);
  return bound(self, name, [type, name = std::string(name)](CallArgs&) -> Value {
    fail("{}.{}() is not allowed: a chat template cannot change a {}", type, name, type);
  });
}

std::optional<std::string> optional_string(const BoundArgs& args, size_t param,
                                           std::string_view what) {
  const Value value = args.get(param, nullptr);
  if (value.is_none()) return std::nullopt;
  return string_arg(value, what);
}

std::string replace_all(std::string_view text, std::string_view old, std::string_view with,
                        int64_t count) {
  std::string out;
  const auto append = [&](std::string_view piece) {
    check(out.size() + piece.size() <= kMaxStringBytes,
          "replace() would build a string of more than {} bytes", kMaxStringBytes);
    out += piece;
  };
  if (old.empty()) {
    // Python puts `with` before each character and at the end.
    const std::u32string cps = to_code_points(text);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || int64_t(i) < count) append(with);
      if (i < cps.size()) append(to_utf8(std::u32string_view(&cps[i], 1)));
    }
    return out;
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t found = text.find(old, start);
    if (found == std::string_view::npos) break;
    append(text.substr(start, found - start));
    append(with);
    start = found + old.size();
  }
  append(text.substr(start));
  return out;
}

// strip, lower, upper, title, capitalize, split and splitlines: methods that make new strings.
std::optional<Value> string_transform(const Value& self, const std::string& name, Budget* budget) {
  const auto method = [&](std::function<Value(CallArgs&)> call) {
    return bound(self, name, std::move(call));
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      const BoundArgs args(name, call, {"chars"});
      return make_string(*budget, python_strip(text, optional_string(args, 0, "chars"),
                                               name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      check_no_args(name + "()", call);
      return make_string(*budget, name == "lower"   ? python_lower(text)
                                  : name == "upper" ? python_upper(text)
                                  : name == "title" ? python_title(text)
                                                    : python_capitalize(text));
    });
  }
  if (name == "split") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      const BoundArgs args(name, call, {"sep", "maxsplit"});
      std::vector<Value> parts;
      for (std::string& part : python_split(text, optional_string(args, 0, "sep"),
                                            int_arg(args.get(1, int64_t{-1}), "maxsplit"))) {
        parts.push_back(make_string(*budget, std::move(part)));
      }
      budget->items(int64_t(parts.size()));
      return Value::list(std::move(parts));
    });
  }
  if (name == "splitlines") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      check_no_args(name + "()", call);
      std::vector<Value> lines;
      for (std::string& line : python_splitlines(text)) lines.emplace_back(std::move(line));
      budget->items(int64_t(lines.size()));
      return Value::list(std::move(lines));
    });
  }
  return std::nullopt;
}

// startswith, endswith, replace, find, count and join: methods that search or combine.
std::optional<Value> string_search(const Value& self, const std::string& name, Budget* budget) {
  const auto method = [&](std::function<Value(CallArgs&)> call) {
    return bound(self, name, std::move(call));
  };
  if (name == "startswith" || name == "endswith") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      const BoundArgs args(name, call, {"prefix"});
      const Value affixes = args.get(0);
      std::vector<Value> options =
          affixes.is_sequence() ? affixes.as_list().items : std::vector<Value>{affixes};
      for (const Value& option : options) {
        const std::string& affix = string_arg(option, name + "() argument");
        if (name == "startswith" ? text.starts_with(affix) : text.ends_with(affix)) return true;
      }
      return false;
    });
  }
  if (name == "replace") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      const BoundArgs args(name, call, {"old", "new", "count"});
      return make_string(
          *budget, replace_all(text, string_arg(args.get(0), "old"), string_arg(args.get(1), "new"),
                               int_arg(args.get(2, int64_t{-1}), "count")));
    });
  }
  if (name == "find" || name == "count") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      const BoundArgs args(name, call, {"sub"});
      const std::string& sub = string_arg(args.get(0), "sub");
      if (name == "find") {
        const size_t found = text.find(sub);
        return found == std::string::npos ? Value(-1)
                                          : Value(int64_t(code_point_count(text.substr(0, found))));
      }
      if (sub.empty()) return Value(int64_t(code_point_count(text) + 1));
      int64_t count = 0;
      for (size_t at = text.find(sub); at != std::string::npos;
           at = text.find(sub, at + sub.size())) {
        ++count;
      }
      return Value(count);
    });
  }
  if (name == "join") {
    return method([=](CallArgs& call) {
      const std::string& text = self.as_string();
      const BoundArgs args(name, call, {"iterable"});
      std::string out;
      const std::vector<Value> items = iterate(args.get(0));
      for (size_t i = 0; i < items.size(); ++i) {
        check(items[i].is_string(), "sequence item {}: expected str instance, {} found", i,
              type_name(items[i]));
        if (i) out += text;
        out += items[i].as_string();
        check(out.size() <= kMaxStringBytes, "join() would build a string of more than {} bytes",
              kMaxStringBytes);
      }
      return make_string(*budget, std::move(out));
    });
  }
  return std::nullopt;
}

std::optional<Value> string_method(const Value& self, const std::string& name, Budget* budget) {
  if (std::optional<Value> transform = string_transform(self, name, budget)) return transform;
  return string_search(self, name, budget);
}

std::optional<Value> dict_method(const Value& self, const std::string& name, Budget* budget) {
  static constexpr std::array kRefused = {"clear", "pop", "popitem", "setdefault", "update"};
  if (std::find(kRefused.begin(), kRefused.end(), name) != kRefused.end()) {
    return refused(self, name);
  }
  if (name == "items" || name == "keys" || name == "values") {
    return bound(self, name, [=](CallArgs& call) {
      check_no_args(name + "()", call);
      std::vector<Value> out;
      for (const auto& [key, value] : self.as_dict().entries()) {
        out.push_back(name == "items"  ? Value::tuple({Value(key), value})
                      : name == "keys" ? Value(key)
                                       : value);
      }
      budget->items(int64_t(out.size()));
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bound(self, name, [=](CallArgs& call) {
      const BoundArgs args(name, call, {"key", "default"});
      const Value key = args.get(0);
      const Value* found = key.is_string() ? self.as_dict().find(key.as_string()) : nullptr;
      return found ? *found : args.get(1, nullptr);
    });
  }
  if (name == "copy") {
    return bound(self, name, [=](CallArgs& call) {
      check_no_args(name + "()", call);
      return self;
    });
  }
  return std::nullopt;
}

std::optional<Value> list_method(const Value& self, const std::string& name) {
  const bool is_tuple = self.as_list().is_tuple;
  static constexpr std::array kRefused = {"append", "clear",  "extend",  "insert",
                                          "pop",    "remove", "reverse", "sort"};
  if (!is_tuple && std::find(kRefused.begin(), kRefused.end(), name) != kRefused.end()) {
    return refused(self, name);
  }
  if (name == "count" || name == "index") {
    return bound(self, name, [=](CallArgs& call) {
      const BoundArgs args(name, call, {"value"});
      const Value wanted = args.get(0);
      const std::vector<Value>& items = self.as_list().items;
      int64_t count = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equal(items[i], wanted)) continue;
        if (name == "index") return Value(int64_t(i));
        ++count;
      }
      check(name == "count", "{} is not in the {}", repr(wanted), type_name(self));
      return Value(count);
    });
  }
  if (name == "copy" && !is_tuple) {
    return bound(self, name, [=](CallArgs& call) {
      check_no_args(name + "()", call);
      return self;
    });
  }
  return std::nullopt;
}

std::optional<Value> method(const Value& self, const std::string& name, Budget& budget) {
  switch (self.kind()) {
    case Value::Kind::kString:
      return string_method(self, name, &budget);
    case Value::Kind::kDict:
      return dict_method(self, name, &budget);
    case Value::Kind::kList:
      return list_method(self, name);
    default:
      return std::nullopt;
  }
}

// Python's slice.indices(): the positions object[start:stop:step] takes, in order.
std::vector<int64_t> slice_positions(int64_t length, const Value& start, const Value& stop,
                                     const Value& step) {
  const auto bound_or = [](const Value& value, std::optional<int64_t> fallback) {
    if (value.is_undefined() || value.is_none()) return fallback;
    check(value.kind() == Value::Kind::kInt || value.kind() == Value::Kind::kBool,
          "slice indices must be integers or None, not '{}'", type_name(value));
    return std::optional<int64_t>(value.kind() == Value::Kind::kBool ? value.as_bool()
                                                                     : value.as_int());
  };
  const int64_t stride = *bound_or(step, 1);
  check(stride != 0, "slice step cannot be zero");
  const auto clamp = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index < 0 ? *index + length : *index;
    return stride > 0 ? std::clamp<int64_t>(i, 0, length) : std::clamp<int64_t>(i, -1, length - 1);
  };
  const int64_t first = clamp(bound_or(start, std::nullopt), stride > 0 ? 0 : length - 1);
  const int64_t end = clamp(bound_or(stop, std::nullopt), stride > 0 ? length : -1);
  std::vector<int64_t> positions;
  for (int64_t i = first; stride > 0 ? i < end : i > end; i += stride) positions.push_back(i);
  return positions;
}

}  // namespace

Value make_string(Budget& budget, std::string text) {
  budget.string(text.size());
  return Value(std::move(text));
}

const std::string& string_arg(const Value& value, std::string_view what) {
  if (value.is_undefined()) fail_undefined(value);
  check(value.is_string(), "{} must be a string, not '{}'", what, type_name(value));
  return value.as_string();
}

int64_t int_arg(const Value& value, std::string_view what) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.kind() == Value::Kind::kBool) return value.as_bool();
  check(value.kind() == Value::Kind::kInt, "{} must be an integer, not '{}'", what,
        type_name(value));
  return value.as_int();
}

Value get_attribute(const Value& object, const std::string& name, Budget& budget) {
  if (object.is_undefined()) fail_undefined(object);
  if (std::optional<Value> found = method(object, name, budget)) return *found;
  if (object.kind() == Value::Kind::kDict) {
    if (const Value* value = object.as_dict().find(name)) return *value;
  } else if (object.kind() == Value::Kind::kNamespace) {
    if (const Value* value = object.as_namespace().find(name)) return *value;
  }
  return no_attribute(object, name);
}

Value get_item(const Value& object, const Value& key, Budget& budget) {
  if (object.is_undefined()) fail_undefined(object);
  if (key.is_undefined()) fail_undefined(key);
  const bool integer_key = key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool;
  if (integer_key && (object.is_sequence() || object.is_string())) {
    const int64_t index = key.kind() == Value::Kind::kBool ? key.as_bool() : key.as_int();
    if (object.is_sequence()) {
      const std::vector<Value>& items = object.as_list().items;
      const int64_t at = index < 0 ? index + int64_t(items.size()) : index;
      if (at >= 0 && at < int64_t(items.size())) return items[at];
    } else {
      const std::u32string cps = to_code_points(object.as_string());
      const int64_t at = index < 0 ? index + int64_t(cps.size()) : index;
      if (at >= 0 && at < int64_t(cps.size())) return to_utf8(std::u32string_view(&cps[at], 1));
    }
    return no_element(object, key);
  }
  if (key.is_string()) {
    if (object.kind() == Value::Kind::kDict) {
      if (const Value* value = object.as_dict().find(key.as_string())) return *value;
    }
    return get_attribute(object, key.as_string(), budget);
  }
  return no_element(object, key);
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step,
                Budget& budget) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_sequence()) {
    const List& list = object.as_list();
    const std::vector<int64_t> positions =
        slice_positions(int64_t(list.items.size()), start, stop, step);
    budget.items(int64_t(positions.size()));
    std::vector<Value> items;
    for (int64_t i : positions) items.push_back(list.items[i]);
    return list.is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (object.is_string()) {
    const std::u32string cps = to_code_points(object.as_string());
    std::u32string out;
    for (int64_t i : slice_positions(int64_t(cps.size()), start, stop, step)) out += cps[i];
    return make_string(budget, to_utf8(out));
  }
  return Value::undefined(fmt::format("'{}' cannot be sliced", object_name(object)));
}

}  // namespace tessera::jinja
