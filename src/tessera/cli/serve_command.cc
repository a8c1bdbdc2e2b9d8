#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <semaphore>
#include <thread>

#include "tessera/cli/flags.h"
#include "tessera/core/stop_signals.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/device.h"
#include "tessera/serve/http_server.h"

namespace tessera::cli {

namespace fs = std::filesystem;

namespace {

// A connection takes a file descriptor: the soft limit is raised to hold max_connections of them
// beside the model's files, within the hard limit, which may lower the cap.
int64_t connection_cap(int64_t max_connections) {
  constexpr int64_t kSpare = 64;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return max_connections;
  const rlim_t wanted = rlim_t(max_connections + kSpare);
  if (files.rlim_cur < wanted) {
    files.rlim_cur = std::min(wanted, files.rlim_max);
    setrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_NOFILE, &files);
  }
  const int64_t cap = std::min<int64_t>(max_connections, int64_t(files.rlim_cur) - kSpare);
  check(cap >= 1, "the open-file limit ({}) leaves no room for connections; raise ulimit -n",
        files.rlim_cur);
  if (cap < max_connections) {
    std::printf("--max-connections %lld lowered to %lld by the open-file limit (ulimit -n %llu)\n",
                static_cast<long long>(max_connections), static_cast<long long>(cap),
                static_cast<unsigned long long>(files.rlim_cur));
  }
  return cap;
}

std::chrono::milliseconds seconds_flag(const Flags& flags, const std::string& name,
                                       std::chrono::milliseconds fallback) {
  const double seconds = flags.get_double(name, double(fallback.count()) / 1000);
  check(seconds > 0 && seconds <= 86400, "--{} must lie in (0, 86400] seconds, got {}", name,
        seconds);
  return std::chrono::milliseconds(int64_t(seconds * 1000));
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
      {{"checkpoint", "DIR",
        "a run directory, one checkpoint step directory or a Hugging Face model folder "
        "(required)"},
       {"host", "ADDR", "address to listen on (default 127.0.0.1)"},
       {"port", "N", "port to listen on; 0 picks a free one (default 8000)"},
       {"api-key", "KEY",
        "require 'Authorization: Bearer KEY' on every route but /health (default: the "
        "TESSERA_API_KEY environment variable, else none)"},
       {"chat-template", "FILE",
        "a Jinja chat template for /v1/chat/completions, instead of the model's own "
        "(tokenizer_config.json's chat_template)"},
       {"model-name", "NAME",
        "the model id clients ask for (default: the checkpoint's folder name)"},
       {"precision", "P", "f32 or bf16 matmuls (default f32)"},
       {"quantize", "Q", "none or int8: int8 weight-only matmuls (default none)"},
       {"device", "D", "cpu or cuda: where the model runs (default cpu)"},
       {"kv-cache-tokens", "N",
        "tokens the paged KV cache holds (default: a context per running sequence, within 1 GiB)"},
       {"kv-cache-bytes", "N", "the paged KV cache's size in bytes, instead of --kv-cache-tokens"},
       {"max-running", "N", "sequences batched together (default 64)"},
       {"max-step-tokens", "N",
        "tokens one model step runs, decodes and prompt chunks (default 256)"},
       {"max-queue", "N", "requests that may wait; beyond it, 429 (default 256)"},
       {"max-tokens-cap", "N", "the largest max_tokens a request may ask (default: the context)"},
       {"prefix-cache", "on|off",
        "share the KV cache of prompts' common prefixes between requests (default on)"},
       {"max-body-bytes", "N",
        "the largest request body accepted, chunked or not; beyond it, 413 (default 1048576)"},
       {"max-connections", "N", "connections open at once; beyond it, 503 (default 1024)"},
       {"header-timeout", "S",
        "seconds a request's line and headers may take to arrive (default 10)"},
       {"body-timeout", "S", "seconds a request's body may take to arrive (default 30)"},
       {"idle-timeout", "S",
        "seconds a keep-alive connection may wait between requests (default 60)"},
       {"write-timeout", "S",
        "seconds one write to a client may take before it is dropped (default 30)"},
       {"drain-seconds", "S",
        "on SIGTERM or SIGINT, seconds running requests may take to finish before they are ended "
        "(default 30)"},
       {"protect-metrics", "", "require the API key on /metrics too (default: /metrics is open)"},
       {"threads", "N", "compute threads (default: every core but one, left to the HTTP thread)"},
       {"http-threads", "N", "threads running the HTTP event loop (default 1)"}},
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
  // A closed client socket or output pipe must end a write, never the server.
  std::signal(SIGPIPE, SIG_IGN);

  // A compute thread that shares its core with the HTTP threads stalls every step at OpenMP's
  // barriers, so by default one core is left to them.
  const int64_t threads = flags.get_int("threads", std::max(1, num_threads() - 1));
  check(threads >= 1, "--threads must be at least 1, got {}", threads);
  set_num_threads(int(threads));
  const serve::ServingFormat format =
      serve::serving_format(flags.get_or("precision", "f32"), flags.get_or("quantize", "none"),
                            flags.get_or("device", "cpu"));
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
  const std::string prefix_cache = flags.get_or("prefix-cache", "on");
  check(prefix_cache == "on" || prefix_cache == "off", "--prefix-cache must be on or off, not '{}'",
        prefix_cache);
  engine_options.prefix_caching = prefix_cache == "on";

  serve::ServedModel served = serve::load_served_model(*checkpoint, engine_options.max_step_tokens,
                                                       format, flags.get_or("chat-template", ""));
  spdlog::info("chat completions: {}",
               served.chat_template
                   ? "the model's chat template"
                   : "the built-in 'User: ...' form (the model has no chat template)");
  const model::ModelConfig& mc = served.config();
  serve::RouteOptions routes;
  serve::ApiLimits& limits = routes.limits;
  limits.model_name = flags.get_or("model-name", default_model_name(*checkpoint));
  limits.context = mc.max_seq;
  limits.max_tokens_cap = flags.get_int("max-tokens-cap", mc.max_seq);
  check(limits.max_tokens_cap >= 1, "--max-tokens-cap must be at least 1, got {}",
        limits.max_tokens_cap);
  const char* env_key = std::getenv("TESSERA_API_KEY");
  routes.api_key = flags.get_or("api-key", env_key != nullptr ? env_key : "");
  routes.open_metrics = !flags.has("protect-metrics");
  serve::HttpOptions http;
  http.host = flags.get_or("host", http.host);
  http.port = int(flags.get_int("port", http.port));
  check(http.port >= 0 && http.port <= 65535, "--port must lie in [0, 65535], got {}", http.port);
  http.limits.max_body_bytes = flags.get_int("max-body-bytes", http.limits.max_body_bytes);
  check(http.limits.max_body_bytes >= 1024, "--max-body-bytes must be at least 1024, got {}",
        http.limits.max_body_bytes);
  const int64_t max_connections = flags.get_int("max-connections", http.max_connections);
  check(max_connections >= 1, "--max-connections must be at least 1, got {}", max_connections);
  http.max_connections = connection_cap(max_connections);
  http.header_timeout = seconds_flag(flags, "header-timeout", http.header_timeout);
  http.body_timeout = seconds_flag(flags, "body-timeout", http.body_timeout);
  http.idle_timeout = seconds_flag(flags, "idle-timeout", http.idle_timeout);
  http.write_timeout = seconds_flag(flags, "write-timeout", http.write_timeout);
  const auto drain = seconds_flag(flags, "drain-seconds", std::chrono::seconds(30));
  http.threads = int(flags.get_int("http-threads", http.threads));
  check(http.threads >= 1 && http.threads <= 256, "--http-threads must lie in [1, 256], got {}",
        http.threads);

  serve::ServeMetrics metrics(limits.model_name);
  serve::Engine engine(served, engine_options, metrics);
  serve::ApiService service(served, engine, metrics, routes);
  serve::HttpServer server(service, metrics, http);
  const int port = server.bind();
  const serve::PagedKvCache& cache = engine.cache();
  std::printf(
      "serving '%s' from %s: %s, %lld parameters, %s weights (%.1f MiB read per token), context "
      "%lld tokens, on %s, %d threads\n",
      limits.model_name.c_str(), served.step_dir.string().c_str(),
      std::string(model::architecture_name(mc.arch)).c_str(),
      static_cast<long long>(served.model->num_parameters()),
      serve::serving_format_name(format).c_str(),
      double(served.model->matmul_weight_bytes_per_token()) / (1 << 20),
      static_cast<long long>(mc.max_seq),
      served.context().on_cuda()
          ? kernels::cuda_device_info(served.context().device.ordinal).name.c_str()
          : "the CPU",
      num_threads());
  std::printf("KV cache: %lld blocks of %lld tokens = %lld tokens, %.1f MiB, prefix caching %s\n",
              static_cast<long long>(cache.blocks_total()),
              static_cast<long long>(cache.block_tokens()),
              static_cast<long long>(cache.blocks_total() * cache.block_tokens()),
              double(cache.bytes()) / (1 << 20), prefix_cache.c_str());
  std::printf("listening on http://%s:%d%s\n", http.host.c_str(), port,
              routes.api_key.empty() ? "" : " (API key required)");
  std::fflush(stdout);

  // The first SIGTERM or SIGINT drains, on a thread of its own; a second one while draining ends
  // the process at once.
  struct Stop {
    std::atomic<int> signal{0};
    std::binary_semaphore asked{0};
  };
  const auto stop = std::make_shared<Stop>();
  on_stop_signal([stop](int signal, pid_t) {
    if (stop->signal.exchange(signal) != 0) std::_Exit(128 + signal);
    stop->asked.release();
    return true;
  });
  std::thread stopper([&, stop] {
    stop->asked.acquire();
    std::printf("signal %d: draining for up to %.0f s (a second signal stops at once)\n",
                stop->signal.load(), double(drain.count()) / 1000);
    std::fflush(stdout);
    server.drain(drain);
  });
  stopper.detach();
  server.run();
  std::printf("stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace tessera::cli
