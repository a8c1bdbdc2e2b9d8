#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "tessera/grammar/json_matcher.h"
#include "tessera/grammar/json_schema.h"
#include "tessera/grammar/token_masks.h"

namespace tessera::grammar {
namespace {

using ojson = nlohmann::ordered_json;

JsonGrammar schema(const char* text) { return compile_json_schema(ojson::parse(text)); }

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 8},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "ab", "b"]}, "maxItems": 3},
    "score": {"type": ["number", "null"]},
    "nick": {"type": "string"},
    "home": {"type": "object", "properties": {"city": {"const": "Oslo"}}, "required": ["city"]}
  },
  "required": ["name", "age", "tags", "score", "home"],
  "additionalProperties": false
})";

TEST(JsonGrammar, AcceptsWhatTheSchemaAllowsInSchemaOrder) {
  const JsonGrammar g = schema(kPerson);
  for (
      const char* ok : {
          R"({"name":"Ann","age":41,"tags":["ab","a"],"score":-1.5e+3,"home":{"city":"Oslo"}})",
          R"({"name":"","age":0,"tags":[],"score":null,"nick":"x\"y\u00e9","home":{"city":"Oslo"}})",
          R"({"name":"Åse ☃","age":-7,"tags":["b"],"score":0.25,"home":{"city":"Oslo"}})",
      }) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* refused : {
           R"({"age":41,"name":"Ann","tags":[],"score":1,"home":{"city":"Oslo"}})",   // order
           R"({"name":"Ann","age":41,"tags":[],"score":1})",                          // required
           R"({"name":"Ann","age":4.5,"tags":[],"score":1,"home":{"city":"Oslo"}})",  // integer
           R"({"name":"123456789","age":1,"tags":[],"score":1,"home":{"city":"Oslo"}})",  // length
           R"({"name":"A","age":1,"tags":["c"],"score":1,"home":{"city":"Oslo"}})",       // enum
           R"({"name":"A","age":1,"tags":["a","a","a","a"],"score":1,"home":{"city":"Oslo"}})",
           R"({"name":"A","age":01,"tags":[],"score":1,"home":{"city":"Oslo"}})",   // leading 0
           R"({"name":"A","age":1,"tags":[],"score":1,"home":{"city":"Bergen"}})",  // const
           R"({"name":"A","age":1,"tags":[],"score":1,"home":{"city":"Oslo"}} )",   // trailing
           R"({"name": "A","age":1,"tags":[],"score":1,"home":{"city":"Oslo"}})",   // whitespace
           "{\"name\":\"\xC0\xAF\",\"age\":1,\"tags\":[],\"score\":1,\"home\":{\"city\":\"Oslo\"}}",
       }) {
    EXPECT_FALSE(matches(g, refused)) << refused;
  }
}

