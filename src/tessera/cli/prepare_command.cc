#include <cstdio>
#include <filesystem>
#include <optional>

#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/core/json_file.h"
#include "tessera/core/text_corpus.h"
#include "tessera/data/prepare.h"
#include "tessera/jinja/chat_template.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

struct PrepareFlags {
  std::string tokenizer = "byte";
  bool chat = false;
  std::string chat_template;
  data::ChatLoss chat_loss = data::ChatLoss::kAssistant;
  data::PrepareOptions options;
};

Settings<PrepareFlags> prepare_flags() {
  using O = data::PrepareOptions;
  return join<PrepareFlags>({
      {flag("--tokenizer", "DIR", &PrepareFlags::tokenizer, "\"byte\" or a tokenizer folder"),
       flag("--chat", "", &PrepareFlags::chat,
            "the inputs are JSONL chat examples (\"messages\", or \"prompt\" and "
            "\"completion\"), rendered through the chat template and trained on as --chat-loss "
            "says"),
       flag("--chat-template", "FILE", &PrepareFlags::chat_template,
            "--chat: a Jinja chat template instead of the tokenizer folder's own "
            "(tokenizer_config.json's chat_template)"),
       flag("--chat-loss", "", &PrepareFlags::chat_loss,
            "--chat: the tokens trained on, the assistant's turns or all of them")},
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
                  "Tokenise text files (or folders of them), or JSONL chat examples with\n"
                  "--chat, into train and val token shards plus dataset.json, ready for\n"
                  "`tessera train --data DIR`.",
                  "FILE...");
  if (!command.flags(prepare_flags(), flags).parse(argc, argv)) return 0;
  check(!command.operands().empty(), "tessera prepare: give at least one input FILE or folder");
  flags.options.inputs.assign(command.operands().begin(), command.operands().end());
  const auto tokenizer = tokenizer::load_tokenizer(flags.tokenizer);
  if (!flags.chat) {
    check(flags.chat_template.empty() && !command.given("--chat-loss"),
          "tessera prepare: --chat-template and --chat-loss are for chat data (--chat)");
    data::prepare_dataset(*tokenizer, flags.tokenizer, flags.options);
    return 0;
  }
  const std::filesystem::path config_file =
      std::filesystem::path(flags.tokenizer) / tokenizer::kHfTokenizerConfigFile;
  const std::optional<nlohmann::json> config = flags.tokenizer != "byte" && is_file(config_file)
                                                   ? std::optional(read_json_file(config_file))
                                                   : std::nullopt;
  const std::optional<jinja::ChatTemplate> chat_template =
      jinja::load_chat_template(config, config_file, flags.chat_template);
  check(chat_template.has_value(),
        "tessera prepare --chat: the tokenizer {} has no chat template; give one with "
        "--chat-template FILE",
        flags.tokenizer);
  data::prepare_chat_dataset(*tokenizer, flags.tokenizer, *chat_template, flags.chat_loss,
                             flags.options);
  return 0;
}

}  // namespace tessera::cli
