// The names an enum's values have in configs, flags and logs, kept in one table per enum. An enum
// takes part by declaring, beside itself, a function that ADL finds:
//   constexpr const auto& enum_names(Precision) { return kPrecisionNames; }  // EnumName array
// and is then written with enum_name(value) and read with enum_from_name<E>(text, what).
// C++17, for the CUDA kernels' headers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// "\"a\", \"b\" or \"c\"".
std::string quoted_choices(const std::vector<std::string_view>& names);
// "`what` must be <choices>, got \"name\"".
[[noreturn]] void fail_unknown_name(std::string_view what, std::string_view name,
                                    const std::vector<std::string_view>& names);

template <typename E>
std::vector<std::string_view> enum_choices() {
  std::vector<std::string_view> names;
  for (const EnumName<E>& entry : enum_names(E{})) names.push_back(entry.name);
  return names;
}

template <typename E>
constexpr std::string_view enum_name(E value) {
  for (const EnumName<E>& entry : enum_names(value)) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

// Throws naming `what` (the key or flag being read) and the choices.
template <typename E>
E enum_from_name(std::string_view name, std::string_view what) {
  for (const EnumName<E>& entry : enum_names(E{})) {
    if (entry.name == name) return entry.value;
  }
  fail_unknown_name(what, name, enum_choices<E>());
}

}  // namespace tessera
