#include "tessera/core/enum_names.h"

#include "tessera/core/error.h"

namespace tessera {

std::string quoted_choices(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += fmt::format("\"{}\"", names[i]);
  }
  return out;
}

void fail_unknown_name(std::string_view what, std::string_view name,
                       const std::vector<std::string_view>& names) {
  fail("{} must be {}, got \"{}\"", what, quoted_choices(names), name);
}

}  // namespace tessera
