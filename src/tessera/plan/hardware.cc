#include "tessera/plan/hardware.h"

#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <span>
#include <sstream>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::plan {
namespace {

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;
constexpr double kMicro = 1e-6;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

constexpr std::string_view kAcceleratorFields[] = {"description",
                                                   "kind",
                                                   "peak_bf16_tflops",
                                                   "hbm_gib",
                                                   "hbm_bandwidth_gbps",
                                                   "scaleup_domain",
                                                   "scaleup_bandwidth_gbps",
                                                   "scaleout_bandwidth_gbps",
                                                   "collective_start_us",
                                                   "scaleup_step_latency_us",
                                                   "scaleout_step_latency_us",
                                                   "scaleup_torus_dims",
                                                   "matmul_peak_fraction",
                                                   "matmul_half_width",
                                                   "matmul_source",
                                                   "source",
                                                   "date",
                                                   "best_published_mfu",
                                                   "best_published_mfu_source",
                                                   "prices"};
constexpr std::string_view kPriceFields[] = {"usd_per_chip_hour_on_demand",
                                             "usd_per_chip_hour_spot",
                                             "usd_per_chip_hour_1y",
                                             "usd_per_chip_hour_3y",
                                             "source",
                                             "date"};

std::string_view type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date/time";
  }
}

// "file:line: [table]", the line left out where the parser recorded none.
std::string location(const std::string& source, const toml::node& node,
                     std::string_view table_name) {
  const auto line = node.source().begin.line;
  return line > 0 ? fmt::format("{}:{}: [{}]", source, line, table_name)
                  : fmt::format("{}: [{}]", source, table_name);
}

