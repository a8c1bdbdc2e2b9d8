#include "tessera/cli/flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "tessera/core/error.h"

namespace tessera::cli {
namespace {

// "usage: tessera train [flags] FILE...", the summary, then one line per flag.
class HelpFormat : public CLI::Formatter {
 public:
  explicit HelpFormat(std::string operands) : operands_(std::move(operands)) {}

  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    return make_usage(app, name) + "\n" + app->get_description() + "\n" + make_groups(app, mode);
  }

  std::string make_usage(const CLI::App*, std::string name) const override {
    return fmt::format("usage: {} [flags]{}{}\n", name, operands_.empty() ? "" : " ", operands_);
  }

 private:
  std::string operands_;
};

std::string shown(const ConfigValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return fmt::format("{:.6g}", v);
        } else {
          return fmt::format("{}", v);
        }
      },
      value);
}

}  // namespace

Command::Command(std::string name, std::string summary, std::string operands)
    : name_(std::move(name)), summary_(std::move(summary)), operands_name_(std::move(operands)) {}

// A switch or a required flag shows no default; nor does a flag whose default depends on the run
// (no value, or an empty one).
std::string Command::description(const Flag& flag) const {
  std::string text = flag.info.help;  // an enum's choices are its value name
  if (flag.info.required) return text + " (required)";
  const std::optional<ConfigValue> value = flag.get();
  if (flag.info.value_name.empty() || !value) return text;
  const std::string value_text = shown(*value);
  return value_text.empty() ? text : fmt::format("{} (default {})", text, value_text);
}

void Command::fill(const Flag& flag, const std::vector<std::string>& values) {
  const std::string& name = flag.info.name;
  given_.insert(name);
  if (flag.info.value_name.empty()) {
    flag.set(true);
    return;
  }
  check(flag.info.repeatable || values.size() == 1, "tessera {}: {} given twice", name_, name);
  for (const std::string& text : values) flag.set(parse_config_value(flag.info.type, text, name));
}

bool Command::parse(int argc, char** argv) {
  CLI::App app(summary_, "tessera " + name_);
  app.formatter(std::make_shared<HelpFormat>(operands_name_));
  app.option_defaults()->group("flags");
  app.set_help_flag("-h,--help", "show this help");
  app.allow_extras();
  std::vector<CLI::Option*> options;
  for (const Flag& flag : flags_) {
    if (flag.info.value_name.empty()) {
      options.push_back(app.add_flag(flag.info.name)->description(description(flag)));
    } else {
      options.push_back(app.add_option(flag.info.name)
                            ->description(description(flag))
                            ->option_text(flag.info.value_name)
                            ->type_name(flag.info.value_name)
                            ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll));
    }
  }
  if (!operands_name_.empty()) app.add_option("operands", operands_);
  std::vector<std::string> args(argv, argv + argc);
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::ParseError& e) {
    fail("tessera {}: {}", name_, e.what());
  }
  for (const std::string& extra : app.remaining()) {
    check(!extra.starts_with("-"), "tessera {}: unknown flag {} (see tessera {} --help)", name_,
          extra, name_);
    fail("tessera {}: unexpected argument '{}' (flags start with --; see --help)", name_, extra);
  }
  for (size_t i = 0; i < flags_.size(); ++i) {
    const SettingInfo& info = flags_[i].info;
    if (options[i]->count() > 0) {
      fill(flags_[i], options[i]->results());
    } else {
      check(!info.required, "tessera {}: {} {} is required", name_, info.name, info.value_name);
    }
    if (const std::optional<ConfigValue> value = flags_[i].get()) info.check(*value);
  }
  return true;
}

}  // namespace tessera::cli
