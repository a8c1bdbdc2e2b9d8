#include <cstdio>

#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/data/prepare.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

struct PrepareFlags {
  std::string tokenizer = "byte";
  data::PrepareOptions options;
};

Settings<PrepareFlags> prepare_flags() {
  using O = data::PrepareOptions;
  return join<PrepareFlags>({
      {flag("--tokenizer", "DIR", &PrepareFlags::tokenizer, "\"byte\" or a tokenizer folder")},
      nest(&PrepareFlags::options,
           Settings<O>{
               required(flag("--out", "DIR", &O::out_dir,
                             "dataset folder to create; must be missing or empty")),
               flag("--val-fraction", "F", &O::val_fraction, "fraction of the text held out",
                    Range{0, 1, true, true}),
               flag("--shard-tokens", "N", &O::shard_tokens, "most tokens per shard file",
                    at_least(1)),
               flag("--threads", "N", &O::threads, "tokenising threads; 0 uses all cores",
                    at_least(0)),
           }),
  });
}

}  // namespace

int prepare_command(int argc, char** argv) {
  PrepareFlags flags;
  Command command("prepare",
                  "Tokenise text files (or folders of them) into train and val token\n"
                  "shards plus dataset.json, ready for `tessera train --data DIR`.",
                  "FILE...");
  if (!command.flags(prepare_flags(), flags).parse(argc, argv)) return 0;
  check(!command.operands().empty(), "tessera prepare: give at least one input FILE or folder");
  flags.options.inputs.assign(command.operands().begin(), command.operands().end());
  data::prepare_dataset(*tokenizer::load_tokenizer(flags.tokenizer), flags.tokenizer,
                        flags.options);
  return 0;
}

}  // namespace tessera::cli
