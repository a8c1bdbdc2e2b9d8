#include "tessera/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/jinja/limits.h"
#include "tessera/jinja/text.h"

namespace tessera::jinja {

namespace {

// Large dicts are searched by binary search over their sorted keys; small ones (a loop's
// variables, most messages) from the start.
constexpr size_t kLinearSearchSize = 16;

int container_depth(const std::vector<Value>& items) {
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.depth());
  check(deepest < kMaxValueDepth, "lists and dicts nest more than {} levels deep", kMaxValueDepth);
  return deepest + 1;
}

void check_length(const std::string& out) {
  check(out.size() <= kMaxStringBytes, "a string the template built passed {} bytes",
        kMaxStringBytes);
}

void append_repr(std::string& out, const Value& value, int depth);

template <typename Entries>
void append_dict_repr(std::string& out, const Entries& entries, int depth) {
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += ", ";
    out += python_string_repr(entries[i].first);
    out += ": ";
    append_repr(out, entries[i].second, depth + 1);
  }
  out += '}';
}

// Lists and dicts nest boundedly, but a namespace may hold itself: `depth` bounds the recursion.
void append_repr(std::string& out, const Value& value, int depth) {
  check_length(out);
  check(depth <= 2 * kMaxValueDepth, "values hold each other more than {} levels deep",
        2 * kMaxValueDepth);
  switch (value.kind()) {
    case Value::Kind::kString:
      out += python_string_repr(value.as_string());
      return;
    case Value::Kind::kList: {
      const List& list = value.as_list();
      out += list.is_tuple ? '(' : '[';
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, list.items[i], depth + 1);
      }
      if (list.is_tuple && list.items.size() == 1) out += ',';
      out += list.is_tuple ? ')' : ']';
      return;
    }
    case Value::Kind::kDict:
      append_dict_repr(out, value.as_dict().entries(), depth);
      return;
    case Value::Kind::kNamespace:
      out += "<Namespace ";
      append_dict_repr(out, value.as_namespace().attributes, depth);
      out += '>';
      return;
    case Value::Kind::kUndefined:
      out += "Undefined";
      return;
    default:
      out += to_str(value);
  }
}

void append_json(std::string& out, const Value& value, const JsonFormat& format, int level) {
  check_length(out);
  const auto newline = [&](int indent_level) {
    if (!format.indent) return;
    out += '\n';
    for (int i = 0; i < indent_level; ++i) out += *format.indent;
  };
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += value.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(value.as_int());
      return;
    case Value::Kind::kFloat: {
      const double x = value.as_float();
      out += std::isnan(x)   ? "NaN"
             : std::isinf(x) ? (x < 0 ? "-Infinity" : "Infinity")
                             : python_float_repr(x);
      return;
    }
    case Value::Kind::kString:
      append_json_string(out, value.as_string(), format.ensure_ascii);
      return;
    case Value::Kind::kList: {
      const std::vector<Value>& items = value.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += format.item_separator;
        newline(level + 1);
        append_json(out, items[i], format, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const Dict::Entry*> entries;
      for (const Dict::Entry& entry : value.as_dict().entries()) entries.push_back(&entry);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (format.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += format.item_separator;
        newline(level + 1);
        append_json_string(out, entries[i]->first, format.ensure_ascii);
        out += format.key_separator;
        append_json(out, entries[i]->second, format, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      fail("Object of type {} is not JSON serializable", type_name(value));
  }
}

Value from_json(const nlohmann::ordered_json& json, int depth) {
  check(depth <= kMaxValueDepth, "the context's JSON nests more than {} levels deep",
        kMaxValueDepth);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return nullptr;
    case nlohmann::ordered_json::value_t::boolean:
      return json.get<bool>();
    case nlohmann::ordered_json::value_t::number_integer:
      return json.get<int64_t>();
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t n = json.get<uint64_t>();
      if (n <= uint64_t(INT64_MAX)) return int64_t(n);
      return double(n);
    }
    case nlohmann::ordered_json::value_t::number_float:
      return json.get<double>();
    case nlohmann::ordered_json::value_t::string:
      return json.get<std::string>();
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<Dict::Entry> entries;
      entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        entries.emplace_back(key, from_json(item, depth + 1));
      }
      return Value::dict(std::move(entries));
    }
    default:
      fail("the context holds JSON of a kind a template cannot use: {}", json.type_name());
  }
}

}  // namespace

