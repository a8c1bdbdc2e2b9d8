#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tessera/cli/flags.h"
#include "tessera/core/threading.h"
#include "tessera/serve/http_server.h"

namespace tessera::cli {

namespace fs = std::filesystem;

namespace {

// SIGINT and SIGTERM are taken by one thread that stops the server, so requests in flight end
// cleanly; every other thread (started after this) has them blocked.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

std::string default_model_name(const std::string& checkpoint) {
  const fs::path p = fs::path(checkpoint).lexically_normal();
  const std::string name = (p.has_filename() ? p : p.parent_path()).filename().string();
  return name.empty() || name == "." ? "tessera" : name;
}

}  // namespace

int serve_command(int argc, char** argv) {
  Flags flags(
      "serve",
      {{"checkpoint", "DIR", "a run directory or one checkpoint step directory (required)"},
       {"host", "ADDR", "address to listen on (default 127.0.0.1)"},
       {"port", "N", "port to listen on; 0 picks a free one (default 8000)"},
       {"api-key", "KEY",
        "require 'Authorization: Bearer KEY' on every route but /health (default: the "
        "TESSERA_API_KEY environment variable, else none)"},
       {"model-name", "NAME",
        "the model id clients ask for (default: the checkpoint's folder name)"},
       {"precision", "P", "f32 or bf16 matmuls (default f32)"},
       {"quantize", "Q", "none or int8: int8 weight-only matmuls (default none)"},
       {"kv-cache-tokens", "N",
        "tokens the paged KV cache holds (default: a context per running sequence, within 1 GiB)"},
       {"kv-cache-bytes", "N", "the paged KV cache's size in bytes, instead of --kv-cache-tokens"},
       {"max-running", "N", "sequences batched together (default 64)"},
       {"max-step-tokens", "N",
        "tokens one model step runs, decodes and prompt chunks (default 256)"},
       {"max-queue", "N", "requests that may wait; beyond it, 429 (default 256)"},
       {"max-tokens-cap", "N", "the largest max_tokens a request may ask (default: the context)"},
       {"max-body-bytes", "N", "the largest request body accepted (default 1048576)"},
       {"threads", "N", "compute threads (default: every core but one, left to the HTTP threads)"},
       {"http-threads", "N", "connections served at once (default max-running + max-queue + 8)"},
       {"help", "", "show this help"}},
      argc, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Serve a trained model over an OpenAI-compatible HTTP API "
                         "(/v1/completions, /v1/chat/completions, /v1/models, /health, /ready, "
                         "/metrics).")
                   .c_str(),
               stdout);
    return 0;
  }
  const auto checkpoint = flags.get("checkpoint");
  check(checkpoint.has_value(), "tessera serve: --checkpoint DIR is required");
  const sigset_t stop_signals = block_stop_signals();

  // A compute thread that shares its core with the HTTP threads stalls every step at OpenMP's
  // barriers, so by default one core is left to them.
  const int64_t threads = flags.get_int("threads", std::max(1, num_threads() - 1));
  check(threads >= 1, "--threads must be at least 1, got {}", threads);
  set_num_threads(int(threads));
  const serve::ServingFormat format =
      serve::serving_format(flags.get_or("precision", "f32"), flags.get_or("quantize", "none"));
  serve::EngineOptions engine_options;
  engine_options.kv_cache_tokens = flags.get_int("kv-cache-tokens", 0);
  engine_options.kv_cache_bytes = flags.get_int("kv-cache-bytes", 0);
  check(!(flags.has("kv-cache-tokens") && flags.has("kv-cache-bytes")),
        "give the KV cache's size once: --kv-cache-tokens or --kv-cache-bytes");
  engine_options.max_running = flags.get_int("max-running", engine_options.max_running);
  engine_options.max_step_tokens = flags.get_int("max-step-tokens", engine_options.max_step_tokens);
  engine_options.max_queue = flags.get_int("max-queue", engine_options.max_queue);
  check(engine_options.kv_cache_tokens >= 0 && engine_options.kv_cache_bytes >= 0,
        "--kv-cache-tokens and --kv-cache-bytes must be at least 0");

  serve::ServedModel served =
      serve::load_served_model(*checkpoint, engine_options.max_step_tokens, format);
  const model::ModelConfig& mc = served.config();
  serve::ApiLimits limits;
  limits.model_name = flags.get_or("model-name", default_model_name(*checkpoint));
  limits.context = mc.max_seq;
  limits.max_tokens_cap = flags.get_int("max-tokens-cap", mc.max_seq);
  check(limits.max_tokens_cap >= 1, "--max-tokens-cap must be at least 1, got {}",
        limits.max_tokens_cap);
  serve::HttpOptions http;
  http.host = flags.get_or("host", http.host);
  http.port = int(flags.get_int("port", http.port));
  check(http.port >= 0 && http.port <= 65535, "--port must lie in [0, 65535], got {}", http.port);
  const char* env_key = std::getenv("TESSERA_API_KEY");
  http.api_key = flags.get_or("api-key", env_key != nullptr ? env_key : "");
  http.max_body_bytes = flags.get_int("max-body-bytes", http.max_body_bytes);
  check(http.max_body_bytes >= 1024, "--max-body-bytes must be at least 1024, got {}",
        http.max_body_bytes);
  http.threads = int(flags.get_int("http-threads", 0));
  check(http.threads >= 0, "--http-threads must be at least 0, got {}", http.threads);

  serve::ServeMetrics metrics;
  serve::Engine engine(served, engine_options, metrics);
  serve::HttpServer server(served, engine, metrics, limits, http);
  const int port = server.bind();
  const serve::PagedKvCache& cache = engine.cache();
  std::printf(
      "serving '%s' from %s: %s, %lld parameters, %s weights (%.1f MiB read per token), context "
      "%lld tokens, %d threads\n",
      limits.model_name.c_str(), served.step_dir.string().c_str(),
      std::string(model::architecture_name(mc.arch)).c_str(),
      static_cast<long long>(served.model->num_parameters()),
      serve::serving_format_name(format).c_str(),
      double(served.model->matmul_weight_bytes_per_token()) / (1 << 20),
      static_cast<long long>(mc.max_seq), num_threads());
  std::printf("KV cache: %lld blocks of %lld tokens = %lld tokens, %.1f MiB\n",
              static_cast<long long>(cache.blocks_total()),
              static_cast<long long>(cache.block_tokens()),
              static_cast<long long>(cache.blocks_total() * cache.block_tokens()),
              double(cache.bytes()) / (1 << 20));
  std::printf("listening on http://%s:%d%s\n", http.host.c_str(), port,
              http.api_key.empty() ? "" : " (API key required)");
  std::fflush(stdout);

  std::atomic<bool> signalled = false;
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    signalled = true;
    server.stop();
  });
  server.run();
  // run() also returns when listening fails; wake the stopper so it can be joined.
  if (!signalled) pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  std::printf("stopped\n");
  return 0;
}

}  // namespace tessera::cli
