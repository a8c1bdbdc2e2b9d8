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
#include "tessera/cli/serve_flags.h"
#include "tessera/core/stop_signals.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/device.h"
#include "tessera/serve/http_server.h"
#include "tessera/tokenizer/token_table.h"

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

std::string default_model_name(const std::string& checkpoint) {
  const fs::path p = fs::path(checkpoint).lexically_normal();
  const fs::path last = (p.has_filename() ? p : p.parent_path()).filename();
  const std::string name = (last.extension() == ".gguf" ? last.stem() : last).string();
  return name.empty() || name == "." ? "tessera" : name;
}

// What is served, how, and where.
void print_banner(const ServeFlags& flags, const serve::ServedModel& served,
                  const serve::Engine& engine, int port) {
  const model::ModelConfig& mc = served.config();
  const serve::ApiLimits& limits = flags.routes.limits;
  std::printf(
      "serving '%s' from %s: %s, %lld parameters, %s weights (%.1f MiB held, %.1f MiB read per "
      "token), context %lld tokens, on %s, %d threads\n",
      limits.model_name.c_str(), served.step_dir.string().c_str(),
      std::string(enum_name(mc.arch)).c_str(),
      static_cast<long long>(served.model->num_parameters()),
      serve::serving_format_name(flags.format).c_str(),
      double(served.model->resident_parameter_bytes()) / (1 << 20),
      double(served.model->matmul_weight_bytes_per_token()) / (1 << 20),
      static_cast<long long>(mc.max_seq),
      served.context().on_cuda()
          ? kernels::cuda_device_info(served.context().device.ordinal).name.c_str()
          : "the CPU",
      num_threads());
  const serve::PagedKvCache& cache = engine.cache();
  std::printf(
      "KV cache: %lld blocks of %lld tokens = %lld tokens, %.1f MiB in %s, prefix caching %s\n",
      static_cast<long long>(cache.blocks_total()), static_cast<long long>(cache.block_tokens()),
      static_cast<long long>(cache.blocks_total() * cache.block_tokens()),
      double(cache.bytes()) / (1 << 20), std::string(enum_name(cache.dtype())).c_str(),
      flags.engine.prefix_caching ? "on" : "off");
  if (served.adapters != nullptr) {
    for (const std::string& name : served.adapters->names()) {
      std::printf("LoRA adapter '%s' (model '%s:%s')\n", name.c_str(), limits.model_name.c_str(),
                  name.c_str());
    }
    const std::string runtime = flags.routes.lora_dir.empty()
                                    ? ""
                                    : ", loaded at run time from " + flags.routes.lora_dir.string();
    std::printf("LoRA adapter slots: %lld%s\n", static_cast<long long>(served.adapters->slots()),
                runtime.c_str());
  }
  std::printf("listening on http://%s:%d%s\n", flags.http.host.c_str(), port,
              flags.routes.api_key.empty() ? "" : " (API key required)");
  std::fflush(stdout);
}

// The first SIGTERM or SIGINT drains, on a thread of its own; a second one while draining ends
// the process at once.
void drain_on_signal(serve::HttpServer& server, std::chrono::milliseconds drain) {
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
  std::thread stopper([&server, drain, stop] {
    stop->asked.acquire();
    std::printf("signal %d: draining for up to %.0f s (a second signal stops at once)\n",
                stop->signal.load(), double(drain.count()) / 1000);
    std::fflush(stdout);
    server.drain(drain);
  });
  stopper.detach();
}

}  // namespace

