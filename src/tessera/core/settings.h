// One row per setting: its name as the user writes it (a config key "section.key" or a flag
// "--name"), the struct member it fills, its help and the values it accepts. A config's schema and
// defaults (read from a default-constructed struct), the reader (Config -> struct), the writer
// (struct -> Config, and so TOML and JSON) and a command's flags and --help all come from the
// rows, so that a setting is described once, beside the struct it fills.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/core/enum_names.h"
#include "tessera/core/error.h"

namespace tessera {

// An enum with a table of names (core/enum_names.h).
template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  enum_names(e);
};

// The numbers a setting accepts; either end may be absent or open.
struct Range {
  std::optional<double> min, max;
  bool min_open = false, max_open = false;

  bool empty() const { return !min && !max; }
  // Throws "`name` must be at least 1, got 0", "... must not be negative, got -1" or
  // "... must be in (0, 1), got 1".
  void check(std::string_view name, double value) const;
};
inline Range at_least(double min) { return {min, std::nullopt}; }
inline Range above(double min) { return {min, std::nullopt, true}; }
inline Range within(double min, double max) { return {min, max}; }

// What a row says about its setting, whatever the struct it fills.
struct SettingInfo {
  std::string name;  // "train.lr" in a config, "--top-k" among flags
  ConfigType type = ConfigType::kString;
  std::string help;
  Range range;
  std::vector<std::string_view> choices;  // the names of an enum setting
  bool required = false;                  // a config file, or a command line, must give it
  bool repeatable = false;                // a flag given any number of times, each value added
  std::string value_name;                 // flags: "N", "DIR"; empty for a switch
  // Config keys: why a Hugging Face model folder leaves the key at its default (a run's
  // settings, not the model's); empty for the keys its config.json sets.
  std::string_view not_from_hf;

  // The help with the choices of an enum in front: "\"f32\" or \"bf16\": matmul precision".
  std::string described() const;
  // Throws naming the setting when a number lies outside its range.
  void check(const ConfigValue& value) const;
};

// How a member of type T is held in a ConfigValue. decode names the setting in its errors.
template <typename T>
struct SettingCodec;

template <std::integral T>
requires(!std::same_as<T, bool>) struct SettingCodec<T> {
  static constexpr ConfigType kType = ConfigType::kInt;
  static ConfigValue encode(T v) { return int64_t(v); }
  static T decode(const ConfigValue& value, std::string_view name) {
    const int64_t v = std::get<int64_t>(value);
    check(std::in_range<T>(v), "{} must be in [{}, {}], got {}", name,
          std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), v);
    return T(v);
  }
};

template <>
struct SettingCodec<double> {
  static constexpr ConfigType kType = ConfigType::kFloat;
  static ConfigValue encode(double v) { return v; }
  static double decode(const ConfigValue& value, std::string_view) {
    return std::get<double>(value);
  }
};

template <>
struct SettingCodec<bool> {
  static constexpr ConfigType kType = ConfigType::kBool;
  static ConfigValue encode(bool v) { return v; }
  static bool decode(const ConfigValue& value, std::string_view) { return std::get<bool>(value); }
};

template <>
struct SettingCodec<std::string> {
  static constexpr ConfigType kType = ConfigType::kString;
  static ConfigValue encode(const std::string& v) { return v; }
  static std::string decode(const ConfigValue& value, std::string_view) {
    return std::get<std::string>(value);
  }
};

template <>
struct SettingCodec<std::filesystem::path> {
  static constexpr ConfigType kType = ConfigType::kPath;
  static ConfigValue encode(const std::filesystem::path& v) { return v.string(); }
  static std::filesystem::path decode(const ConfigValue& value, std::string_view) {
    return std::get<std::string>(value);
  }
};

// Durations are written in seconds.
template <>
struct SettingCodec<std::chrono::milliseconds> {
  static constexpr ConfigType kType = ConfigType::kFloat;
  static ConfigValue encode(std::chrono::milliseconds v) { return double(v.count()) / 1000; }
  static std::chrono::milliseconds decode(const ConfigValue& value, std::string_view) {
    return std::chrono::milliseconds(int64_t(std::get<double>(value) * 1000));
  }
};

template <NamedEnum E>
struct SettingCodec<E> {
  static constexpr ConfigType kType = ConfigType::kString;
  static ConfigValue encode(E v) { return std::string(enum_name(v)); }
  static E decode(const ConfigValue& value, std::string_view name) {
    return enum_from_name<E>(std::get<std::string>(value), name);
  }
};

// A row over the struct S it fills.
template <typename S>
struct Setting : SettingInfo {
  // The member's value; nullopt for an optional member that holds none.
  std::function<std::optional<ConfigValue>(const S&)> get;
  // Fills the member (adds to it, for a repeatable flag); throws naming the setting.
  std::function<void(S&, const ConfigValue&)> set;
};

template <typename S>
using Settings = std::vector<Setting<S>>;

namespace detail {

template <typename T>
struct Optional : std::false_type {};
template <typename T>
struct Optional<std::optional<T>> : std::true_type {};
template <typename T>
struct Repeated : std::false_type {};
template <typename T>
struct Repeated<std::vector<T>> : std::true_type {};

}  // namespace detail

