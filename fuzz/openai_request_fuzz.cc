// Request bodies are outside input: any bytes, as either endpoint's body, must parse into a
// generation request or fail with an ApiError (a 4xx for the client), never anything else.
#include <cstdint>
#include <string>

#include "tessera/serve/openai_api.h"
#include "tessera/tokenizer/byte_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessera::tokenizer::ByteTokenizer tokenizer;
  const tessera::serve::ApiLimits limits{"tiny", 64, 48};
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (auto endpoint :
       {tessera::serve::Endpoint::kCompletions, tessera::serve::Endpoint::kChatCompletions}) {
    try {
      tessera::serve::to_generation(tessera::serve::parse_request(endpoint, body, limits),
                                    tokenizer, limits);
    } catch (const tessera::serve::ApiError&) {
    }
  }
  return 0;
}
