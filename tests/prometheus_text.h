// A parser of Prometheus' text exposition format 0.0.4, written from its specification, so that
// tests read /metrics the way a Prometheus server would and fail on anything it would reject:
// '# HELP name text' and '# TYPE name counter|gauge|histogram|summary|untyped' lines, each family's
// TYPE before its samples, metric and label names of the allowed characters, label values with
// \\, \" and \n escapes, and values as Go's ParseFloat reads them (+Inf, -Inf, NaN included).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::testing {

struct PrometheusSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PrometheusText {
  std::map<std::string, std::string> types, helps;  // by family name
  std::vector<PrometheusSample> samples;

  // The value of the one sample of `name` whose labels include `labels`; throws when there is
  // not exactly one.
  double value(const std::string& name,
               const std::map<std::string, std::string>& labels = {}) const {
    const PrometheusSample* found = nullptr;
    for (const PrometheusSample& s : samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : labels) {
        const auto it = s.labels.find(k);
        all = all && it != s.labels.end() && it->second == v;
      }
      if (!all) continue;
      if (found != nullptr) throw std::runtime_error("several samples of " + name);
      found = &s;
    }
    if (found == nullptr) throw std::runtime_error("no sample of " + name);
    return found->value;
  }
};

// Reads the text format line by line, throwing at the first line that breaks it.
class PrometheusParser {
 public:
  PrometheusText parse(const std::string& text) {
    if (text.empty() || text.back() != '\n') fail("the text must end with a line feed");
    size_t at = 0;
    while (at < text.size()) {
      const size_t end = text.find('\n', at);
      const std::string line = text.substr(at, end - at);
      at = end + 1;
      ++number_;
      if (line.empty()) continue;
      if (line[0] == '#') {
        comment(line);
      } else {
        sample(line);
      }
    }
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("/metrics line " + std::to_string(number_) + ": " + why);
  }

  static bool name_ok(const std::string& n, bool colons) {
    if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
    for (char c : n) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (colons && c == ':'))) {
        return false;
      }
    }
    return true;
  }

  // A histogram's _bucket, _sum and _count samples belong to the histogram's family.
  std::string family_of(const std::string& sample) const {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
        const std::string base = sample.substr(0, sample.size() - s.size());
        if (out_.types.count(base) && out_.types.at(base) == "histogram") return base;
      }
    }
    return sample;
  }

  // # HELP and # TYPE lines; any other comment is skipped.
  void comment(const std::string& line) {
    const bool help = line.rfind("# HELP ", 0) == 0, type = line.rfind("# TYPE ", 0) == 0;
    if (!help && !type) return;
    const size_t space = line.find(' ', 7);
    const std::string name = line.substr(7, space == std::string::npos ? space : space - 7);
    if (!name_ok(name, true)) fail("bad metric name '" + name + "'");
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (help) {
      if (out_.helps.count(name)) fail("a second HELP for " + name);
      out_.helps[name] = rest;
      return;
    }
    if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
        rest != "untyped") {
      fail("bad type '" + rest + "'");
    }
    if (out_.types.count(name)) fail("a second TYPE for " + name);
    for (const PrometheusSample& s : out_.samples) {
      if (family_of(s.name) == name) fail("TYPE of " + name + " after its samples");
    }
    out_.types[name] = rest;
  }

  void sample(const std::string& line) {
    PrometheusSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!name_ok(s.name, true)) fail("bad metric name '" + s.name + "'");
    if (i < line.size() && line[i] == '{') i = labels(line, i + 1, s);
    if (i >= line.size() || line[i] != ' ') fail("no value");
    s.value = value(line.substr(i + 1));
    if (!out_.types.count(family_of(s.name))) fail("a sample of " + s.name + " without TYPE");
    out_.samples.push_back(std::move(s));
  }

  // The labels from line[i] (after the '{') to the '}'; returns where the value's space is.
  size_t labels(const std::string& line, size_t i, PrometheusSample& s) const {
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find('=', i);
      if (eq == std::string::npos) fail("a label without '='");
      const std::string key = line.substr(i, eq - i);
      if (!name_ok(key, false) || key.rfind("__", 0) == 0) fail("bad label '" + key + "'");
      if (eq + 1 >= line.size() || line[eq + 1] != '"') fail("an unquoted label value");
      std::string value;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] != '\\') {
          value += line[j];
          continue;
        }
        if (++j >= line.size()) fail("a dangling escape");
        if (line[j] == 'n') {
          value += '\n';
        } else if (line[j] == '\\' || line[j] == '"') {
          value += line[j];
        } else {
          fail("a bad escape");
        }
      }
      if (j >= line.size()) fail("an unterminated label value");
      if (s.labels.count(key)) fail("label '" + key + "' twice");
      s.labels[key] = value;
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) fail("unterminated labels");
    return i + 1;
  }

  // A sample's value, an optional timestamp after it dropped.
  double value(std::string text) const {
    const size_t stamp = text.find(' ');
    if (stamp != std::string::npos) text = text.substr(0, stamp);
    if (text == "+Inf") return HUGE_VAL;
    if (text == "-Inf") return -HUGE_VAL;
    if (text == "NaN") return std::nan("");
    char* parsed_end = nullptr;
    const double v = std::strtod(text.c_str(), &parsed_end);
    if (text.empty() || *parsed_end != '\0') fail("bad value '" + text + "'");
    return v;
  }

  PrometheusText out_;
  size_t number_ = 0;
};

inline PrometheusText parse_prometheus(const std::string& text) {
  return PrometheusParser().parse(text);
}

}  // namespace tessera::testing
