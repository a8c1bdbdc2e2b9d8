#include "tessera/grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <string_view>

namespace tessera::grammar {

namespace {

using ojson = nlohmann::ordered_json;

// Keywords that describe a schema without constraining what it matches.
constexpr std::array<std::string_view, 12> kAnnotations = {
    "title",    "description", "default",     "examples",   "$schema",  "$id",
    "$comment", "$defs",       "definitions", "deprecated", "readOnly", "writeOnly"};
constexpr std::array<std::string_view, 14> kFollowed = {
    "type",      "properties", "required", "additionalProperties",
    "items",     "minItems",   "maxItems", "minLength",
    "maxLength", "enum",       "const",    "anyOf",
    "oneOf",     "$ref"};

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw SchemaError(fmt::format("schema at {}: {}", path, message));
}

class Compiler {
 public:
  explicit Compiler(const ojson& root) : root_(root) {}

  JsonGrammar compile_root() {
    add(SchemaNode{});  // node 0, filled below
    const int32_t root = compile(root_, "#");
    if (!always_object(root, 0)) {
      fail("#", "the root must be an object (\"type\": \"object\"), or a choice of objects");
    }
    nodes_[0] = nodes_[size_t(root)];
    return JsonGrammar{std::move(nodes_)};
  }

  JsonGrammar compile_any_object() {
    add(SchemaNode{});
    SchemaNode object{.kind = NodeKind::kObject, .free = true};
    object.key_node = any_string();
    object.value_node = any_value();
    nodes_[0] = object;
    return JsonGrammar{std::move(nodes_)};
  }

 private:
  // Whether every value of node `id` is an object, so its end is its closing brace.
  bool always_object(int32_t id, int depth) const {
    const SchemaNode& node = nodes_[size_t(id)];
    if (node.kind == NodeKind::kObject) return true;
    return node.kind == NodeKind::kAnyOf && depth < 64 &&
           std::all_of(node.alternatives.begin(), node.alternatives.end(),
                       [&](int32_t alternative) { return always_object(alternative, depth + 1); });
  }

  int32_t add(SchemaNode node) {
    if (int64_t(nodes_.size()) >= kMaxSchemaNodes) {
      fail("#", fmt::format("the schema compiles to more than {} nodes", kMaxSchemaNodes));
    }
    nodes_.push_back(std::move(node));
    return int32_t(nodes_.size() - 1);
  }

  int32_t any_string() {
    if (any_string_ < 0) any_string_ = add({.kind = NodeKind::kString});
    return any_string_;
  }

  int32_t literals(std::vector<std::string> texts) {
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    return add({.kind = NodeKind::kLiterals, .literals = std::move(texts)});
  }

  // Any JSON value: an object with any keys, an array, a string, a number, true, false or null.
  int32_t any_value() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = add({.kind = NodeKind::kAnyOf});
    SchemaNode object{.kind = NodeKind::kObject, .free = true};
    object.key_node = any_string();
    object.value_node = any_value_;
    const int32_t object_id = add(std::move(object));
    const int32_t array_id = add({.kind = NodeKind::kArray, .items = any_value_});
    const int32_t number_id = add({.kind = NodeKind::kNumber});
    const int32_t words = literals({"true", "false", "null"});
    nodes_[any_value_].alternatives = {object_id, array_id, any_string(), number_id, words};
    return any_value_;
  }

