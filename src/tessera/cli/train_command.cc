#include <cstdio>

#include "tessera/cli/flags.h"
#include "tessera/train/run_config.h"
#include "tessera/train/trainer.h"

namespace tessera::cli {

int train_command(int argc, char** argv) {
  Flags flags(
      "train",
      {{"config", "FILE", "TOML config (default: the built-in tiny model, configs/tiny.toml)"},
       {"data", "PATH", "a prepared dataset, or text: a file or a folder (sets data.path)"},
       {"tokenizer", "DIR", "\"byte\" or a tokenizer folder for text (sets data.tokenizer)"},
       {"out", "DIR", "output directory for config, metrics and checkpoints (default runs/train)"},
       {"set", "KEY=VALUE", "override any config key, e.g. --set train.steps=60", true},
       {"help", "", "show this help"}},
      argc, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Train a GPT-2 model on a text corpus; resumes from the newest\n"
                         "checkpoint when the output directory already holds one.")
                   .c_str(),
               stdout);
    return 0;
  }
  Config config(train::run_config_schema());
  if (auto path = flags.get("config")) config.load_file(*path);
  if (auto data = flags.get("data")) config.set_override("data.path=" + *data);
  if (auto tokenizer = flags.get("tokenizer")) config.set_override("data.tokenizer=" + *tokenizer);
  for (const std::string& assignment : flags.all("set")) config.set_override(assignment);
  train::train(config, flags.get_or("out", "runs/train"));
  return 0;
}

}  // namespace tessera::cli
