// The grammar layer: JSON schemas compiled into a grammar, a matcher that follows text through
// it, and the per-step token masks that keep a model's output inside it. It knows bytes and
// token ids only, never a model or a tokenizer.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::grammar {

// A schema the compiler cannot follow; the message names the keyword and where it sits.
class SchemaError : public Error {
 public:
  using Error::Error;
};

enum class NodeKind : uint8_t {
  kObject,    // "{...}": the properties in schema order, or any keys when free
  kArray,     // "[...]" of items
  kString,    // a string of min_length to max_length code points
  kNumber,    // a JSON number, or an integer
  kLiterals,  // one of a sorted list of JSON texts (enum, const, true, false, null)
  kAnyOf,     // any one of the alternatives
};

inline constexpr int64_t kUnbounded = std::numeric_limits<int32_t>::max();

struct Property {
  std::string key;  // the name as JSON text, quotes included
  int32_t node = 0;
  bool required = false;
};

struct SchemaNode {
  NodeKind kind = NodeKind::kAnyOf;
  std::vector<Property> properties = {};  // kObject
  bool free = false;  // kObject: any keys (key_node) with any values (value_node)
  int32_t key_node = -1, value_node = -1;
  int32_t items = -1;  // kArray
  int64_t min_items = 0, max_items = kUnbounded;
  int64_t min_length = 0, max_length = kUnbounded;  // kString
  bool integer = false;                             // kNumber
  std::vector<std::string> literals = {};           // kLiterals, sorted
  std::vector<int32_t> alternatives = {};           // kAnyOf
};

// Output the compiler allows, as nodes; node 0 is the root, whose values are objects. The JSON
// written is compact: no whitespace between tokens. Numbers take at most kMaxDigits digits before
// and after the point and kMaxExponentDigits in the exponent, so every number ends and fits a
// double.
struct JsonGrammar {
  std::vector<SchemaNode> nodes;
};

inline constexpr int64_t kMaxDigits = 15, kMaxExponentDigits = 2;
// The most nodes one schema may compile to.
inline constexpr int64_t kMaxSchemaNodes = 10000;

// A JSON schema (OpenAI's structured-output subset) compiled: type (one or a list), properties
// (written in schema order; required ones always, optional ones where the model chooses),
// additionalProperties false, items, minItems/maxItems, minLength/maxLength, enum, const,
// anyOf/oneOf, $ref into $defs or definitions (recursion allowed), and the annotations
// (title, description, default, examples, ...), which change nothing. A keyword that would
// constrain the output in a way the compiler cannot follow (pattern, format, minimum, ...) is a
// SchemaError naming it: it is never silently dropped. The root must be an object, or a choice
// (anyOf) of objects.
JsonGrammar compile_json_schema(const nlohmann::ordered_json& schema);

// Any JSON object, as OpenAI's response_format json_object asks.
JsonGrammar any_json_object();

}  // namespace tessera::grammar
