// Schema-driven run configuration: defaults < TOML file < --set overrides, every key typed and
// known in advance so that a typo is an error rather than a silently ignored setting.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tessera {

// kPath is a string naming a file or folder. A value that names one that exists, relative to the
// working directory, is kept absolute, so that a saved config names the same file from any
// folder; any other value (a name such as "byte", a path still to be created) is kept as given.
enum class ConfigType { kInt, kFloat, kString, kPath, kBool };

// An int64_t for kInt, a double for kFloat, a string for kString and kPath, a bool for kBool.
using ConfigValue = std::variant<int64_t, double, std::string, bool>;

struct ConfigKey {
  std::string name;  // "section.key"
  ConfigType type;
  ConfigValue default_value;
  bool required_in_file = false;
  std::string help;
};

// `text` read as a value of `type`: numbers and booleans trimmed, strings as given, paths made
// absolute when they exist. Throws "`what` must be an integer, got 'text'".
ConfigValue parse_config_value(ConfigType type, std::string_view text, std::string_view what);

class Config {
 public:
  // Every key starts at its default. Throws Error on a malformed schema.
  explicit Config(std::vector<ConfigKey> schema);

  void load_file(const std::string& path);
  void load_string(std::string_view toml, const std::string& source_name);
  // "section.key=value", as given to --set.
  void set_override(std::string_view assignment);

  int64_t get_int(std::string_view key) const;
  // An int value is accepted for a float key.
  double get_float(std::string_view key) const;
  // A kString or kPath value.
  const std::string& get_string(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const ConfigValue& value(std::string_view key) const;
  // Throws unless `value` holds the key's type.
  void set(std::string_view key, ConfigValue value);

  // The resolved config grouped in [sections]; load_string accepts it again.
  std::string to_toml() const;
  // {"section": {"key": value}}.
  nlohmann::json to_json() const;
  // Inverse of to_json (checkpoint manifests), with the same validation as a file.
  void load_json(const nlohmann::json& j);

  const std::vector<ConfigKey>& schema() const { return schema_; }

 private:
  size_t index_of(std::string_view key) const;  // throws on unknown key
  const ConfigValue& value_of(std::string_view key, ConfigType type) const;

  std::vector<ConfigKey> schema_;
  std::vector<ConfigValue> values_;  // parallel to schema_
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace tessera
