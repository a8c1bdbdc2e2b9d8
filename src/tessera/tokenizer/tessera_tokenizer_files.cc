#include "tessera/tokenizer/tessera_tokenizer_files.h"

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/text_corpus.h"
#include "tessera/core/utf8.h"
#include "tessera/tokenizer/tiktoken_ranks.h"

namespace tessera::tokenizer {
namespace {

constexpr char kFormat[] = "tessera-bpe";
constexpr int kVersion = 1;
constexpr char kPattern[] = "gpt2";

}  // namespace

std::vector<std::pair<std::string, int32_t>> parse_tessera_config(std::string_view json,
                                                                  const std::string& source) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    fail("{}: not valid JSON ({})", source, printable(e.what()));
  }
  check(config.is_object(), "{}: expected a JSON object, got {}", source, config.type_name());
  for (const auto& [key, value] : config.items()) {
    check(key == "format" || key == "version" || key == "pattern" || key == "special_tokens",
          "{}: unknown key \"{}\" (expected format, version, pattern, special_tokens)", source,
          printable(key));
  }
  const auto field = [&](const char* key) -> const nlohmann::json& {
    check(config.contains(key), "{}: missing key \"{}\"", source, key);
    return config[key];
  };
  check(field("format") == kFormat, "{}: \"format\" must be \"{}\"", source, kFormat);
  check(field("version") == kVersion, "{}: unsupported \"version\" (this build reads {})", source,
        kVersion);
  check(field("pattern") == kPattern,
        "{}: unsupported \"pattern\" (this build knows \"{}\", GPT-2's split)", source, kPattern);
  const nlohmann::json& specials = field("special_tokens");
  check(specials.is_object(), "{}: \"special_tokens\" must be an object of text -> id", source);
  std::vector<std::pair<std::string, int32_t>> out;
  for (const auto& [text, id] : specials.items()) {
    check(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= kMaxTokenId,
          "{}: special token \"{}\" needs an id in [0, {}]", source, printable(text), kMaxTokenId);
    out.emplace_back(text, id.get<int32_t>());
  }
  return out;
}

void save_tessera_tokenizer(const BpeVocab& vocab, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "{}: cannot create the directory ({})", printable(dir.string()), ec.message());
  nlohmann::json specials = nlohmann::json::object();
  for (const auto& [text, id] : vocab.special_tokens) specials[text] = id;
  const nlohmann::json config = {{"format", kFormat},
                                 {"version", kVersion},
                                 {"pattern", kPattern},
                                 {"special_tokens", specials}};
  write_text_file(dir / kTesseraRanksFile, format_tiktoken_ranks(vocab.tokens));
  write_text_file(dir / kTesseraConfigFile, config.dump(2) + "\n");
}

}  // namespace tessera::tokenizer
