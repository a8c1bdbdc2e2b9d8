#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tessera::obs {

// Label pairs (name, value) of one series, rendered in this order.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up. Safe to use from any thread.
class Counter {
 public:
  // Throws an Error for a negative or NaN amount.
  void inc(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_ = 0.0;
};

// A value that goes up and down. Safe to use from any thread.
class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_ = 0.0;
};

// Counts observations into buckets fixed at creation. Safe to use from any thread.
class Histogram {
 public:
  // Throws an Error unless upper_bounds are finite and strictly increasing; +Inf is implied.
  explicit Histogram(std::vector<double> upper_bounds);

  // Throws an Error for NaN.
  void observe(double value);

  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Observations <= each upper bound, then the total (the +Inf bucket).
  std::vector<uint64_t> cumulative_counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> upper_bounds_;
  std::vector<std::atomic<uint64_t>> counts_;  // per bucket, not cumulative; the last is +Inf
  std::atomic<double> sum_ = 0.0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// Metrics by name, rendered in Prometheus' text exposition format 0.0.4. A name is one metric
// family with one help text and type; each distinct label set under it is one series. Asking
// again for a series already registered returns the same object, so a caller may keep the
// reference or look it up each time. References stay valid as long as the registry.
class Registry {
 public:
  // Each throws an Error for a name or label name Prometheus does not accept, a name already
  // registered with another type or help text, or labels whose names differ from the ones
  // earlier series of the name were registered with.
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // A gauge whose value read() gives at each render; read must not use the registry.
  void gauge_callback(const std::string& name, const std::string& help,
                      std::function<double()> read, const Labels& labels = {});
  // Also throws when the series exists with other buckets, or labels include "le".
  Histogram& histogram(const std::string& name, const std::string& help,
                       const std::vector<double>& upper_bounds, const Labels& labels = {});

  // Renders the family `of` again, right after it, under the name `alias` (another engine's name
  // for the same series, which dashboards and autoscalers already read), with its type, its
  // series and the values they show under `of` in the same render, and the help text `help`.
  // Throws when `of` is not registered or `alias` is taken or not a valid name.
  void alias(const std::string& alias, const std::string& of, const std::string& help);

  // Families in the order they were first registered, each series in its own order, each
  // family's aliases after it.
  std::string render() const;

 private:
  using Metric = std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>,
                              std::function<double()>, std::unique_ptr<Histogram>>;
  struct Series {
    Labels labels;
    std::string label_text;  // name="value",... with values escaped
    Metric metric;
  };
  struct Family {
    std::string name, help;
    MetricType type;
    std::vector<Series> series;
  };
  struct Alias {
    std::string name, help, of;
  };

  // Checks name and labels, and returns the series they name, or null if it is new.
  Series* find(const std::string& name, const std::string& help, MetricType type,
               const Labels& labels, std::string& label_text);
  Series& add(const std::string& name, const std::string& help, MetricType type,
              const Labels& labels, std::string label_text, Metric metric);

  struct Snapshot;
  const Family* family(const std::string& name) const;
  bool has_alias(const std::string& name) const;
  static void render_family(std::string& out, const Family& family, const std::string& name,
                            const std::string& help, const std::vector<Snapshot>& values);

  mutable std::mutex mutex_;
  std::vector<Family> families_;
  std::vector<Alias> aliases_;
};

}  // namespace tessera::obs
