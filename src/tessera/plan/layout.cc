#include "tessera/plan/layout.h"

#include <charconv>

#include "tessera/core/error.h"

namespace tessera::plan {

std::string Layout::str() const {
  std::string s =
      fmt::format("dp={},tp={},pp={},ep={},zero={},mb={},recompute={},vpp={},sp={}", dp, tp, pp, ep,
                  zero, micro_batch, enum_name(recompute), vpp, int(sequence_parallel));
  if (cp > 1) s += fmt::format(",cp={}", cp);
  if (recompute_fraction < 1) s += fmt::format(",rf={:g}", recompute_fraction);
  return s;
}

namespace {

int64_t positive(std::string_view key, std::string_view value) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  check(ec == std::errc() && end == value.data() + value.size() && v >= 1,
        "--layout: {}={} is not a positive integer", key, value);
  return v;
}

}  // namespace

Layout parse_layout(std::string_view text) {
  Layout layout;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view pair = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = pair.find('=');
    check(eq != std::string_view::npos, "--layout: '{}' is not key=value", pair);
    const std::string_view key = pair.substr(0, eq), value = pair.substr(eq + 1);
    if (key == "dp") {
      layout.dp = positive(key, value);
    } else if (key == "tp") {
      layout.tp = positive(key, value);
    } else if (key == "pp") {
      layout.pp = positive(key, value);
    } else if (key == "ep") {
      layout.ep = positive(key, value);
    } else if (key == "mb") {
      layout.micro_batch = positive(key, value);
    } else if (key == "rf") {
      double f = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), f);
      check(ec == std::errc() && end == value.data() + value.size() && f > 0 && f <= 1,
            "--layout: rf={} is the share of blocks that recompute, in (0, 1]", value);
      layout.recompute_fraction = f;
    } else if (key == "cp") {
      layout.cp = positive(key, value);
    } else if (key == "vpp") {
      layout.vpp = positive(key, value);
    } else if (key == "zero") {
      check(value.size() == 1 && value[0] >= '0' && value[0] <= '3',
            "--layout: zero={} must be 0, 1, 2 or 3", value);
      layout.zero = value[0] - '0';
    } else if (key == "recompute") {
      layout.recompute = enum_from_name<model::Recompute>(value, "--layout: recompute");
    } else if (key == "sp") {
      check(value == "0" || value == "1", "--layout: sp={} must be 0 or 1", value);
      layout.sequence_parallel = value == "1";
    } else {
      fail(
          "--layout: unknown key '{}' (known: dp, tp, pp, ep, zero, mb, recompute, rf, vpp, sp, "
          "cp)",
          key);
    }
  }
  return layout;
}

}  // namespace tessera::plan
