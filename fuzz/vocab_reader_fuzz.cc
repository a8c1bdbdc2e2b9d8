// Vocabulary files are outside input: any bytes given to the encoder.json + vocab.bpe, .tiktoken,
// Tessera's tokenizer.json or Hugging Face's tokenizer.json readers must parse or fail with a
// tessera::Error, and a vocabulary that parses must build a tokenizer (or fail the same way) whose
// decode undoes its encode. The first byte picks the reader; for GPT-2's two files a NUL byte
// separates them.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/tokenizer/bpe_tokenizer.h"
#include "tessera/tokenizer/gpt2_vocab_files.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"
#include "tessera/tokenizer/tessera_tokenizer_files.h"
#include "tessera/tokenizer/tiktoken_ranks.h"

using namespace tessera::tokenizer;

namespace {

void check_round_trip(BpeVocab vocab, std::string_view text) {
  const BpeTokenizer tokenizer(std::move(vocab), "fuzz", "fuzz");
  const std::string sample = std::string(text.substr(0, 4096)) + " Hello, world! It's 2024.";
  if (tokenizer.decode(tokenizer.encode(sample)) != sample) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: {
        const size_t split = std::min(input.find('\0'), input.size());
        const std::string_view bpe = split < input.size() ? input.substr(split + 1) : "";
        check_round_trip(parse_gpt2_vocab(input.substr(0, split), "encoder.json", bpe, "vocab.bpe"),
                         input);
        break;
      }
      case 1:
        check_round_trip(parse_tiktoken_ranks(input, "fuzz.tiktoken"), input);
        break;
      case 2:
        parse_tessera_config(input, "tokenizer.json");
        break;
      default:
        check_round_trip(parse_hf_tokenizer(input, "tokenizer.json"), input);
        break;
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
