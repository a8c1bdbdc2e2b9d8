#include "tessera/core/config.h"

#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "tessera/core/error.h"

namespace tessera {
namespace {

const char* type_noun(ConfigType type) {
  switch (type) {
    case ConfigType::kInt:
      return "an integer";
    case ConfigType::kFloat:
      return "a number";
    case ConfigType::kString:
    case ConfigType::kPath:
      return "a string";
    case ConfigType::kBool:
      return "a boolean";
  }
  return "?";
}

bool holds_type(const ConfigValue& value, ConfigType type) {
  switch (type) {
    case ConfigType::kInt:
      return std::holds_alternative<int64_t>(value);
    case ConfigType::kFloat:
      return std::holds_alternative<double>(value);
    case ConfigType::kString:
    case ConfigType::kPath:
      return std::holds_alternative<std::string>(value);
    case ConfigType::kBool:
      return std::holds_alternative<bool>(value);
  }
  return false;
}

std::string path_value(std::string value) {
  std::error_code ec;
  if (value.empty() || !std::filesystem::exists(value, ec)) return value;
  const std::filesystem::path absolute = std::filesystem::absolute(value, ec);
  return ec ? value : absolute.lexically_normal().string();
}

std::string_view trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the closest candidate within edit distance 2, else "".
std::string suggestion(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 3;
  for (const std::string& candidate : candidates) {
    const size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // A right key put in the wrong section is a common slip that edit distance cannot see.
  if (best.empty()) {
    const size_t dot = name.find('.');
    const std::string_view leaf = dot == std::string_view::npos ? name : name.substr(dot + 1);
    for (const std::string& candidate : candidates) {
      const size_t c_dot = candidate.find('.');
      if (c_dot != std::string::npos && candidate.substr(c_dot + 1) == leaf) {
        best = candidate;
        break;
      }
    }
  }
  return best.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", best);
}

std::string quote(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

bool parse_int(std::string_view text, int64_t* out) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return !text.empty() && ec == std::errc() && ptr == end;
}

bool parse_float(std::string_view text, double* out) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return !text.empty() && ec == std::errc() && ptr == end && std::isfinite(*out);
}

bool parse_bool(std::string_view text, bool* out) {
  if (text == "true") return *out = true, true;
  if (text == "false") return *out = false, true;
  return false;
}

// A value read from a TOML or JSON document, before it is checked against its key's type.
struct Scalar {
  enum class Kind { kInt, kFloat, kString, kBool, kOther } kind = Kind::kOther;
  int64_t i = 0;
  double f = 0;
  std::string s;
  bool b = false;
  std::string type_name;  // as the document's format calls it
  std::string rendered;   // for error messages; empty for arrays and tables
};

Scalar scalar_from_toml(const toml::node& node) {
  Scalar v;
  if (auto x = node.as_integer()) {
    v.kind = Scalar::Kind::kInt;
    v.i = x->get();
    v.type_name = "integer";
    v.rendered = std::to_string(v.i);
  } else if (auto x = node.as_floating_point()) {
    v.kind = Scalar::Kind::kFloat;
    v.f = x->get();
    v.type_name = "float";
    v.rendered = fmt::format("{}", v.f);
  } else if (auto x = node.as_string()) {
    v.kind = Scalar::Kind::kString;
    v.s = x->get();
    v.type_name = "string";
    v.rendered = quote(v.s);
  } else if (auto x = node.as_boolean()) {
    v.kind = Scalar::Kind::kBool;
    v.b = x->get();
    v.type_name = "boolean";
    v.rendered = v.b ? "true" : "false";
  } else {
    v.type_name = node.is_array() ? "array" : node.is_table() ? "table" : "date/time";
  }
  return v;
}

Scalar scalar_from_json(const nlohmann::json& j) {
  Scalar v;
  v.type_name = j.type_name();
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t{INT64_MAX}) {
    v.kind = Scalar::Kind::kFloat;  // too large for an int key, but still a number
    v.f = j.get<double>();
  } else if (j.is_number_integer()) {
    v.kind = Scalar::Kind::kInt;
    v.i = j.get<int64_t>();
  } else if (j.is_number_float()) {
    v.kind = Scalar::Kind::kFloat;
    v.f = j.get<double>();
  } else if (j.is_string()) {
    v.kind = Scalar::Kind::kString;
    v.s = j.get<std::string>();
  } else if (j.is_boolean()) {
    v.kind = Scalar::Kind::kBool;
    v.b = j.get<bool>();
  }
  if (v.kind != Scalar::Kind::kOther) v.rendered = j.dump();
  return v;
}

// Formats a double so that TOML reads it back as the same float (not as an integer).
std::string format_float(double d) {
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Collects the assignments of one document and applies them only once the whole document has
// been checked, so a failed load leaves the config as it was.
class ConfigLoad {
 public:
  ConfigLoad(const std::vector<ConfigKey>& schema, std::string source)
      : schema_(schema), source_(std::move(source)) {
    for (const ConfigKey& key : schema_) {
      names_.push_back(key.name);
      sections_.insert(key.name.substr(0, key.name.find('.')));
    }
  }

  void check_section(const std::string& section, bool is_table) {
    if (!sections_.count(section)) {
      std::vector<std::string> candidates(sections_.begin(), sections_.end());
      fail("{}: unknown section '{}'{}", source_, section, suggestion(section, candidates));
    }
    check(is_table, "{}: '{}' must be a [{}] section, not a value", source_, section, section);
  }

  void assign(const std::string& name, const Scalar& v,
              const std::map<std::string, size_t, std::less<>>& index) {
    auto it = index.find(name);
    if (it == index.end()) {
      check(v.type_name != "table" && v.type_name != "object",
            "{}: '{}' is nested deeper than section.key", source_, name);
      fail("{}: unknown key '{}'{}", source_, name, suggestion(name, names_));
    }
    const ConfigKey& key = schema_[it->second];
    using Kind = Scalar::Kind;
    const auto wrong_type = [&] {
      fail("{}: {} must be {}, got {}{}{}", source_, name, type_noun(key.type), v.type_name,
           v.rendered.empty() ? "" : " ", v.rendered);
    };
    switch (key.type) {
      case ConfigType::kInt:
        if (v.kind != Kind::kInt) wrong_type();
        staged_.emplace_back(it->second, v.i);
        break;
      case ConfigType::kFloat:
        if (v.kind == Kind::kInt) {
          staged_.emplace_back(it->second, static_cast<double>(v.i));
        } else if (v.kind == Kind::kFloat) {
          check(std::isfinite(v.f), "{}: {} must be finite, got {}", source_, name, v.rendered);
          staged_.emplace_back(it->second, v.f);
        } else {
          wrong_type();
        }
        break;
      case ConfigType::kString:
        if (v.kind != Kind::kString) wrong_type();
        staged_.emplace_back(it->second, v.s);
        break;
      case ConfigType::kPath:
        if (v.kind != Kind::kString) wrong_type();
        staged_.emplace_back(it->second, path_value(v.s));
        break;
      case ConfigType::kBool:
        if (v.kind != Kind::kBool) wrong_type();
        staged_.emplace_back(it->second, v.b);
        break;
    }
  }

  void commit(std::vector<ConfigValue>& values) {
    std::vector<bool> present(schema_.size(), false);
    for (const auto& [i, value] : staged_) present[i] = true;
    std::vector<std::string> missing;
    for (size_t i = 0; i < schema_.size(); ++i) {
      if (schema_[i].required_in_file && !present[i]) {
        missing.push_back(fmt::format("'{}'", schema_[i].name));
      }
    }
    check(missing.empty(), "{}: missing required key{} {}", source_, missing.size() > 1 ? "s" : "",
          fmt::join(missing, ", "));
    for (auto& [i, value] : staged_) values[i] = std::move(value);
  }

 private:
  const std::vector<ConfigKey>& schema_;
  std::string source_;
  std::vector<std::string> names_;
  std::set<std::string> sections_;
  std::vector<std::pair<size_t, ConfigValue>> staged_;
};

}  // namespace

ConfigValue parse_config_value(ConfigType type, std::string_view raw, std::string_view what) {
  const std::string_view text = trim(raw);
  bool ok = true;
  ConfigValue value;
  switch (type) {
    case ConfigType::kInt: {
      int64_t v = 0;
      ok = parse_int(text, &v);
      value = v;
      break;
    }
    case ConfigType::kFloat: {
      double v = 0;
      ok = parse_float(text, &v);
      value = v;
      break;
    }
    case ConfigType::kString:
      value = std::string(raw);
      break;
    case ConfigType::kPath:
      value = path_value(std::string(raw));
      break;
    case ConfigType::kBool: {
      bool v = false;
      ok = parse_bool(text, &v);
      value = v;
      break;
    }
  }
  check(ok, "{} must be {}, got '{}'", what, type_noun(type), raw);
  return value;
}

Config::Config(std::vector<ConfigKey> schema) : schema_(std::move(schema)) {
  values_.reserve(schema_.size());
  for (size_t i = 0; i < schema_.size(); ++i) {
    const ConfigKey& key = schema_[i];
    const size_t dot = key.name.find('.');
    check(dot != std::string::npos && dot > 0 && dot + 1 < key.name.size() &&
              key.name.find('.', dot + 1) == std::string::npos,
          "config schema: key '{}' must be section.key", key.name);
    check(index_.emplace(key.name, i).second, "config schema: duplicate key '{}'", key.name);
    check(holds_type(key.default_value, key.type), "config schema: default of {} must be {}",
          key.name, type_noun(key.type));
    values_.push_back(key.default_value);
  }
}

void Config::load_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  check(file.good(), "{}: cannot open config file", path);
  std::ostringstream text;
  text << file.rdbuf();
  check(!file.bad(), "{}: cannot read config file", path);
  load_string(text.str(), path);
}

