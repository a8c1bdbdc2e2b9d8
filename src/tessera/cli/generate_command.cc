#include <cstdio>

#include "tessera/cli/flags.h"
#include "tessera/serve/text_generator.h"

namespace tessera::cli {

int generate_command(int argc, char** argv) {
  Flags flags("generate",
              {{"checkpoint", "DIR", "a run directory or one checkpoint step directory (required)"},
               {"prompt", "TEXT", "text to continue (required)"},
               {"max-tokens", "N", "tokens to generate (default 256)"},
               {"temperature", "T", "sampling temperature; 0 is greedy (default 0.8)"},
               {"top-k", "K", "sample among the K most likely tokens; 0 is off (default 0)"},
               {"top-p", "P", "nucleus sampling mass in (0, 1] (default 0.95)"},
               {"seed", "S", "sampling seed (default 0)"},
               {"help", "", "show this help"}},
              argc, argv);
  if (flags.has("help")) {
    std::fputs(
        flags.help("Continue a prompt with a trained model, streaming text to stdout.").c_str(),
        stdout);
    return 0;
  }
  auto checkpoint = flags.get("checkpoint");
  auto prompt = flags.get("prompt");
  check(checkpoint.has_value(), "tessera generate: --checkpoint DIR is required");
  check(prompt.has_value(), "tessera generate: --prompt TEXT is required");
  serve::SamplerParams params;
  params.temperature = flags.get_double("temperature", 0.8);
  params.top_k = flags.get_int("top-k", 0);
  params.top_p = flags.get_double("top-p", 0.95);
  params.seed = uint64_t(flags.get_int("seed", 0));
  serve::validate(params);
  const int64_t max_tokens = flags.get_int("max-tokens", 256);
  serve::TextGenerator generator(*checkpoint);
  std::fputs(prompt->c_str(), stdout);
  generator.generate(*prompt, max_tokens, params, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace tessera::cli
