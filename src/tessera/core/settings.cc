#include "tessera/core/settings.h"

namespace tessera {

void Range::check(std::string_view name, double value) const {
  const bool above_min = !min || (min_open ? value > *min : value >= *min);
  const bool below_max = !max || (max_open ? value < *max : value <= *max);
  if (above_min && below_max) return;
  if (!max && *min == 0) {
    fail("{} must {}, got {}", name, min_open ? "be positive" : "not be negative", value);
  }
  if (!max) fail("{} must be {} {}, got {}", name, min_open ? "above" : "at least", *min, value);
  if (!min) fail("{} must be {} {}, got {}", name, max_open ? "below" : "at most", *max, value);
  fail("{} must be in {}{}, {}{}, got {}", name, min_open ? "(" : "[", *min, *max,
       max_open ? ")" : "]", value);
}

std::string SettingInfo::described() const {
  return choices.empty() ? help : fmt::format("{}: {}", quoted_choices(choices), help);
}

void SettingInfo::check(const ConfigValue& value) const {
  if (range.empty()) return;
  if (const auto* i = std::get_if<int64_t>(&value)) range.check(name, double(*i));
  if (const auto* d = std::get_if<double>(&value)) range.check(name, *d);
}

}  // namespace tessera