TEST(JsonGrammar, RefsRecursionAndAnyObject) {
  const JsonGrammar tree = schema(R"({
    "$ref": "#/$defs/node",
    "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v", "kids"]}}
  })");
  EXPECT_TRUE(
      matches(tree, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(matches(tree, R"({"v":1,"kids":[{"v":2}]})"));
  const JsonGrammar any = any_json_object();
  EXPECT_TRUE(matches(any, R"({"a":[1,{"b":null},"x",true,-0.5E7],"":{}})"));
  EXPECT_FALSE(matches(any, R"([1])"));
  EXPECT_FALSE(matches(any, R"({"a":tru})"));
  std::string deep = "{\"a\":";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_FALSE(matches(any, deep + "1"));  // deeper than JsonMatcher::kMaxDepth
}

TEST(JsonGrammar, KeywordsItCannotFollowAreErrorsNamingThem) {
  for (const auto& [text, named] : std::vector<std::pair<const char*, const char*>>{
           {R"({"type":"object","properties":{"a":{"type":"string","pattern":"x+"}}})", "pattern"},
           {R"({"type":"object","properties":{"a":{"type":"integer","minimum":3}}})", "minimum"},
           {R"({"type":"object","properties":{"a":{"type":"string","format":"email"}}})", "format"},
           {R"({"type":"array","items":{}})", "root must be an object"},
           {R"({"type":"object","properties":{"a":{"$ref":"#/$defs/b"}}})", "names nothing"},
           {R"({"type":"object","properties":{},"required":["a"]})", "'required' names \"a\""},
           {R"({"type":"object","properties":{"a":{"type":"strin"}}})", "unknown type 'strin'"},
       }) {
    try {
      schema(text);
      ADD_FAILURE() << text;
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  }
}

// A vocabulary of single bytes, common words and tokens that cross a string's end.
std::vector<std::string> test_vocabulary() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* t : {"\"name\"", "\":", "\",\"", "Ann", "ab", "{\"", "\"}", "12", "null", "tr",
                        "ue", "\xC3", "\xA5", "\xC3\xA5se", "  ", "\",", "\"\"", "Oslo"}) {
    v.push_back(t);
  }
  v.push_back("");  // a special token: never allowed
  return v;
}

// The mask allows exactly the tokens the matcher takes from that state, byte by byte, in and out
// of strings, along the way through a valid reply.
TEST(TokenGrammar, MasksAreExactlyTheTokensTheMatcherTakes) {
  auto vocab = std::make_shared<Vocabulary>(test_vocabulary());
  TokenGrammar tokens(schema(kPerson), vocab);
  const JsonGrammar reference = schema(kPerson);
  JsonMatcher matcher(reference);
  const std::string reply =
      R"({"name":"Åse","age":12,"tags":["ab"],"score":null,"home":{"city":"Oslo"}})";
  MatchState state;
  tokens.start(state);
  for (size_t i = 0; i < reply.size(); ++i) {
    const TokenMask& mask = tokens.allowed(state);
    for (int32_t id = 0; id < int32_t(vocab->size()); ++id) {
      MatchState probe = state;
      const bool takes = !vocab->bytes(id).empty() && matcher.advance(probe, vocab->bytes(id));
      ASSERT_EQ(allows(mask, id), takes)
          << "after " << reply.substr(0, i) << ", token " << id << " '" << vocab->bytes(id) << "'";
    }
    ASSERT_TRUE(tokens.advance(state, int32_t(uint8_t(reply[i])))) << reply.substr(0, i + 1);
  }
  EXPECT_TRUE(state.complete());
  // The same states again: every mask comes from the cache.
  const int64_t computed = tokens.masks_computed();
  tokens.start(state);
  for (const char c : reply) {
    tokens.allowed(state);
    tokens.advance(state, int32_t(uint8_t(c)));
  }
  EXPECT_EQ(tokens.masks_computed(), computed);
}

// Random walks through the masks always end in text the schema accepts.
TEST(TokenGrammar, RandomTokensFromTheMasksAlwaysMakeValidJson) {
  auto vocab = std::make_shared<Vocabulary>(test_vocabulary());
  const char* bounded = R"({"type":"object","properties":{
      "s": {"type": "string", "maxLength": 5},
      "n": {"type": "number"},
      "l": {"type": "array", "items": {"type": ["boolean", "integer"]}, "maxItems": 4}},
      "required": ["s", "n", "l"]})";
  TokenGrammar tokens(schema(bounded), vocab);
  const JsonGrammar reference = schema(bounded);
  std::mt19937 rng(7);
  for (int run = 0; run < 200; ++run) {
    MatchState state;
    tokens.start(state);
    std::string text;
    while (!state.complete()) {
      const TokenMask& mask = tokens.allowed(state);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < int32_t(vocab->size()); ++id) {
        if (allows(mask, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << text;
      const int32_t id = allowed[rng() % allowed.size()];
      ASSERT_TRUE(tokens.advance(state, id));
      text += vocab->bytes(id);
      ASSERT_LT(text.size(), 400u) << text;
    }
    EXPECT_TRUE(matches(reference, text)) << text;
    EXPECT_NO_THROW(nlohmann::json::parse(text)) << text;
  }
}

}  // namespace
}  // namespace tessera::grammar

namespace tessera::grammar {
namespace {

// A schema that keeps 256 readings open inside a string, over a 50,000-token vocabulary: its
// mask's walk stops at the grammar's step bound (TokenGrammar::kMaxWalkSteps in the server,
// 50,000 here to keep the test short), so the engine stalls for a bounded time, and every token
// it allows is still one the matcher takes.
TEST(TokenGrammar, AHostileSchemaGetsABoundedWalk) {
  std::vector<std::string> tokens;
  std::mt19937 rng(5);
  for (int i = 0; i < 50000; ++i) {
    std::string t;
    for (size_t n = 1 + rng() % 6; t.size() < n;) t += char('a' + rng() % 26);
    tokens.push_back(t);
  }
  auto vocab = std::make_shared<Vocabulary>(tokens);
  ojson alternatives = ojson::array();
  for (int i = 1; i <= 300; ++i) {
    alternatives.push_back({{"type", "object"},
                            {"properties", {{"k", {{"type", "string"}, {"maxLength", i}}}}},
                            {"required", {"k"}}});
  }
  TokenGrammar grammar(compile_json_schema({{"anyOf", alternatives}}), vocab, 50000);
  const JsonGrammar reference = compile_json_schema({{"anyOf", alternatives}});
  JsonMatcher matcher(reference);
  MatchState state;
  grammar.start(state);
  for (const char c : std::string("{\"k\":\""))
    ASSERT_TRUE(matcher.advance(state, std::string(1, c)));
  ASSERT_EQ(state.size(), JsonMatcher::kMaxStacks);
  const auto start = std::chrono::steady_clock::now();
  const TokenMask& mask = grammar.allowed(state);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t allowed = 0;
  for (int32_t id = 0; id < int32_t(vocab->size()); ++id) {
    if (!allows(mask, id)) continue;
    if (++allowed % 64 != 1) continue;  // a sample: each check follows 256 readings
    MatchState probe = state;
    EXPECT_TRUE(matcher.advance(probe, vocab->bytes(id))) << vocab->bytes(id);
  }
  EXPECT_GT(allowed, 0);
  EXPECT_LT(allowed, vocab->size());  // the walk stopped before it found them all
  std::printf("%lld of %lld tokens allowed after a %.3f s walk\n", (long long)allowed,
              (long long)vocab->size(), seconds);
}

}  // namespace
}  // namespace tessera::grammar