std::string known_names(const std::vector<Accelerator>& entries) {
  std::vector<std::string_view> names;
  for (const Accelerator& a : entries) names.push_back(a.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// Reads one TOML table field by field; every error names the source, line, table and field.
class TableReader {
 public:
  TableReader(const toml::table& table, const std::string& source, std::string table_name,
              std::span<const std::string_view> known)
      : table_(table), source_(source), table_name_(std::move(table_name)) {
    for (const auto& [key, node] : table) {
      check(std::find(known.begin(), known.end(), key.str()) != known.end(),
            "{} unknown field '{}'; the fields are: {}", where(node), key.str(),
            fmt::join(known, ", "));
    }
  }

  const toml::node* optional(std::string_view key) const { return table_.get(key); }

  const toml::node& required(std::string_view key) const {
    const toml::node* node = table_.get(key);
    check(node != nullptr,
          "{} is missing the required field '{}' (configs/hardware.toml shows every field with its "
          "unit)",
          where(table_), key);
    return *node;
  }

  std::string text(std::string_view key) const {
    const toml::node& node = required(key);
    const auto* value = node.as_string();
    check(value != nullptr, "{} {} must be a string, not {}", where(node), key, type_name(node));
    check(!value->get().empty(), "{} {} must not be empty", where(node), key);
    return value->get();
  }

  // "YYYY-MM", the month the figures describe.
  std::string month(std::string_view key) const {
    std::string value = text(key);
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    const bool shaped = value.size() == 7 && value[4] == '-' &&
                        std::all_of(value.begin(), value.begin() + 4, digit) && digit(value[5]) &&
                        digit(value[6]);
    const int month = shaped ? (value[5] - '0') * 10 + (value[6] - '0') : 0;
    check(month >= 1 && month <= 12, "{} {} must be a month as \"YYYY-MM\", not \"{}\"",
          where(required(key)), key, value);
    return value;
  }

  double number(const toml::node& node, std::string_view key) const {
    double value = 0;
    if (const auto* i = node.as_integer()) {
      value = static_cast<double>(i->get());
    } else if (const auto* f = node.as_floating_point()) {
      value = f->get();
    } else {
      fail("{} {} must be a number, not {}", where(node), key, type_name(node));
    }
    check(std::isfinite(value), "{} {} must be a finite number", where(node), key);
    return value;
  }

  double positive(std::string_view key) const {
    const toml::node& node = required(key);
    const double value = number(node, key);
    check(value > 0, "{} {} must be positive, not {}", where(node), key, value);
    return value;
  }

  int64_t chips(std::string_view key) const {
    const toml::node& node = required(key);
    const auto* value = node.as_integer();
    check(value != nullptr, "{} {} must be an integer number of chips, not {}", where(node), key,
          type_name(node));
    check(value->get() >= 1, "{} {} must be at least 1 chip, not {}", where(node), key,
          value->get());
    return value->get();
  }

  std::optional<double> price(std::string_view key) const {
    const toml::node* node = optional(key);
    if (node == nullptr) return std::nullopt;
    const double value = number(*node, key);
    check(value >= 0, "{} {} must be zero or more, not {}", where(*node), key, value);
    return value;
  }

  std::string where(const toml::node& node) const { return location(source_, node, table_name_); }

 private:
  const toml::table& table_;
  const std::string& source_;
  std::string table_name_;
};

Prices read_prices(const toml::node& node, const std::string& source, const std::string& name) {
  const std::string table_name = name + ".prices";
  const auto* table = node.as_table();
  check(table != nullptr, "{} prices must be a table [{}], not {}", location(source, node, name),
        table_name, type_name(node));
  const TableReader reader(*table, source, table_name, kPriceFields);
  Prices prices;
  prices.on_demand = reader.price("usd_per_chip_hour_on_demand");
  prices.spot = reader.price("usd_per_chip_hour_spot");
  prices.committed_1y = reader.price("usd_per_chip_hour_1y");
  prices.committed_3y = reader.price("usd_per_chip_hour_3y");
  check(prices.on_demand || prices.spot || prices.committed_1y || prices.committed_3y,
        "{} gives no price; set at least one of usd_per_chip_hour_on_demand, "
        "usd_per_chip_hour_spot, usd_per_chip_hour_1y, usd_per_chip_hour_3y",
        reader.where(*table));
  prices.source = reader.text("source");
  prices.date = reader.month("date");
  return prices;
}

Accelerator read_accelerator(const toml::table& table, const std::string& source,
                             const std::string& name) {
  const TableReader reader(table, source, name, kAcceleratorFields);
  Accelerator a;
  a.name = name;
  a.description = reader.text("description");
  a.kind = reader.text("kind");
  check(a.kind == "tpu" || a.kind == "gpu", "{} kind must be \"tpu\" or \"gpu\", not \"{}\"",
        reader.where(reader.required("kind")), a.kind);
  a.peak_bf16_flops = reader.positive("peak_bf16_tflops") * kTera;
  a.hbm_bytes = reader.positive("hbm_gib") * kGiB;
  a.hbm_bandwidth = reader.positive("hbm_bandwidth_gbps") * kGiga;
  a.scaleup_domain = reader.chips("scaleup_domain");
  a.scaleup_bandwidth = reader.positive("scaleup_bandwidth_gbps") * kGiga;
  a.scaleout_bandwidth = reader.positive("scaleout_bandwidth_gbps") * kGiga;
  a.latency.start = reader.positive("collective_start_us") * kMicro;
  a.latency.scaleup_step = reader.positive("scaleup_step_latency_us") * kMicro;
  a.latency.scaleout_step = reader.positive("scaleout_step_latency_us") * kMicro;
  const int64_t dims = reader.chips("scaleup_torus_dims");
  check(dims <= 3, "{} scaleup_torus_dims is 1 (a switch, NVLink), 2 or 3 (an ICI torus), not {}",
        reader.where(reader.required("scaleup_torus_dims")), dims);
  a.latency.scaleup_torus_dims = int(dims);
  a.matmul.peak_fraction = reader.positive("matmul_peak_fraction");
  check(a.matmul.peak_fraction <= 1,
        "{} matmul_peak_fraction is a fraction of peak in (0, 1], not {}",
        reader.where(reader.required("matmul_peak_fraction")), a.matmul.peak_fraction);
  a.matmul.half_width = reader.positive("matmul_half_width");
  a.matmul.source = reader.text("matmul_source");
  a.source = reader.text("source");
  a.date = reader.month("date");
  if (const toml::node* mfu = reader.optional("best_published_mfu")) {
    a.best_published_mfu = reader.number(*mfu, "best_published_mfu");
    check(*a.best_published_mfu > 0 && *a.best_published_mfu <= 1,
          "{} best_published_mfu is a fraction in (0, 1], not {}", reader.where(*mfu),
          *a.best_published_mfu);
    a.best_published_mfu_source = reader.text("best_published_mfu_source");
  } else if (const toml::node* orphan = reader.optional("best_published_mfu_source")) {
    fail("{} best_published_mfu_source needs best_published_mfu beside it", reader.where(*orphan));
  }
  if (const toml::node* prices = reader.optional("prices")) {
    a.prices = read_prices(*prices, source, name);
  }
  return a;
}

}  // namespace

HardwareCatalog HardwareCatalog::parse(std::string_view toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: TOML syntax error: {}", source, e.source().begin.line, e.source().begin.column,
         e.description());
  }
  HardwareCatalog catalog;
  catalog.source_ = source;
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    const auto* table = node.as_table();
    check(table != nullptr, "{}:{}: '{}' must be a table [{}] of accelerator fields, not {}",
          source, node.source().begin.line, name, name, type_name(node));
    // A table with nothing but [name.prices] changes the prices of an accelerator defined
    // elsewhere (usually the built-in catalog) and is applied by merge().
    if (table->size() == 1 && table->contains("prices")) {
      catalog.price_overrides_.push_back({name, read_prices(*table->get("prices"), source, name)});
    } else {
      catalog.entries_.push_back(read_accelerator(*table, source, name));
    }
  }
  return catalog;
}

HardwareCatalog HardwareCatalog::load(const std::filesystem::path& file) {
  check(!std::filesystem::is_directory(file), "{}: is a directory, not a hardware catalog file",
        file.string());
  std::ifstream in(file, std::ios::binary);
  check(in.is_open(), "{}: cannot open the hardware catalog file", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  check(!in.bad(), "{}: cannot read the hardware catalog file", file.string());
  return parse(text.str(), file.string());
}

void HardwareCatalog::merge(const HardwareCatalog& other) {
  const auto named = [this](std::string_view name) {
    return std::find_if(entries_.begin(), entries_.end(),
                        [&](const Accelerator& a) { return a.name == name; });
  };
  for (const Accelerator& entry : other.entries_) {
    if (auto it = named(entry.name); it != entries_.end()) {
      *it = entry;
    } else {
      entries_.push_back(entry);
    }
  }
  for (const PriceOverride& change : other.price_overrides_) {
    auto it = named(change.name);
    check(it != entries_.end(),
          "{}: [{}.prices] sets the prices of unknown accelerator '{}'; known accelerators: {}",
          other.source_, change.name, change.name, known_names(entries_));
    it->prices = change.prices;
  }
}

const Accelerator& HardwareCatalog::find(std::string_view name) const {
  for (const Accelerator& a : entries_) {
    if (a.name == name) return a;
  }
  fail("unknown accelerator '{}'; known accelerators: {}", name, known_names(entries_));
}

}  // namespace tessera::plan
