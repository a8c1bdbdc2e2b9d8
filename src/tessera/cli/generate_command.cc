#include <algorithm>
#include <cstdio>
#include <string>

#include "tessera/cli/flags.h"
#include "tessera/cli/serve_flags.h"
#include "tessera/serve/text_generator.h"

namespace tessera::cli {
namespace {

struct GenerateFlags {
  std::string checkpoint, prompt;
  bool allow_special = false;
  int64_t max_tokens = 256;
  serve::SamplerParams sampling{.temperature = 0.8, .top_p = 0.95};
  serve::ServingFormat format;
};

Settings<GenerateFlags> generate_flags() {
  using G = GenerateFlags;
  using P = serve::SamplerParams;
  return join<G>({
      {
          required(flag("--checkpoint", "PATH", &G::checkpoint,
                        "a run directory, one checkpoint step directory, a Hugging Face model "
                        "folder or a GGUF file")),
          required(flag("--prompt", "TEXT", &G::prompt, "text to continue")),
          flag("--allow-special", "", &G::allow_special,
               "special tokens spelled in the prompt (<|endoftext|>, ...) are those tokens"),
          flag("--max-tokens", "N", &G::max_tokens, "tokens to generate", at_least(1)),
      },
      nest(&G::sampling,
           Settings<P>{
               flag("--temperature", "T", &P::temperature, "sampling temperature; 0 is greedy"),
               flag("--top-k", "K", &P::top_k, "sample among the K most likely tokens; 0 is off"),
               flag("--top-p", "P", &P::top_p, "nucleus sampling mass in (0, 1]"),
               flag("--min-p", "P", &P::min_p,
                    "drop tokens less than P times as likely as the most likely one; 0 is off"),
               flag("--repetition-penalty", "R", &P::repetition_penalty,
                    "divide the logits of tokens already in the text by R (multiply negative "
                    "ones); 1 is off"),
               flag("--seed", "S", &P::seed, "sampling seed"),
           }),
      nest(&G::format, serving_format_flags()),
  });
}

}  // namespace

int generate_command(int argc, char** argv) {
  GenerateFlags flags;
  Command command("generate", "Continue a prompt with a trained model, streaming text to stdout.");
  if (!command.flags(generate_flags(), flags).parse(argc, argv)) return 0;
  try {
    serve::validate(flags.sampling);
  } catch (const serve::ParamError& e) {
    std::string flag = e.param();
    std::replace(flag.begin(), flag.end(), '_', '-');
    fail("tessera generate: --{}: {}", flag, e.what());
  }
  serve::check_serving_format(flags.format);
  const std::unique_ptr<comm::Mesh> mesh = serving_mesh(flags.format);
  serve::TextGenerator generator(flags.checkpoint, flags.format);
  if (!generator.leads()) {
    generator.follow();
    return 0;
  }
  std::fputs(flags.prompt.c_str(), stdout);
  generator.generate(flags.prompt, flags.allow_special, flags.max_tokens, flags.sampling,
                     [](std::string_view text) {
                       std::fwrite(text.data(), 1, text.size(), stdout);
                       std::fflush(stdout);
                     });
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace tessera::cli