// The row of `member`; an optional member holds no default, a vector member is a flag given any
// number of times.
template <typename S, typename T>
Setting<S> setting(std::string name, T S::*member, std::string help, Range range = {}) {
  Setting<S> row;
  row.name = std::move(name);
  row.help = std::move(help);
  row.range = range;
  if constexpr (detail::Optional<T>::value || detail::Repeated<T>::value) {
    using Codec = SettingCodec<typename T::value_type>;
    row.type = Codec::kType;
    if constexpr (NamedEnum<typename T::value_type>) {
      row.choices = enum_choices<typename T::value_type>();
    }
    if constexpr (detail::Optional<T>::value) {
      row.get = [member](const S& s) -> std::optional<ConfigValue> {
        if (!(s.*member)) return std::nullopt;
        return Codec::encode(*(s.*member));
      };
      row.set = [member, name = row.name](S& s, const ConfigValue& v) {
        s.*member = Codec::decode(v, name);
      };
    } else {
      row.repeatable = true;
      row.get = [](const S&) -> std::optional<ConfigValue> { return std::nullopt; };
      row.set = [member, name = row.name](S& s, const ConfigValue& v) {
        (s.*member).push_back(Codec::decode(v, name));
      };
    }
  } else {
    using Codec = SettingCodec<T>;
    row.type = Codec::kType;
    if constexpr (NamedEnum<T>) row.choices = enum_choices<T>();
    row.get = [member](const S& s) -> std::optional<ConfigValue> {
      return Codec::encode(s.*member);
    };
    row.set = [member, name = row.name](S& s, const ConfigValue& v) {
      s.*member = Codec::decode(v, name);
    };
  }
  return row;
}

// A flag's row: `value_name` says what its value is ("N"; for an enum, empty: its choices,
// "f32|bf16"); a bool member is a switch.
template <typename S, typename T>
Setting<S> flag(std::string name, std::string value_name, T S::*member, std::string help,
                Range range = {}) {
  Setting<S> row = setting(std::move(name), member, std::move(help), range);
  row.value_name = std::move(value_name);
  if (!row.value_name.empty()) return row;
  for (size_t i = 0; i < row.choices.size(); ++i) {
    if (i > 0) row.value_name += '|';
    row.value_name += row.choices[i];
  }
  return row;
}

// A string setting that S holds otherwise than as one string: `format` writes the member as text
// and `parse` reads it back, throwing naming the setting.
template <typename S>
Setting<S> text_setting(std::string name, std::string help,
                        std::function<std::string(const S&)> format,
                        std::function<void(S&, const std::string&)> parse) {
  Setting<S> row;
  row.name = std::move(name);
  row.help = std::move(help);
  row.get = [format = std::move(format)](const S& s) -> std::optional<ConfigValue> {
    return format(s);
  };
  row.set = [parse = std::move(parse)](S& s, const ConfigValue& v) {
    parse(s, std::get<std::string>(v));
  };
  return row;
}

// The row of a bool member that the setting turns off, such as the switch --unfused-attention.
template <typename S>
Setting<S> negated(Setting<S> row) {
  row.get = [get = row.get](const S& s) -> std::optional<ConfigValue> {
    const std::optional<ConfigValue> value = get(s);
    if (!value) return value;
    return !std::get<bool>(*value);
  };
  row.set = [set = row.set](S& s, const ConfigValue& v) { set(s, !std::get<bool>(v)); };
  return row;
}

// The row of a number the setting gives in other units: the member holds `factor` times it.
template <typename S>
Setting<S> scaled(Setting<S> row, double factor) {
  row.get = [get = row.get, factor](const S& s) -> std::optional<ConfigValue> {
    const std::optional<ConfigValue> value = get(s);
    if (!value) return value;
    return std::get<double>(*value) / factor;
  };
  row.set = [set = row.set, factor](S& s, const ConfigValue& v) {
    set(s, std::get<double>(v) * factor);
  };
  return row;
}

template <typename S>
Setting<S> required(Setting<S> row) {
  row.required = true;
  return row;
}

// The rows of the struct held in `member`, as rows of the struct around it.
template <typename Outer, typename Inner>
Settings<Outer> nest(Inner Outer::*member, const Settings<Inner>& rows) {
  Settings<Outer> out;
  for (const Setting<Inner>& row : rows) {
    Setting<Outer> o;
    static_cast<SettingInfo&>(o) = row;
    o.get = [member, get = row.get](const Outer& s) { return get(s.*member); };
    o.set = [member, set = row.set](Outer& s, const ConfigValue& v) { set(s.*member, v); };
    out.push_back(std::move(o));
  }
  return out;
}

template <typename S>
Settings<S> join(std::initializer_list<Settings<S>> parts) {
  Settings<S> out;
  for (const Settings<S>& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// The config keys of `rows`, each default read from a default-constructed S.
template <typename S>
std::vector<ConfigKey> config_schema(const Settings<S>& rows) {
  const S defaults{};
  std::vector<ConfigKey> keys;
  for (const Setting<S>& row : rows) {
    std::optional<ConfigValue> value = row.get(defaults);
    check(value.has_value(), "config schema: {} has no default", row.name);
    keys.push_back({row.name, row.type, std::move(*value), row.required, row.described()});
  }
  return keys;
}

// Throws naming the first setting whose value lies outside its range.
template <typename S>
void check_settings(const Settings<S>& rows, const S& s) {
  for (const Setting<S>& row : rows) {
    if (row.range.empty()) continue;
    if (const std::optional<ConfigValue> value = row.get(s)) row.check(*value);
  }
}

// Fills `out` from the config's values of the rows' keys, each checked against its range.
template <typename S>
void read_settings(const Settings<S>& rows, const Config& config, S& out) {
  for (const Setting<S>& row : rows) row.set(out, config.value(row.name));
  check_settings(rows, out);
}

// Sets the config's values of the rows' keys from `s`.
template <typename S>
void write_settings(const Settings<S>& rows, const S& s, Config& config) {
  for (const Setting<S>& row : rows) {
    if (std::optional<ConfigValue> value = row.get(s)) config.set(row.name, std::move(*value));
  }
}

}  // namespace tessera
