#include "tessera/obs/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::obs {

namespace {

// Prometheus' [a-zA-Z_:][a-zA-Z0-9_:]* for metric names, the same without ':' for labels.
bool valid_name(std::string_view name, bool colons) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0) && !(colons && c == ':')) return false;
  }
  return true;
}

// HELP text escapes backslash and newline; label values also the double quote.
std::string escape(std::string_view text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

const char* type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "";
}

// `name` with its labels in braces, or alone when it has none.
std::string sample_name(std::string_view name, std::string_view label_text) {
  return label_text.empty() ? std::string(name) : fmt::format("{}{{{}}}", name, label_text);
}

}  // namespace

void Counter::inc(double amount) {
  check(amount >= 0.0, "counter increment {} must be a number >= 0", amount);
  value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    check(std::isfinite(upper_bounds_[i]),
          "histogram bucket bound {} must be finite (+Inf is implied)", upper_bounds_[i]);
    if (i == 0) continue;
    check(upper_bounds_[i - 1] < upper_bounds_[i],
          "histogram bucket bounds must increase, but {} follows {}", upper_bounds_[i],
          upper_bounds_[i - 1]);
  }
}

void Histogram::observe(double value) {
  check(!std::isnan(value), "histogram observation is NaN");
  const auto bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  counts_[bucket - upper_bounds_.begin()].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> cumulative(counts_.size());
  uint64_t total = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    cumulative[i] = total += counts_[i].load(std::memory_order_relaxed);
  }
  return cumulative;
}

Registry::Series* Registry::find(const std::string& name, const std::string& help, MetricType type,
                                 const Labels& labels, std::string& label_text) {
  check(valid_name(name, /*colons=*/true), "metric name '{}' must match [a-zA-Z_:][a-zA-Z0-9_:]*",
        name);
  label_text.clear();
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& label = labels[i].first;
    check(valid_name(label, /*colons=*/false) && !label.starts_with("__"),
          "metric {}: label name '{}' must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __",
          name, label);
    check(!(type == MetricType::kHistogram && label == "le"),
          "histogram {}: the label name 'le' is reserved for its buckets", name);
    for (size_t j = 0; j < i; ++j) {
      check(labels[j].first != label, "metric {}: label '{}' is given twice", name, label);
    }
    if (i > 0) label_text += ',';
    label_text += fmt::format("{}=\"{}\"", label, escape(labels[i].second, /*quotes=*/true));
  }

  const auto family = std::find_if(families_.begin(), families_.end(),
                                   [&](const Family& f) { return f.name == name; });
  if (family == families_.end()) return nullptr;
  check(family->type == type, "metric {} is already registered as a {}, not a {}", name,
        type_name(family->type), type_name(type));
  check(family->help == help, "metric {} is already registered with the help text '{}'", name,
        family->help);
  for (Series& s : family->series) {
    if (s.label_text == label_text) return &s;
  }
  const Labels& first = family->series.front().labels;
  const bool same_names =
      std::equal(first.begin(), first.end(), labels.begin(), labels.end(),
                 [](const auto& a, const auto& b) { return a.first == b.first; });
  check(same_names, "metric {}: labels {{{}}} differ in names from those of {{{}}}", name,
        label_text, family->series.front().label_text);
  return nullptr;
}

Registry::Series& Registry::add(const std::string& name, const std::string& help, MetricType type,
                                const Labels& labels, std::string label_text, Metric metric) {
  auto family = std::find_if(families_.begin(), families_.end(),
                             [&](const Family& f) { return f.name == name; });
  if (family == families_.end()) {
    check(!has_alias(name), "metric {} is already registered as another metric's alias", name);
    family = families_.insert(families_.end(), Family{name, help, type, {}});
  }
  family->series.push_back({labels, std::move(label_text), std::move(metric)});
  return family->series.back();
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard lock(mutex_);
  std::string label_text;
  Series* s = find(name, help, MetricType::kCounter, labels, label_text);
  if (s == nullptr) {
    s = &add(name, help, MetricType::kCounter, labels, std::move(label_text),
             std::make_unique<Counter>());
  }
  return *std::get<std::unique_ptr<Counter>>(s->metric);
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard lock(mutex_);
  std::string label_text;
  Series* s = find(name, help, MetricType::kGauge, labels, label_text);
  if (s == nullptr) {
    s = &add(name, help, MetricType::kGauge, labels, std::move(label_text),
             std::make_unique<Gauge>());
  }
  auto* gauge = std::get_if<std::unique_ptr<Gauge>>(&s->metric);
  check(gauge != nullptr, "gauge {} is already registered with a callback",
        sample_name(name, s->label_text));
  return **gauge;
}

