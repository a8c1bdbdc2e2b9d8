// The CLI layer: parses flags and calls the applications; it holds no logic of its own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessera::cli {

struct FlagSpec {
  std::string name;        // without the leading dashes
  std::string value_name;  // empty for a switch
  std::string help;
  bool repeatable = false;
};

// Parsed flags of one subcommand. Unknown flags, missing values and repeats of a
// non-repeatable flag are errors that name the flag and the command. A command that takes
// operands (arguments that are not flags) names them in `operands_name`, e.g. "FILE...".
// Every command takes --help (or -h), which Flags adds to its specs.
class Flags {
 public:
  Flags(std::string command, std::vector<FlagSpec> specs, int argc, char** argv,
        std::string operands_name = "");

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  std::string help(const std::string& summary) const;
  const std::vector<std::string>& operands() const { return operands_; }

 private:
  std::string command_;
  std::vector<FlagSpec> specs_;
  std::string operands_name_;
  std::vector<std::string> operands_;
  std::map<std::string, std::vector<std::string>> values_;
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
