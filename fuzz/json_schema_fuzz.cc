// JSON schemas arrive in requests: any bytes before a NUL, taken as a schema, must compile or
// fail with a SchemaError, and the bytes after it, followed through the compiled grammar and
// through its token masks over a small vocabulary, must never crash or disagree.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/grammar/json_matcher.h"
#include "tessera/grammar/json_schema.h"
#include "tessera/grammar/token_masks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::grammar;
  static const auto vocabulary = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    for (const char* t : {"{\"", "\":", "\",\"", "\"}", "12", "true", "null", "ab", "\xC3\xA5"}) {
      tokens.push_back(t);
    }
    return std::make_shared<const Vocabulary>(tokens);
  }();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(input.substr(0, split), nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  JsonGrammar grammar;
  try {
    grammar = compile_json_schema(schema);
  } catch (const SchemaError&) {
    return 0;
  }
  const std::string text = split == std::string::npos ? "" : input.substr(split + 1);
  TokenGrammar tokens(grammar, vocabulary);
  MatchState state;
  tokens.start(state);
  for (const char c : text) {
    if (state.complete()) break;
    const TokenMask& mask = tokens.allowed(state);
    const bool allowed = allows(mask, uint8_t(c));
    const bool taken = tokens.advance(state, uint8_t(c));
    if (allowed != taken) __builtin_trap();  // the mask and the matcher disagree
    if (!taken) break;
  }
  return 0;
}