Dict::Dict(std::vector<Entry> entries) {
  // Reserved up front so that the keys indexed below never move.
  entries_.reserve(entries.size());
  std::unordered_map<std::string_view, size_t> positions;
  const bool large = entries.size() > kLinearSearchSize;
  for (Entry& entry : entries) {
    std::optional<size_t> existing;
    if (large) {
      const auto it = positions.find(entry.first);
      if (it != positions.end()) existing = it->second;
    } else {
      for (size_t i = 0; i < entries_.size() && !existing; ++i) {
        if (entries_[i].first == entry.first) existing = i;
      }
    }
    if (existing) {
      entries_[*existing].second = std::move(entry.second);
      continue;
    }
    entries_.push_back(std::move(entry));
    if (large) positions.emplace(entries_.back().first, entries_.size() - 1);
  }
  std::vector<Value> values;
  values.reserve(entries_.size());
  for (const Entry& entry : entries_) values.push_back(entry.second);
  depth_ = container_depth(values);
  if (entries_.size() > kLinearSearchSize) {
    for (size_t i = 0; i < entries_.size(); ++i) sorted_keys_.emplace_back(entries_[i].first, i);
    std::sort(sorted_keys_.begin(), sorted_keys_.end());
  }
}

const Value* Dict::find(std::string_view key) const {
  if (sorted_keys_.empty()) {
    for (const Entry& entry : entries_) {
      if (entry.first == key) return &entry.second;
    }
    return nullptr;
  }
  const auto it =
      std::lower_bound(sorted_keys_.begin(), sorted_keys_.end(), key,
                       [](const auto& entry, std::string_view k) { return entry.first < k; });
  return it != sorted_keys_.end() && it->first == key ? &entries_[it->second].second : nullptr;
}

const Value* Namespace::find(std::string_view name) const {
  for (const auto& [key, value] : attributes) {
    if (key == name) return &value;
  }
  return nullptr;
}

void Namespace::set(const std::string& name, Value value) {
  for (auto& [key, existing] : attributes) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  attributes.emplace_back(name, std::move(value));
}

Value Value::undefined(std::string reason) {
  Value value;
  value.data_ = Undefined{std::make_shared<const std::string>(std::move(reason))};
  return value;
}

Value::Value(std::string value) : data_(std::make_shared<const std::string>(std::move(value))) {}

Value Value::list(std::vector<Value> items) {
  const int depth = container_depth(items);
  return Value(std::make_shared<const List>(List{std::move(items), false, depth}));
}

Value Value::tuple(std::vector<Value> items) {
  const int depth = container_depth(items);
  return Value(std::make_shared<const List>(List{std::move(items), true, depth}));
}

Value Value::dict(std::vector<Dict::Entry> entries) {
  return Value(std::make_shared<const Dict>(std::move(entries)));
}

Value Value::namespace_ref(Namespace* ns) {
  Value value;
  value.data_ = ns;
  return value;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> call) {
  Value value;
  value.data_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(call)});
  return value;
}

double Value::as_number() const {
  switch (kind()) {
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return double(as_int());
    default:
      return as_float();
  }
}

const std::string& Value::undefined_reason() const {
  static const std::string kUnnamed = "a value the template used is undefined";
  const auto& reason = std::get<Undefined>(data_).reason;
  return reason ? *reason : kUnnamed;
}

int Value::depth() const {
  if (kind() == Kind::kList) return as_list().depth;
  if (kind() == Kind::kDict) return as_dict().depth();
  return 0;
}