void Registry::gauge_callback(const std::string& name, const std::string& help,
                              std::function<double()> read, const Labels& labels) {
  check(bool(read), "gauge {}: the callback is empty", name);
  std::lock_guard lock(mutex_);
  std::string label_text;
  check(find(name, help, MetricType::kGauge, labels, label_text) == nullptr,
        "gauge {} is already registered", sample_name(name, label_text));
  add(name, help, MetricType::kGauge, labels, std::move(label_text), std::move(read));
}

Histogram& Registry::histogram(const std::string& name, const std::string& help,
                               const std::vector<double>& upper_bounds, const Labels& labels) {
  std::lock_guard lock(mutex_);
  std::string label_text;
  Series* s = find(name, help, MetricType::kHistogram, labels, label_text);
  if (s == nullptr) {
    s = &add(name, help, MetricType::kHistogram, labels, std::move(label_text),
             std::make_unique<Histogram>(upper_bounds));
  }
  Histogram& histogram = *std::get<std::unique_ptr<Histogram>>(s->metric);
  check(histogram.upper_bounds() == upper_bounds,
        "histogram {} is already registered with other buckets", sample_name(name, s->label_text));
  return histogram;
}

const Registry::Family* Registry::family(const std::string& name) const {
  const auto f = std::find_if(families_.begin(), families_.end(),
                              [&](const Family& f) { return f.name == name; });
  return f == families_.end() ? nullptr : &*f;
}

bool Registry::has_alias(const std::string& name) const {
  return std::any_of(aliases_.begin(), aliases_.end(),
                     [&](const Alias& a) { return a.name == name; });
}

void Registry::alias(const std::string& alias, const std::string& of, const std::string& help) {
  check(valid_name(alias, /*colons=*/true), "metric name '{}' must match [a-zA-Z_:][a-zA-Z0-9_:]*",
        alias);
  std::lock_guard lock(mutex_);
  check(family(of) != nullptr, "metric alias {}: no metric {} is registered", alias, of);
  check(family(alias) == nullptr && !has_alias(alias),
        "metric alias {}: the name is already registered", alias);
  aliases_.push_back({alias, help, of});
}

// Each series' value read once, so that a family and its aliases show the same numbers.
struct Registry::Snapshot {
  double value = 0;                  // a counter's or gauge's
  std::vector<uint64_t> cumulative;  // a histogram's buckets, then its count
  double sum = 0;
};

void Registry::render_family(std::string& out, const Family& family, const std::string& name,
                             const std::string& help, const std::vector<Snapshot>& values) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape(help, /*quotes=*/false), name,
                     type_name(family.type));
  for (size_t i = 0; i < family.series.size(); ++i) {
    const Series& s = family.series[i];
    const Snapshot& v = values[i];
    if (family.type != MetricType::kHistogram) {
      out += fmt::format("{} {}\n", sample_name(name, s.label_text), format_value(v.value));
      continue;
    }
    const Histogram& h = *std::get<std::unique_ptr<Histogram>>(s.metric);
    const std::string comma = s.label_text.empty() ? "" : s.label_text + ",";
    for (size_t b = 0; b < v.cumulative.size(); ++b) {
      const std::string le =
          b < h.upper_bounds().size() ? format_value(h.upper_bounds()[b]) : "+Inf";
      out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, comma, le, v.cumulative[b]);
    }
    out += fmt::format("{} {}\n", sample_name(name + "_sum", s.label_text), format_value(v.sum));
    out += fmt::format("{} {}\n", sample_name(name + "_count", s.label_text), v.cumulative.back());
  }
}

std::string Registry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  std::vector<Snapshot> values;
  for (const Family& f : families_) {
    values.assign(f.series.size(), {});
    for (size_t i = 0; i < f.series.size(); ++i) {
      const Metric& m = f.series[i].metric;
      if (const auto* counter = std::get_if<std::unique_ptr<Counter>>(&m)) {
        values[i].value = (*counter)->value();
      } else if (const auto* gauge = std::get_if<std::unique_ptr<Gauge>>(&m)) {
        values[i].value = (*gauge)->value();
      } else if (const auto* read = std::get_if<std::function<double()>>(&m)) {
        values[i].value = (*read)();
      } else if (const auto* histogram = std::get_if<std::unique_ptr<Histogram>>(&m)) {
        values[i].cumulative = (*histogram)->cumulative_counts();
        values[i].sum = (*histogram)->sum();
      }
    }
    render_family(out, f, f.name, f.help, values);
    for (const Alias& a : aliases_) {
      if (a.of == f.name) render_family(out, f, a.name, a.help, values);
    }
  }
  return out;
}

}  // namespace tessera::obs
