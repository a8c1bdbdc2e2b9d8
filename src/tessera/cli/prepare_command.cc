#include <cstdio>

#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/data/prepare.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::cli {

int prepare_command(int argc, char** argv) {
  Flags flags("prepare",
              {{"tokenizer", "DIR", "\"byte\" or a tokenizer folder (default byte)"},
               {"out", "DIR", "dataset folder to create; must be missing or empty (required)"},
               {"val-fraction", "F", "fraction of the text held out, in (0, 1) (default 0.1)"},
               {"shard-tokens", "N", "most tokens per shard file (default 67108864)"},
               {"threads", "N", "tokenising threads; 0 uses all cores (default 0)"}},
              argc, argv, "FILE...");
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Tokenise text files (or folders of them) into train and val token\n"
                         "shards plus dataset.json, ready for `tessera train --data DIR`.")
                   .c_str(),
               stdout);
    return 0;
  }
  auto out = flags.get("out");
  check(out.has_value(), "tessera prepare: --out DIR is required");
  check(!flags.operands().empty(), "tessera prepare: give at least one input FILE or folder");
  data::PrepareOptions options;
  options.inputs.assign(flags.operands().begin(), flags.operands().end());
  options.out_dir = *out;
  options.val_fraction = flags.get_double("val-fraction", options.val_fraction);
  options.shard_tokens = flags.get_int("shard-tokens", options.shard_tokens);
  options.threads = int(flags.get_int("threads", 0));
  check(options.threads >= 0, "--threads must be at least 0, got {}", options.threads);
  const std::string tokenizer_name = flags.get_or("tokenizer", "byte");
  data::prepare_dataset(*tokenizer::load_tokenizer(tokenizer_name), tokenizer_name, options);
  return 0;
}

}  // namespace tessera::cli