void Config::load_string(std::string_view toml_text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: TOML syntax error: {}", source_name, e.source().begin.line,
         e.source().begin.column, e.description());
  }
  ConfigLoad load(schema_, source_name);
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    load.check_section(section, section_node.is_table());
    for (const auto& [key, node] : *section_node.as_table()) {
      load.assign(section + "." + std::string(key.str()), scalar_from_toml(node), index_);
    }
  }
  load.commit(values_);
}

void Config::load_json(const nlohmann::json& j) {
  const std::string source = "config JSON";
  check(j.is_object(), "{}: expected an object of sections, got {}", source, j.type_name());
  ConfigLoad load(schema_, source);
  for (const auto& [section, section_value] : j.items()) {
    load.check_section(section, section_value.is_object());
    for (const auto& [key, value] : section_value.items()) {
      load.assign(section + "." + key, scalar_from_json(value), index_);
    }
  }
  load.commit(values_);
}

void Config::set_override(std::string_view assignment) {
  const size_t eq = assignment.find('=');
  const std::string_view name = eq == std::string_view::npos ? "" : trim(assignment.substr(0, eq));
  const size_t dot = name.find('.');
  check(dot != std::string_view::npos && dot > 0 && dot + 1 < name.size(),
        "--set expects section.key=value, got '{}'", assignment);
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::vector<std::string> names;
    for (const ConfigKey& key : schema_) names.push_back(key.name);
    fail("--set: unknown key '{}'{}", name, suggestion(name, names));
  }
  values_[it->second] = parse_config_value(schema_[it->second].type, assignment.substr(eq + 1),
                                           fmt::format("--set: {}", name));
}

