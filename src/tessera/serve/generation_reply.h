#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/serve/engine.h"
#include "tessera/serve/http_message.h"
#include "tessera/serve/openai_api.h"
#include "tessera/serve/response_builder.h"

namespace tessera::serve {

// The answer to one generation request while the engine produces it, in the form the client
// asked for: server-sent events as tokens arrive, or one JSON body at the end. A transport takes
// new tokens from stream() and writes what this returns; it knows nothing of OpenAI's format.
class GenerationReply {
 public:
  GenerationReply(std::shared_ptr<RequestStream> stream, ResponseBuilder builder, bool streaming,
                  bool include_usage);

  RequestStream& stream() { return *stream_; }
  bool streaming() const { return streaming_; }

  // Streaming: the events carrying these tokens (empty when there are none).
  std::string events(const std::vector<GeneratedToken>& tokens);
  // Streaming, once the stream has finished: the finish chunk (or, when generation failed or the
  // server ended it, an error event), the usage chunk when asked, and `data: [DONE]`.
  std::string end_events();
  // Whole: keeps these tokens for the response.
  void collect(std::vector<GeneratedToken>& tokens);
  // Whole, once the stream has finished: the JSON response, or an error when it failed.
  HttpResponse response() const;

  // A comment line for an SSE stream with nothing new: it keeps proxies from timing the stream
  // out and finds a client that has gone.
  static constexpr std::string_view kKeepAliveEvent = ": waiting\n\n";

 private:
  std::shared_ptr<RequestStream> stream_;
  ResponseBuilder builder_;
  const bool streaming_, include_usage_;
  std::vector<GeneratedToken> collected_;
};

// The error a request that the engine failed or the server ended answers with: 503 with
// Retry-After when the server was shutting down, else 500.
ApiError generation_error(const RequestStream& stream);

}  // namespace tessera::serve
