#include "tessera/tokenizer/hf_tokenizer_file.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"
#include "tessera/core/text_corpus.h"
#include "tessera/core/utf8.h"
#include "tessera/tokenizer/gpt2_pretokenizer.h"
#include "tessera/tokenizer/gpt2_vocab_files.h"
#include "tessera/tokenizer/llama3_pretokenizer.h"

namespace tessera::tokenizer {
namespace {

using json = nlohmann::json;

std::string shown(const json& j) {
  return printable(j.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 120));
}

// `prefix + key` in `object` must be absent, null or one of `allowed`.
void check_setting(const json& object, const std::string& prefix, const char* key,
                   const std::vector<json>& allowed, const std::string& source) {
  if (!object.contains(key) || object[key].is_null()) return;
  for (const json& a : allowed) {
    if (object[key] == a) return;
  }
  fail("{}: {}{} = {} is not supported (byte-level BPE as GPT-2 and Llama 3 write it)", source,
       prefix, key, shown(object[key]));
}

// Whether `object` is an object whose `key` equals `expected`, or lacks it when `absent_is` holds.
bool has(const json& object, const char* key, const json& expected, bool absent_is = false) {
  if (!object.is_object() || !object.contains(key)) return absent_is;
  return object[key] == expected;
}

bool is_byte_level(const json& p, bool use_regex) {
  return has(p, "type", "ByteLevel") && has(p, "add_prefix_space", false, true) &&
         has(p, "use_regex", use_regex, use_regex);
}

SplitPattern split_pattern(const json& root, const std::string& source) {
  check(root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null(),
        "{}: no pre_tokenizer (byte-level BPE needs GPT-2's ByteLevel or Llama 3's split)", source);
  const json& p = root["pre_tokenizer"];
  if (is_byte_level(p, true)) return SplitPattern::kGpt2;
  if (has(p, "type", "Sequence") && p.contains("pretokenizers") && p["pretokenizers"].is_array() &&
      p["pretokenizers"].size() == 2) {
    const json& split = p["pretokenizers"][0];
    if (has(split, "type", "Split") && has(split, "behavior", "Isolated") &&
        has(split, "invert", false, true) && split.contains("pattern") &&
        split["pattern"].is_object() && split["pattern"].contains("Regex") &&
        is_byte_level(p["pretokenizers"][1], false)) {
      const json& regex = split["pattern"]["Regex"];
      if (regex == kLlama3Pattern) return SplitPattern::kLlama3;
      if (regex == kGpt2Pattern) return SplitPattern::kGpt2;
      fail(
          "{}: pre_tokenizer splits on {}, which this build does not implement (it knows "
          "GPT-2's and Llama 3's patterns)",
          source, shown(regex));
    }
  }
  fail(
      "{}: pre_tokenizer {} is not supported (GPT-2's ByteLevel, or Llama 3's Split then "
      "ByteLevel)",
      source, shown(p));
}

}  // namespace

