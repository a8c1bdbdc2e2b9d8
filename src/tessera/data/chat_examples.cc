#include "tessera/data/chat_examples.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/json_nesting.h"

namespace tessera::data {
namespace {

using Json = nlohmann::ordered_json;

// A piece of an example's text and whether the loss counts its tokens.
struct Piece {
  std::string text;
  bool trained;
};

constexpr std::string_view kRoles[] = {"system", "developer", "user", "assistant", "tool"};

void check_messages(const Json& messages, const char* field) {
  check(messages.is_array() && !messages.empty(), "\"{}\" must be a non-empty list of messages",
        field);
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    check(m.is_object(), "{}[{}] is not an object", field, i);
    const auto role = m.find("role");
    check(role != m.end() && role->is_string() &&
              std::ranges::find(kRoles, role->get_ref<const std::string&>()) != std::end(kRoles),
          "{}[{}]: \"role\" must be system, developer, user, assistant or tool", field, i);
    const auto content = m.find("content");
    check(content != m.end() &&
              (content->is_string() || (content->is_null() && m.contains("tool_calls"))),
          "{}[{}]: \"content\" must be text (or null beside \"tool_calls\")", field, i);
  }
}

std::string render(const jinja::ChatTemplate& chat_template, const Json& messages, size_t count,
                   bool add_generation_prompt, const Json& extra) {
  Json head = Json::array();
  for (size_t i = 0; i < count; ++i) head.push_back(messages[i]);
  return chat_template.render(head, add_generation_prompt, extra);
}

// The rendered conversation cut around the assistant turns from messages[first_trained] on: the
// text a turn adds to the prompt that opens it is trained on, the rest is not.
std::vector<Piece> render_turns(const jinja::ChatTemplate& chat_template, const Json& messages,
                                size_t first_trained, const Json& extra) {
  const std::string whole = render(chat_template, messages, messages.size(), false, extra);
  std::vector<Piece> pieces;
  size_t done = 0;
  for (size_t i = first_trained; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const std::string opening = render(chat_template, messages, i, true, extra);
    const std::string through = render(chat_template, messages, i + 1, false, extra);
    check(opening.size() >= done && through.starts_with(opening) && whole.starts_with(through),
          "the chat template does not render the assistant turn messages[{}] as a continuation "
          "of the turns before it, so its tokens cannot be told from the prompt's",
          i);
    pieces.push_back({whole.substr(done, opening.size() - done), false});
    pieces.push_back({whole.substr(opening.size(), through.size() - opening.size()), true});
    done = through.size();
  }
  check(!pieces.empty(), "the conversation has no assistant turn to train on");
  pieces.push_back({whole.substr(done), false});
  return pieces;
}

// The pieces of a parsed line, before any loss choice other than the assistant's turns.
std::vector<Piece> example_pieces(const Json& line, const jinja::ChatTemplate& chat_template) {
  Json extra = Json::object();
  if (const auto tools = line.find("tools"); tools != line.end()) {
    check(tools->is_array(), "\"tools\" must be a list");
    extra["tools"] = *tools;
  }
  if (const auto messages = line.find("messages"); messages != line.end()) {
    check_messages(*messages, "messages");
    return render_turns(chat_template, *messages, 0, extra);
  }
  const auto prompt = line.find("prompt"), completion = line.find("completion");
  check(prompt != line.end() && completion != line.end(),
        "the line has neither \"messages\" nor both \"prompt\" and \"completion\"");
  if (prompt->is_string() && completion->is_string()) {
    check(!completion->get_ref<const std::string&>().empty(), "\"completion\" is empty");
    return {{prompt->get<std::string>(), false}, {completion->get<std::string>(), true}};
  }
  check(prompt->is_array() && completion->is_array(),
        "\"prompt\" and \"completion\" must both be text or both be lists of messages");
  check_messages(*prompt, "prompt");
  check_messages(*completion, "completion");
  Json messages = *prompt;
  for (const Json& m : *completion) messages.push_back(m);
  return render_turns(chat_template, messages, prompt->size(), extra);
}

}  // namespace

ChatExample encode_chat_example(std::string_view line, const jinja::ChatTemplate& chat_template,
                                const tokenizer::Tokenizer& tokenizer, ChatLoss loss) {
  check(json_nesting_depth(line, kMaxChatLineDepth) <= kMaxChatLineDepth,
        "the line nests deeper than {} levels", kMaxChatLineDepth);
  Json parsed;
  try {
    parsed = Json::parse(line);
  } catch (const Json::exception& e) {
    fail("the line is not JSON ({})", e.what());
  }
  check(parsed.is_object(), "the line is not a JSON object");
  ChatExample example;
  for (const Piece& piece : example_pieces(parsed, chat_template)) {
    const std::vector<int32_t> ids = tokenizer.encode_allowing_special(piece.text);
    example.tokens.insert(example.tokens.end(), ids.begin(), ids.end());
    example.trained.insert(example.trained.end(), ids.size(),
                           piece.trained || loss == ChatLoss::kAll ? 1 : 0);
    example.bytes += int64_t(piece.text.size());
  }
  check(std::ranges::find(example.trained, uint8_t{1}) != example.trained.end(),
        "the text to train on encodes to no tokens");
  return example;
}

}  // namespace tessera::data
