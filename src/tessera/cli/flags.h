// The CLI layer: parses flags and calls the applications; it holds no logic of its own.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/settings.h"

namespace tessera::cli {

// One command's flags, each a row over the struct it fills (core/settings.h). Parsing (CLI11),
// --help with every default read from the struct, required flags, ranges and the one-line errors
// naming a flag all come from the rows.
class Command {
 public:
  // `operands` names the arguments that are not flags ("FILE..."); empty: the command takes none.
  Command(std::string name, std::string summary, std::string operands = "");

  // Declares `rows`, which fill `target`; its values when parse() is called are the defaults
  // --help shows, and it must outlive parse().
  template <typename S>
  Command& flags(const Settings<S>& rows, S& target) {
    for (const Setting<S>& row : rows) {
      flags_.push_back({row, [&target, set = row.set](const ConfigValue& v) { set(target, v); },
                        [&target, get = row.get] { return get(target); }});
    }
    return *this;
  }

  // Parses the arguments after the command's name. Returns false when -h or --help asked for the
  // help, which it has printed. Throws Error naming a flag that is unknown, repeated, missing,
  // malformed or out of its range.
  bool parse(int argc, char** argv);
  bool given(std::string_view flag) const { return given_.contains(flag); }  // "--dry-run"
  const std::vector<std::string>& operands() const { return operands_; }

 private:
  struct Flag {
    SettingInfo info;
    std::function<void(const ConfigValue&)> set;
    std::function<std::optional<ConfigValue>()> get;
  };
  std::string description(const Flag& flag) const;
  void fill(const Flag& flag, const std::vector<std::string>& values);

  std::string name_, summary_, operands_name_;
  std::vector<Flag> flags_;
  std::set<std::string, std::less<>> given_;
  std::vector<std::string> operands_;
};

int prepare_command(int argc, char** argv);
int train_command(int argc, char** argv);
int generate_command(int argc, char** argv);
int serve_command(int argc, char** argv);
int tokenizer_command(int argc, char** argv);
int convert_command(int argc, char** argv);
int plan_command(int argc, char** argv);
int supervise_command(int argc, char** argv);
int report_command(int argc, char** argv);
// Prints the version, the CPU features the build uses beside this CPU's, and the backends.
int version_command();

}  // namespace tessera::cli