int serve_command(int argc, char** argv) {
  ServeFlags flags;
  Command command("serve",
                  "Serve a trained model over an OpenAI-compatible HTTP API (/v1/completions, "
                  "/v1/chat/completions, /v1/models, /health, /ready, /metrics).");
  if (!command.flags(serve_flags(), flags).parse(argc, argv)) return 0;
  check(!(command.given("--kv-cache-tokens") && command.given("--kv-cache-bytes")),
        "give the KV cache's size once: --kv-cache-tokens or --kv-cache-bytes");
  serve::check_serving_format(flags.format);
  // A closed client socket or output pipe must end a write, never the server.
  std::signal(SIGPIPE, SIG_IGN);
  // A compute thread that shares its core with the HTTP threads stalls every step at OpenMP's
  // barriers, so by default one core is left to them.
  set_num_threads(int(flags.threads.value_or(std::max(1, num_threads() - 1))));

  const std::unique_ptr<comm::Mesh> mesh = serving_mesh(flags.format);
  if (!flags.lora_dir.empty()) {
    check(std::filesystem::is_directory(flags.lora_dir), "--lora-dir {}: no such folder",
          flags.lora_dir);
    // The followers would have to load each adapter with the leader.
    check(mesh == nullptr,
          "--lora-dir loads adapters while one rank serves; over --tp or --pp ranks, give them "
          "with --lora at start");
    flags.routes.lora_dir = flags.lora_dir;
  }
  if (!command.given("--max-loras")) {
    flags.format.lora_slots = int64_t(flags.lora.size()) + (flags.lora_dir.empty() ? 0 : 4);
  }
  serve::ServedModel served = serve::load_served_model(
      flags.checkpoint, flags.engine.max_step_tokens, flags.format, flags.chat_template);
  for (const std::string& lora : flags.lora) {
    const size_t eq = lora.find('=');
    check(eq != std::string::npos && eq > 0 && eq + 1 < lora.size(),
          "--lora '{}': give NAME=PATH, e.g. --lora support=runs/support-lora", lora);
    check(served.adapters != nullptr, "--lora {}: --max-loras 0 leaves no adapter slot", lora);
    try {
      served.adapters->load(lora.substr(0, eq), lora.substr(eq + 1));
    } catch (const Error& e) {
      fail("--lora {}: {}", lora, e.what());
    }
  }
  if (served.ranks != nullptr && served.ranks->rank() != 0) {
    // A stop signal drains the leader, which then ends this rank's steps; a rank that fails ends
    // the job through the launcher.
    on_stop_signal([](int, pid_t) { return true; });
    serve::follow_leader(served, flags.engine);
    return 0;
  }
  spdlog::info("chat completions: {}",
               served.chat_template
                   ? "the model's chat template"
                   : "the built-in 'User: ...' form (the model has no chat template)");
  serve::ApiLimits& limits = flags.routes.limits;
  limits.model_name = flags.model_name.value_or(default_model_name(flags.checkpoint));
  limits.context = served.config().max_seq;
  limits.max_tokens_cap = flags.max_tokens_cap.value_or(limits.context);
  limits.adapters = served.adapters.get();
  const char* env_key = std::getenv("TESSERA_API_KEY");
  flags.routes.api_key = flags.api_key.value_or(env_key != nullptr ? env_key : "");
  flags.http.max_connections = connection_cap(flags.http.max_connections);

  std::optional<serve::ServedModel> draft;
  if (!flags.draft.empty()) {
    check(flags.engine.draft_tokens > 0, "--draft needs --draft-tokens K (1 to 64)");
    serve::ServingFormat alone = flags.format;
    alone.tp = alone.pp = alone.ep = 1;
    alone.mesh = nullptr;
    draft = serve::load_served_model(flags.draft, flags.engine.max_step_tokens, alone);
    tokenizer::check_same_tokenizer(*draft->tokenizer, "the draft model", *served.tokenizer,
                                    "the served model");
    spdlog::info("speculative decoding: {} drafts {} tokens per step", flags.draft,
                 flags.engine.draft_tokens);
  }
  serve::ServeMetrics metrics(limits.model_name);
  serve::Engine engine(served, flags.engine, metrics, draft ? &*draft : nullptr);
  serve::ApiService service(served, engine, metrics, flags.routes);
  serve::HttpServer server(service, metrics, flags.http);
  print_banner(flags, served, engine, server.bind());
  drain_on_signal(server, flags.drain);
  server.run();
  std::printf("stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace tessera::cli