size_t Config::index_of(std::string_view key) const {
  auto it = index_.find(key);
  check(it != index_.end(), "unknown config key '{}'", key);
  return it->second;
}

const ConfigValue& Config::value_of(std::string_view key, ConfigType type) const {
  const size_t i = index_of(key);
  const ConfigType stored =
      schema_[i].type == ConfigType::kPath ? ConfigType::kString : schema_[i].type;
  check(stored == type, "config key '{}' is read as {} but is {}", key, type_noun(type),
        type_noun(schema_[i].type));
  return values_[i];
}

int64_t Config::get_int(std::string_view key) const {
  return std::get<int64_t>(value_of(key, ConfigType::kInt));
}

double Config::get_float(std::string_view key) const {
  return std::get<double>(value_of(key, ConfigType::kFloat));
}

const std::string& Config::get_string(std::string_view key) const {
  return std::get<std::string>(value_of(key, ConfigType::kString));
}

bool Config::get_bool(std::string_view key) const {
  return std::get<bool>(value_of(key, ConfigType::kBool));
}

const ConfigValue& Config::value(std::string_view key) const { return values_[index_of(key)]; }

void Config::set(std::string_view key, ConfigValue value) {
  const size_t i = index_of(key);
  check(holds_type(value, schema_[i].type), "config key '{}' is set to a value that is not {}", key,
        type_noun(schema_[i].type));
  values_[i] = std::move(value);
}

std::string Config::to_toml() const {
  // Sections in order of first appearance in the schema, keys in schema order.
  std::vector<std::string> sections;
  for (const ConfigKey& key : schema_) {
    const std::string section = key.name.substr(0, key.name.find('.'));
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      sections.push_back(section);
    }
  }
  std::string out;
  for (const std::string& section : sections) {
    if (!out.empty()) out += "\n";
    out += fmt::format("[{}]\n", section);
    for (size_t i = 0; i < schema_.size(); ++i) {
      const ConfigKey& key = schema_[i];
      const size_t dot = key.name.find('.');
      if (key.name.compare(0, dot, section) != 0 || dot != section.size()) continue;
      const std::string value = std::visit(
          [](const auto& v) -> std::string {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
            if constexpr (std::is_same_v<T, double>) return format_float(v);
            if constexpr (std::is_same_v<T, std::string>) return toml_string(v);
            if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
          },
          values_[i]);
      out += fmt::format("{} = {}", key.name.substr(dot + 1), value);
      if (!key.help.empty()) out += fmt::format("  # {}", key.help);
      out += "\n";
    }
  }
  return out;
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < schema_.size(); ++i) {
    const std::string& name = schema_[i].name;
    const size_t dot = name.find('.');
    std::visit([&](const auto& v) { j[name.substr(0, dot)][name.substr(dot + 1)] = v; },
               values_[i]);
  }
  return j;
}

}  // namespace tessera