  static int64_t count(const ojson& s, const char* keyword, int64_t fallback,
                       const std::string& path) {
    const auto it = s.find(keyword);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kUnbounded) {
      fail(path, fmt::format("'{}' must be an integer from 0 to {}", keyword, kUnbounded));
    }
    return it->get<int64_t>();
  }

  int32_t compile(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      fail(path, "the schema false allows no value");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (const auto& item : s.items()) {
      const std::string& keyword = item.key();
      const auto known = [&](const auto& list) {
        return std::find(list.begin(), list.end(), keyword) != list.end();
      };
      if (!known(kAnnotations) && !known(kFollowed)) {
        fail(path,
             fmt::format("'{}' is not supported: the output could not be held to it", keyword));
      }
    }
    if (const auto ref = s.find("$ref"); ref != s.end()) return reference(*ref, path);
    if (const auto values = s.find("enum"); values != s.end()) {
      if (!values->is_array() || values->empty()) fail(path, "'enum' must be a non-empty array");
      std::vector<std::string> texts;
      for (const ojson& v : *values) texts.push_back(v.dump());
      return literals(std::move(texts));
    }
    if (const auto value = s.find("const"); value != s.end()) return literals({value->dump()});
    for (const char* keyword : {"anyOf", "oneOf"}) {
      const auto choices = s.find(keyword);
      if (choices == s.end()) continue;
      if (!choices->is_array() || choices->empty()) {
        fail(path, fmt::format("'{}' must be a non-empty array of schemas", keyword));
      }
      if (s.contains("type")) {
        fail(path, fmt::format("'{}' beside 'type': put the type in each alternative", keyword));
      }
      const int32_t id = add({.kind = NodeKind::kAnyOf});
      std::vector<int32_t> alternatives;
      for (size_t i = 0; i < choices->size(); ++i) {
        alternatives.push_back(compile((*choices)[i], fmt::format("{}/{}/{}", path, keyword, i)));
      }
      nodes_[id].alternatives = std::move(alternatives);
      return id;
    }
    const auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties")) return typed("object", s, path);
      if (s.contains("items")) return typed("array", s, path);
      return any_value();
    }
    if (type->is_string()) return typed(type->get<std::string>(), s, path);
    if (!type->is_array() || type->empty()) {
      fail(path, "'type' must be a type name or a non-empty array of them");
    }
    const int32_t id = add({.kind = NodeKind::kAnyOf});
    std::vector<int32_t> alternatives;
    for (const ojson& t : *type) {
      if (!t.is_string()) fail(path, "'type' must be a type name or a non-empty array of them");
      alternatives.push_back(typed(t.get<std::string>(), s, path));
    }
    nodes_[id].alternatives = std::move(alternatives);
    return id;
  }

  int32_t reference(const ojson& ref, const std::string& path) {
    if (!ref.is_string()) fail(path, "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    const ojson* schema = nullptr;
    if (target == "#") {
      schema = &root_;
    } else {
      for (const char* container : {"#/$defs/", "#/definitions/"}) {
        const std::string_view prefix = container;
        if (target.rfind(prefix, 0) != 0) continue;
        const std::string name = target.substr(prefix.size());
        const auto defs = root_.find(std::string(prefix.substr(2, prefix.size() - 3)));
        if (defs == root_.end() || !defs->is_object()) continue;
        if (const auto found = defs->find(name); found != defs->end()) schema = &*found;
      }
    }
    if (schema == nullptr) {
      fail(path, fmt::format("'$ref' {} names nothing in $defs or definitions", target));
    }
    const int32_t id = add({.kind = NodeKind::kAnyOf});
    refs_[target] = id;
    const int32_t compiled = compile(*schema, target);
    nodes_[id].alternatives = {compiled};
    return id;
  }

  int32_t typed(const std::string& type, const ojson& s, const std::string& path) {
    if (type == "object") return object(s, path);
    if (type == "array") {
      SchemaNode array{.kind = NodeKind::kArray};
      array.min_items = count(s, "minItems", 0, path);
      array.max_items = count(s, "maxItems", kUnbounded, path);
      if (array.min_items > array.max_items) fail(path, "'minItems' is above 'maxItems'");
      const int32_t id = add(std::move(array));
      const auto items = s.find("items");
      const int32_t item = items == s.end() ? any_value() : compile(*items, path + "/items");
      nodes_[id].items = item;
      return id;
    }
    if (type == "string") {
      SchemaNode string{.kind = NodeKind::kString};
      string.min_length = count(s, "minLength", 0, path);
      string.max_length = count(s, "maxLength", kUnbounded, path);
      if (string.min_length > string.max_length) fail(path, "'minLength' is above 'maxLength'");
      return add(std::move(string));
    }
    if (type == "number" || type == "integer") {
      return add({.kind = NodeKind::kNumber, .integer = type == "integer"});
    }
    if (type == "boolean") return literals({"true", "false"});
    if (type == "null") return literals({"null"});
    fail(path, fmt::format("unknown type '{}'", type));
  }

  int32_t object(const ojson& s, const std::string& path) {
    const auto properties = s.find("properties");
    const auto additional = s.find("additionalProperties");
    if (additional != s.end() && !additional->is_boolean()) {
      fail(path, "'additionalProperties' other than true or false is not supported");
    }
    if (properties == s.end()) {
      if (s.contains("required")) fail(path, "'required' names properties the schema lacks");
      // No properties: any object, unless additionalProperties false leaves only {}.
      if (additional != s.end() && !additional->get<bool>()) {
        return add({.kind = NodeKind::kObject});
      }
      SchemaNode object{.kind = NodeKind::kObject, .free = true};
      object.key_node = any_string();
      object.value_node = any_value();
      return add(std::move(object));
    }
    if (!properties->is_object()) fail(path, "'properties' must be an object");
    std::vector<std::string> required;
    if (const auto names = s.find("required"); names != s.end()) {
      if (!names->is_array()) fail(path, "'required' must be an array of property names");
      for (const ojson& name : *names) {
        if (!name.is_string() || !properties->contains(name.get<std::string>())) {
          fail(path, fmt::format("'required' names {}, which is not in 'properties'", name.dump()));
        }
        required.push_back(name.get<std::string>());
      }
    }
    const int32_t id = add({.kind = NodeKind::kObject});
    std::vector<Property> compiled;
    for (const auto& [name, schema] : properties->items()) {
      Property p;
      p.key = ojson(name).dump();
      p.required = std::find(required.begin(), required.end(), name) != required.end();
      p.node = compile(schema, path + "/properties/" + name);
      compiled.push_back(std::move(p));
    }
    nodes_[id].properties = std::move(compiled);
    return id;
  }

  const ojson& root_;
  std::vector<SchemaNode> nodes_;
  std::map<std::string, int32_t> refs_;
  int32_t any_value_ = -1, any_string_ = -1;
};

}  // namespace

JsonGrammar compile_json_schema(const nlohmann::ordered_json& schema) {
  return Compiler(schema).compile_root();
}

JsonGrammar any_json_object() { return Compiler(nlohmann::ordered_json()).compile_any_object(); }

}  // namespace tessera::grammar
