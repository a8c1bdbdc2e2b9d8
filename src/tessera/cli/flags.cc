#include "tessera/cli/flags.h"

#include <charconv>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::cli {

Flags::Flags(std::string command, std::vector<FlagSpec> specs, int argc, char** argv,
             std::string operands_name)
    : command_(std::move(command)),
      specs_(std::move(specs)),
      operands_name_(std::move(operands_name)) {
  specs_.push_back({"help", "", "show this help (also -h)"});
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i] == std::string_view("-h") ? "--help" : argv[i];
    if (!operands_name_.empty() && arg.rfind("--", 0) != 0) {
      operands_.push_back(arg);
      continue;
    }
    check(arg.rfind("--", 0) == 0 && arg.size() > 2,
          "tessera {}: unexpected argument '{}' (flags start with --; see --help)", command_, arg);
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs_) {
      if (s.name == name) spec = &s;
    }
    check(spec != nullptr, "tessera {}: unknown flag --{} (see tessera {} --help)", command_, name,
          command_);
    if (!spec->value_name.empty() && !inline_value) {
      check(i + 1 < argc, "tessera {}: --{} needs a value ({})", command_, name, spec->value_name);
      value = argv[++i];
    }
    check(spec->repeatable || !has(name), "tessera {}: --{} given twice", command_, name);
    values_[name].push_back(value);
  }
}

std::optional<std::string> Flags::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Flags::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Flags::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

int64_t Flags::get_int(const std::string& name, int64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  check(ec == std::errc() && end == v->data() + v->size(), "--{} expects an integer, got '{}'",
        name, *v);
  return out;
}

double Flags::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  size_t used = 0;
  double out = 0;
  try {
    out = std::stod(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == v->size() && !v->empty(), "--{} expects a number, got '{}'", name, *v);
  return out;
}

std::string Flags::help(const std::string& summary) const {
  std::string out = fmt::format("usage: tessera {} [flags]{}\n\n{}\n\nflags:\n", command_,
                                operands_name_.empty() ? "" : " " + operands_name_, summary);
  for (const FlagSpec& s : specs_) {
    std::string left = "--" + s.name + (s.value_name.empty() ? "" : " " + s.value_name);
    out += fmt::format("  {:<28} {}\n", left, s.help);
  }
  return out;
}

}  // namespace tessera::cli
