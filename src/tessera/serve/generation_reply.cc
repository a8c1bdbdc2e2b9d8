#include "tessera/serve/generation_reply.h"

namespace tessera::serve {

using nlohmann::json;

namespace {

std::string event(const json& payload) { return "data: " + json_text(payload) + "\n\n"; }

}  // namespace

ApiError generation_error(const RequestStream& stream) {
  if (stream.finish_reason() == FinishReason::kShutdown) {
    return ApiError(503, stream.error(), "server_error", "", "server_shutting_down")
        .with_header("Retry-After", "1");
  }
  return ApiError(500, "generation failed: " + stream.error(), "server_error");
}

GenerationReply::GenerationReply(std::shared_ptr<RequestStream> stream, ResponseBuilder builder,
                                 bool streaming, bool include_usage)
    : stream_(std::move(stream)),
      builder_(std::move(builder)),
      streaming_(streaming),
      include_usage_(include_usage) {}

std::string GenerationReply::events(const std::vector<GeneratedToken>& tokens) {
  if (tokens.empty()) return "";
  const std::optional<json> chunk = builder_.chunk(tokens);
  return chunk ? event(*chunk) : std::string();
}

std::string GenerationReply::end_events() {
  std::string text;
  const RequestStream& out = *stream_;
  if (out.finish_reason() == FinishReason::kError ||
      out.finish_reason() == FinishReason::kShutdown) {
    text = event(generation_error(out).body());
  } else {
    for (const json& chunk : builder_.final_chunks(out.finish_reason())) text += event(chunk);
    if (include_usage_) {
      text += event(builder_.usage_chunk(out.usage()));
    }
  }
  return text + "data: [DONE]\n\n";
}

void GenerationReply::collect(std::vector<GeneratedToken>& tokens) {
  collected_.insert(collected_.end(), std::make_move_iterator(tokens.begin()),
                    std::make_move_iterator(tokens.end()));
  tokens.clear();
}

HttpResponse GenerationReply::response() const {
  const RequestStream& out = *stream_;
  HttpResponse r;
  if (out.finish_reason() == FinishReason::kError ||
      out.finish_reason() == FinishReason::kShutdown) {
    const ApiError e = generation_error(out);
    r.status = e.status();
    r.body = json_text(e.body());
    r.headers = e.headers();
    return r;
  }
  r.body = json_text(builder_.response(collected_, out.finish_reason(), out.usage()));
  return r;
}

}  // namespace tessera::serve
