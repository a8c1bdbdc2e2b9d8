#include <algorithm>
#include <cstdio>
#include <string>

#include "tessera/cli/flags.h"
#include "tessera/serve/text_generator.h"

namespace tessera::cli {

int generate_command(int argc, char** argv) {
  Flags flags("generate",
              {{"checkpoint", "DIR",
                "a run directory, one checkpoint step directory or a Hugging Face model folder "
                "(required)"},
               {"prompt", "TEXT", "text to continue (required)"},
               {"allow-special", "",
                "special tokens spelled in the prompt (<|endoftext|>, ...) are those tokens"},
               {"max-tokens", "N", "tokens to generate (default 256)"},
               {"temperature", "T", "sampling temperature; 0 is greedy (default 0.8)"},
               {"top-k", "K", "sample among the K most likely tokens; 0 is off (default 0)"},
               {"top-p", "P", "nucleus sampling mass in (0, 1] (default 0.95)"},
               {"min-p", "P",
                "drop tokens less than P times as likely as the most likely one; 0 is off "
                "(default 0)"},
               {"repetition-penalty", "R",
                "divide the logits of tokens already in the text by R (multiply negative "
                "ones); 1 is off (default 1)"},
               {"seed", "S", "sampling seed (default 0)"},
               {"precision", "P", "f32 or bf16 matmuls (default f32)"},
               {"quantize", "Q", "none or int8: int8 weight-only matmuls (default none)"},
               {"device", "D", "cpu or cuda: where the model runs (default cpu)"}},
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
  params.min_p = flags.get_double("min-p", 0.0);
  params.repetition_penalty = flags.get_double("repetition-penalty", 1.0);
  params.seed = uint64_t(flags.get_int("seed", 0));
  try {
    serve::validate(params);
  } catch (const serve::SamplerParamError& e) {
    std::string flag = e.param();
    std::replace(flag.begin(), flag.end(), '_', '-');
    fail("tessera generate: --{}: {}", flag, e.what());
  }
  const int64_t max_tokens = flags.get_int("max-tokens", 256);
  serve::TextGenerator generator(
      *checkpoint,
      serve::serving_format(flags.get_or("precision", "f32"), flags.get_or("quantize", "none"),
                            flags.get_or("device", "cpu")));
  std::fputs(prompt->c_str(), stdout);
  generator.generate(*prompt, flags.has("allow-special"), max_tokens, params,
                     [](std::string_view text) {
                       std::fwrite(text.data(), 1, text.size(), stdout);
                       std::fflush(stdout);
                     });
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace tessera::cli