BpeVocab parse_hf_tokenizer(std::string_view text, const std::string& source) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    fail("{}: not valid JSON ({})", source, printable(e.what()));
  }
  check(root.is_object(), "{}: expected a JSON object, got {}", source, root.type_name());
  check(!has(root, "format", "tessera-bpe"),
        "{}: Tessera's own tokenizer.json needs ranks.tiktoken beside it", source);
  check(root.contains("model") && root["model"].is_object(),
        "{}: no \"model\" object: not a Hugging Face tokenizer.json", source);
  const json& model = root["model"];
  if (!has(model, "type", "BPE", true)) {
    fail("{}: model.type = {} is not supported (byte-level BPE only)", source,
         shown(model["type"]));
  }
  check_setting(root, "", "normalizer", {}, source);
  check_setting(model, "model.", "dropout", {}, source);
  check_setting(model, "model.", "continuing_subword_prefix", {""}, source);
  check_setting(model, "model.", "end_of_word_suffix", {""}, source);
  check_setting(model, "model.", "byte_fallback", {false}, source);

  std::set<std::string> special;
  std::vector<std::pair<std::string, int32_t>> added;
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    check(root["added_tokens"].is_array(), "{}: added_tokens must be an array", source);
    for (const json& t : root["added_tokens"]) {
      check(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                t["id"].get<int64_t>() >= 0 && t["id"].get<int64_t>() <= kMaxTokenId &&
                t.contains("content") && t["content"].is_string(),
            "{}: added token {} needs an integer id in [0, {}] and a string content", source,
            shown(t), kMaxTokenId);
      special.insert(t["content"].get<std::string>());
      added.emplace_back(t["content"].get<std::string>(), t["id"].get<int32_t>());
    }
  }
  check(model.contains("vocab"), "{}: model has no vocab", source);
  Gpt2VocabBuilder builder(model["vocab"], source + " (model.vocab)", special);
  check(model.contains("merges") && model["merges"].is_array(), "{}: model.merges must be an array",
        source);
  const json& merges = model["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string where = fmt::format("{}: model.merges[{}]", source, i);
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      check(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                line.find(' ', space + 1) == std::string::npos,
            "{}: expected two tokens separated by one space, got {}", where, shown(m));
      builder.add_merge(std::string_view(line).substr(0, space),
                        std::string_view(line).substr(space + 1), where);
    } else {
      check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
            "{}: expected \"left right\" or [left, right], got {}", where, shown(m));
      builder.add_merge(m[0].get<std::string>(), m[1].get<std::string>(), where);
    }
  }
  BpeVocab vocab = builder.take();
  // Special tokens listed in the vocabulary too (GPT-2's <|endoftext|>) must keep their id.
  for (const auto& [content, id] : vocab.special_tokens) {
    for (const auto& [added_content, added_id] : added) {
      check(content != added_content || id == added_id,
            "{}: {} has id {} in model.vocab but {} in added_tokens", source, printable(content),
            id, added_id);
    }
  }
  vocab.special_tokens = std::move(added);
  vocab.pattern = split_pattern(root, source);
  return vocab;
}

std::string format_hf_tokenizer(const BpeVocab& vocab) {
  json tokens = json::object(), merges = json::array(), added = json::array();
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (!vocab.tokens[id].empty()) tokens[map_gpt2_bytes(vocab.tokens[id])] = id;
  }
  for (const BpeMerge& m : vocab.merges) {
    merges.push_back({map_gpt2_bytes(vocab.tokens[m.left]), map_gpt2_bytes(vocab.tokens[m.right])});
  }
  for (const auto& [content, id] : vocab.special_tokens) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", vocab.pattern == SplitPattern::kGpt2}};
  const json pre_tokenizer = vocab.pattern == SplitPattern::kGpt2
                                 ? byte_level
                                 : json{{"type", "Sequence"},
                                        {"pretokenizers",
                                         {{{"type", "Split"},
                                           {"pattern", {{"Regex", kLlama3Pattern}}},
                                           {"behavior", "Isolated"},
                                           {"invert", false}},
                                          byte_level}}};
  // ignore_merges: a piece that is a token as a whole is that token, as this encoder does it.
  const json tokenizer = {{"version", "1.0"},
                          {"truncation", nullptr},
                          {"padding", nullptr},
                          {"added_tokens", added},
                          {"normalizer", nullptr},
                          {"pre_tokenizer", pre_tokenizer},
                          {"post_processor", byte_level},
                          {"decoder", byte_level},
                          {"model",
                           {{"type", "BPE"},
                            {"dropout", nullptr},
                            {"unk_token", nullptr},
                            {"continuing_subword_prefix", nullptr},
                            {"end_of_word_suffix", nullptr},
                            {"fuse_unk", false},
                            {"byte_fallback", false},
                            {"ignore_merges", true},
                            {"vocab", tokens},
                            {"merges", merges}}}};
  return tokenizer.dump(1) + "\n";
}

void write_hf_tokenizer_files(const BpeVocab& vocab, int64_t max_seq,
                              const std::filesystem::path& dir) {
  json tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                           {"model_max_length", max_seq},
                           {"clean_up_tokenization_spaces", false}};
  json generation_config = {{"_from_model_config", true}};
  const DocumentTokens bounds = document_tokens(vocab);
  if (bounds.bos) {
    tokenizer_config["bos_token"] = bounds.bos->text;
    generation_config["bos_token_id"] = bounds.bos->id;
  }
  if (bounds.eos) {
    tokenizer_config["eos_token"] = bounds.eos->text;
    generation_config["eos_token_id"] = bounds.eos->id;
  }
  write_text_file(dir / kHfTokenizerFile, format_hf_tokenizer(vocab));
  write_text_file(dir / kHfTokenizerConfigFile, tokenizer_config.dump(2) + "\n");
  write_text_file(dir / "generation_config.json", generation_config.dump(2) + "\n");
}

}  // namespace tessera::tokenizer