std::string type_name(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return value.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "unknown";
}

void fail_undefined(const Value& value) { throw Error(value.undefined_reason()); }

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return value.as_bool();
    case Value::Kind::kInt:
      return value.as_int() != 0;
    case Value::Kind::kFloat:
      return value.as_float() != 0;
    case Value::Kind::kString:
      return !value.as_string().empty();
    case Value::Kind::kList:
      return !value.as_list().items.empty();
    case Value::Kind::kDict:
      return !value.as_dict().entries().empty();
    default:
      return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      const auto as_int = [](const Value& v) {
        return v.kind() == Value::Kind::kBool ? int64_t{v.as_bool()} : v.as_int();
      };
      return as_int(a) == as_int(b);
    }
    return a.as_number() == b.as_number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List &x = a.as_list(), &y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.entries().size() != y.entries().size()) return false;
      for (const auto& [key, value] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !equal(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case Value::Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    }
    return a.as_number() < b.as_number() ? -1 : a.as_number() > b.as_number();
  }
  if (a.is_string() && b.is_string()) {
    const int order = a.as_string().compare(b.as_string());
    return order < 0 ? -1 : order > 0;
  }
  if (a.is_sequence() && b.is_sequence() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto &x = a.as_list().items, &y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  fail("'<' is not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.as_int());
    case Value::Kind::kFloat:
      return python_float_repr(value.as_float());
    case Value::Kind::kString:
      return value.as_string();
    case Value::Kind::kCallable:
      return "<function " + value.as_callable().name + ">";
    default:
      return repr(value);
  }
}

std::string repr(const Value& value) {
  std::string out;
  append_repr(out, value, 0);
  check_length(out);
  return out;
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      check(item.is_string(), "'in <string>' requires a string as left operand, not '{}'",
            type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& element : container.as_list().items) {
        if (equal(element, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      check(item.kind() != Value::Kind::kList || item.as_list().is_tuple, "unhashable type: '{}'",
            type_name(item));
      check(item.kind() != Value::Kind::kDict, "unhashable type: 'dict'");
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      fail("argument of type '{}' is not iterable", type_name(container));
  }
}

std::vector<Value> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return value.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& entry : value.as_dict().entries()) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> characters;
      for (char32_t c : to_code_points(value.as_string())) {
        std::string character;
        append_utf8(character, c);
        characters.emplace_back(std::move(character));
      }
      return characters;
    }
    default:
      fail("'{}' object is not iterable", type_name(value));
  }
}

std::string to_json(const Value& value, const JsonFormat& format) {
  std::string out;
  append_json(out, value, format, 0);
  check_length(out);
  return out;
}

Value value_from_json(const nlohmann::ordered_json& json) { return from_json(json, 0); }

BoundArgs::BoundArgs(std::string_view function, const CallArgs& args,
                     std::initializer_list<std::string_view> params, bool takes_extra_positional)
    : values_(params.size()) {
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < params.size()) {
      values_[i] = args.positional[i];
    } else if (takes_extra_positional) {
      extra_.push_back(args.positional[i]);
    } else {
      fail("{}() takes at most {} argument{} ({} given)", function, params.size(),
           params.size() == 1 ? "" : "s", args.positional.size());
    }
  }
  for (const auto& [name, value] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), name);
    check(it != params.end(), "{}() got an unexpected keyword argument '{}'", function, name);
    std::optional<Value>& slot = values_[it - params.begin()];
    check(!slot, "{}() got multiple values for argument '{}'", function, name);
    slot = value;
  }
}

void check_no_args(std::string_view what, const CallArgs& call) {
  check(call.positional.empty() && call.keyword.empty(), "{} takes no arguments", what);
}

Value BoundArgs::get(size_t param, Value fallback) const {
  return values_[param] ? *values_[param] : std::move(fallback);
}

}  // namespace tessera::jinja
