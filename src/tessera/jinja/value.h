// The values a chat template computes with: JSON's kinds plus undefined, tuples, namespaces and
// callables. They follow Python's semantics (truth, ==, <, str(), repr(), json.dumps), since
// Hugging Face renders chat templates with Python's jinja2 and a model learned its prompts from
// what that printed.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tessera::jinja {

class Value;

// The arguments of a call as written: positional ones, then keyword ones.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;  // 1 + the deepest list or dict among the items
};

// A dict keeps its keys in insertion order, as Python's does.
class Dict {
 public:
  using Entry = std::pair<std::string, Value>;
  // A key given twice keeps its first place and takes its last value.
  explicit Dict(std::vector<Entry> entries);
  // The lookup index points into the entries, which must therefore stay where they are.
  Dict(const Dict&) = delete;
  Dict& operator=(const Dict&) = delete;
  const std::vector<Entry>& entries() const { return entries_; }
  const Value* find(std::string_view key) const;
  int depth() const { return depth_; }

 private:
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string_view, size_t>> sorted_keys_;  // for lookups in large dicts
  int depth_ = 1;
};

// namespace(): the one mutable value, so that a loop can leave something behind for later.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attributes;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() : data_(Undefined{}) {}
  // `reason` is what using the value reports, e.g. "'dict object' has no attribute 'x'".
  static Value undefined(std::string reason);
  Value(std::nullptr_t) : data_(nullptr) {}
  Value(bool value) : data_(value) {}
  Value(int value) : data_(int64_t{value}) {}
  Value(int64_t value) : data_(value) {}
  Value(double value) : data_(value) {}
  Value(std::string value);
  Value(const char* value) : Value(std::string(value)) {}
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict(std::vector<Dict::Entry> entries);
  // The namespace is owned by the render, which outlives every value made in it.
  static Value namespace_ref(Namespace* ns);
  static Value callable(std::string name, std::function<Value(CallArgs&)> call);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const {
    return kind() == Kind::kBool || kind() == Kind::kInt || kind() == Kind::kFloat;
  }
  bool is_sequence() const { return kind() == Kind::kList; }  // a list or a tuple

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // A bool, int or float as a double.
  double as_number() const;
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const List& as_list() const { return *std::get<ListPtr>(data_); }
  const Dict& as_dict() const { return *std::get<DictPtr>(data_); }
  Namespace& as_namespace() const { return *std::get<Namespace*>(data_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(data_); }
  const std::string& undefined_reason() const;
  // How deeply lists and dicts nest in this value (0 for a scalar).
  int depth() const;

 private:
  struct Undefined {
    std::shared_ptr<const std::string> reason;
  };
  using StringPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  using CallablePtr = std::shared_ptr<const Callable>;
  explicit Value(ListPtr list) : data_(std::move(list)) {}
  explicit Value(DictPtr dict) : data_(std::move(dict)) {}

  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, StringPtr, ListPtr, DictPtr,
               Namespace*, CallablePtr>
      data_;
};

// Python's type name for the value, as its error messages say it: 'str', 'NoneType', ...
std::string type_name(const Value& value);
// Throws the undefined value's reason.
[[noreturn]] void fail_undefined(const Value& value);

bool truthy(const Value& value);
bool equal(const Value& a, const Value& b);
// Python's <, as -1, 0 or 1; values Python cannot order are an Error.
int compare(const Value& a, const Value& b);
// str(value), which {{ value }} prints: undefined is "", none is "None".
std::string to_str(const Value& value);
std::string repr(const Value& value);
// `item in container`, as Python's in: a substring, an element, or a key.
bool contains(const Value& container, const Value& item);
// The elements `for x in value` visits: a string's characters, a dict's keys; undefined has
// none. Anything else is an Error.
std::vector<Value> iterate(const Value& value);

// json.dumps's options, as Hugging Face's tojson filter takes them.
struct JsonFormat {
  std::optional<std::string> indent;  // each level's indent after a newline; none is one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json(const Value& value, const JsonFormat& format);

Value value_from_json(const nlohmann::ordered_json& json);

// An Error naming `what` ("strip()", "this filter") unless the call has no arguments.
void check_no_args(std::string_view what, const CallArgs& call);

// A call's arguments bound to a Python-style parameter list, checked as Python checks them:
// too many, unknown keywords and a parameter given twice are Errors naming `function`.
class BoundArgs {
 public:
  BoundArgs(std::string_view function, const CallArgs& args,
            std::initializer_list<std::string_view> params, bool takes_extra_positional = false);
  bool has(size_t param) const { return values_[param].has_value(); }
  Value get(size_t param, Value fallback = Value()) const;
  // Positional arguments past the parameters, when the function takes them (Python's *args).
  const std::vector<Value>& extra() const { return extra_; }

 private:
  std::vector<std::optional<Value>> values_;
  std::vector<Value> extra_;
};

}  // namespace tessera::jinja
