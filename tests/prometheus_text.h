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

inline PrometheusText parse_prometheus(const std::string& text) {
  PrometheusText out;
  auto fail = [](size_t line, const std::string& why) -> void {
    throw std::runtime_error("/metrics line " + std::to_string(line) + ": " + why);
  };
  auto name_ok = [](const std::string& n, bool colons) {
    if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
    for (char c : n) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (colons && c == ':'))) {
        return false;
      }
    }
    return true;
  };
  auto family_of = [&](const std::string& sample) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
        const std::string base = sample.substr(0, sample.size() - s.size());
        if (out.types.count(base) && out.types.at(base) == "histogram") return base;
      }
    }
    return sample;
  };
  size_t number = 0, at = 0;
  if (text.empty() || text.back() != '\n') fail(0, "the text must end with a line feed");
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++number;
    if (line.empty()) continue;
    if (line[0] == '#') {
      const bool help = line.rfind("# HELP ", 0) == 0, type = line.rfind("# TYPE ", 0) == 0;
      if (!help && !type) continue;  // a comment
      const size_t space = line.find(' ', 7);
      const std::string name = line.substr(7, space == std::string::npos ? space : space - 7);
      if (!name_ok(name, true)) fail(number, "bad metric name '" + name + "'");
      const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
      if (type) {
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped") {
          fail(number, "bad type '" + rest + "'");
        }
        if (out.types.count(name)) fail(number, "a second TYPE for " + name);
        for (const PrometheusSample& s : out.samples) {
          if (family_of(s.name) == name) fail(number, "TYPE of " + name + " after its samples");
        }
        out.types[name] = rest;
      } else {
        if (out.helps.count(name)) fail(number, "a second HELP for " + name);
        out.helps[name] = rest;
      }
      continue;
    }
    PrometheusSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!name_ok(s.name, true)) fail(number, "bad metric name '" + s.name + "'");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos) fail(number, "a label without '='");
        const std::string key = line.substr(i, eq - i);
        if (!name_ok(key, false) || key.rfind("__", 0) == 0)
          fail(number, "bad label '" + key + "'");
        if (eq + 1 >= line.size() || line[eq + 1] != '"') fail(number, "an unquoted label value");
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\') {
            if (++j >= line.size()) fail(number, "a dangling escape");
            if (line[j] == 'n') {
              value += '\n';
            } else if (line[j] == '\\' || line[j] == '"') {
              value += line[j];
            } else {
              fail(number, "a bad escape");
            }
          } else {
            value += line[j];
          }
        }
        if (j >= line.size()) fail(number, "an unterminated label value");
        if (s.labels.count(key)) fail(number, "label '" + key + "' twice");
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) fail(number, "unterminated labels");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') fail(number, "no value");
    std::string value_text = line.substr(i + 1);
    const size_t stamp = value_text.find(' ');
    if (stamp != std::string::npos) value_text = value_text.substr(0, stamp);  // a timestamp
    if (value_text == "+Inf") {
      s.value = HUGE_VAL;
    } else if (value_text == "-Inf") {
      s.value = -HUGE_VAL;
    } else if (value_text == "NaN") {
      s.value = std::nan("");
    } else {
      char* parsed_end = nullptr;
      s.value = std::strtod(value_text.c_str(), &parsed_end);
      if (value_text.empty() || *parsed_end != '\0') fail(number, "bad value '" + value_text + "'");
    }
    if (!out.types.count(family_of(s.name)))
      fail(number, "a sample of " + s.name + " without TYPE");
    out.samples.push_back(std::move(s));
  }
  return out;
}

}  // namespace tessera::testing
