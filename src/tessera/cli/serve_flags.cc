#include "tessera/cli/serve_flags.h"

#include "tessera/comm/world.h"
#include "tessera/core/error.h"

namespace tessera::cli {
namespace {

constexpr Range kSeconds{0, 86400, true, false};

Settings<serve::EngineOptions> engine_flags() {
  using E = serve::EngineOptions;
  Setting<E> prefix_cache = text_setting<E>(
      "--prefix-cache", "share the KV cache of prompts' common prefixes between requests",
      [](const E& e) -> std::string { return e.prefix_caching ? "on" : "off"; },
      [](E& e, const std::string& text) {
        check(text == "on" || text == "off", "--prefix-cache must be on or off, not '{}'", text);
        e.prefix_caching = text == "on";
      });
  prefix_cache.value_name = "on|off";
  return {
      flag("--kv-cache-tokens", "N", &E::kv_cache_tokens,
           "tokens the paged KV cache holds; 0: a context per running sequence, within 1 GiB",
           at_least(0)),
      flag("--kv-cache-bytes", "N", &E::kv_cache_bytes,
           "the paged KV cache's size in bytes, instead of --kv-cache-tokens", at_least(0)),
      flag("--max-running", "N", &E::max_running, "sequences batched together", at_least(1)),
      flag("--max-step-tokens", "N", &E::max_step_tokens,
           "tokens one model step runs, decodes and prompt chunks", at_least(1)),
      flag("--max-queue", "N", &E::max_queue, "requests that may wait; beyond it, 429",
           at_least(0)),
      prefix_cache,
      flag("--draft-tokens", "K", &E::draft_tokens,
           "speculative decoding: tokens drafted per step for each decoding sequence, by --draft's "
           "model or else by prompt lookup (the tokens after the last earlier match of its last "
           "1-3 tokens), and verified in the same step; 0: none",
           within(0, 64)),
  };
}

Settings<serve::HttpOptions> http_flags() {
  using H = serve::HttpOptions;
  return join<H>({
      {
          flag("--host", "ADDR", &H::host, "address to listen on"),
          flag("--port", "N", &H::port, "port to listen on; 0 picks a free one", within(0, 65535)),
          flag("--max-connections", "N", &H::max_connections,
               "connections open at once; beyond it, 503", at_least(1)),
          flag("--header-timeout", "S", &H::header_timeout,
               "seconds a request's line and headers may take to arrive", kSeconds),
          flag("--body-timeout", "S", &H::body_timeout,
               "seconds a request's body may take to arrive", kSeconds),
          flag("--idle-timeout", "S", &H::idle_timeout,
               "seconds a keep-alive connection may wait between requests", kSeconds),
          flag("--write-timeout", "S", &H::write_timeout,
               "seconds one write to a client may take before it is dropped", kSeconds),
          flag("--http-threads", "N", &H::threads, "threads running the HTTP event loop",
               within(1, 256)),
      },
      nest(&H::limits, Settings<serve::HttpLimits>{flag(
                           "--max-body-bytes", "N", &serve::HttpLimits::max_body_bytes,
                           "the largest request body accepted, chunked or not; beyond it, 413",
                           at_least(1024))}),
  });
}

}  // namespace

Settings<serve::ServingFormat> serving_format_flags() {
  using F = serve::ServingFormat;
  return join<F>({
      {flag("--precision", "f32|bf16", &F::precision, "matmul precision"),
       flag("--quantize", "", &F::weights,
            "int8, q4_0 or q4_k: matmul weights in int8, or in 4 bits, in ggml's blocks of 32 "
            "(q4_0) or super-blocks of 256 (q4_k)"),
       flag("--kv-cache-dtype", "", &F::kv_dtype,
            "q8_0: the KV cache in blocks of 32 int8 values with an f16 scale, 3.8x the tokens "
            "in the same bytes"),
       flag("--tp", "N", &F::tp,
            "tensor-parallel ranks that split the model, each holding a shard of every weight "
            "and of the KV cache: run under mpirun -n N (x --pp x --ep)",
            at_least(1)),
       flag("--pp", "N", &F::pp,
            "pipeline stages that split the model's blocks: run under mpirun -n N (x --tp x --ep)",
            at_least(1)),
       flag("--ep", "N", &F::ep,
            "expert-parallel ranks that split a mixture's experts: run under mpirun -n N (x --tp "
            "x --pp)",
            at_least(1))},
      nest(&F::device, Settings<kernels::Device>{flag("--device", "", &kernels::Device::kind,
                                                      "where the model runs")}),
  });
}

std::unique_ptr<comm::Mesh> serving_mesh(serve::ServingFormat& format) {
  comm::Communicator& world = comm::world();
  const int64_t ranks = format.tp * format.pp * format.ep;
  check(world.size() == ranks,
        "--tp {} x --pp {} x --ep {} splits the model over {} ranks, but this job has {}: run it "
        "as mpirun -n {} tessera ...",
        format.tp, format.pp, format.ep, ranks, world.size(), ranks);
  if (ranks == 1) return nullptr;
  // The expert-parallel ranks are carved out of data-parallel ones, as in training.
  auto mesh = std::make_unique<comm::Mesh>(
      world, comm::MeshShape{.dp = format.ep, .tp = format.tp, .pp = format.pp, .ep = format.ep});
  format.mesh = mesh.get();
  return mesh;
}

Settings<ServeFlags> serve_flags() {
  using S = ServeFlags;
  return join<S>({
      {
          required(flag("--checkpoint", "PATH", &S::checkpoint,
                        "a run directory, one checkpoint step directory, a Hugging Face model "
                        "folder or a GGUF file")),
          flag("--api-key", "KEY", &S::api_key,
               "require 'Authorization: Bearer KEY' on every route but /health (default: the "
               "TESSERA_API_KEY environment variable, else none)"),
          flag("--chat-template", "FILE", &S::chat_template,
               "a Jinja chat template for /v1/chat/completions, instead of the model's own "
               "(tokenizer_config.json's chat_template)"),
          flag("--draft", "DIR", &S::draft,
               "speculative decoding by a smaller model with the same tokenizer (a run, step or "
               "Hugging Face folder), drafting --draft-tokens tokens per step greedily; without "
               "it, --draft-tokens drafts by prompt lookup"),
          flag("--model-name", "NAME", &S::model_name,
               "the model id clients ask for (default: the checkpoint's folder name)"),
          flag("--max-tokens-cap", "N", &S::max_tokens_cap,
               "the largest max_tokens a request may ask (default: the context)", at_least(1)),
          flag("--drain-seconds", "S", &S::drain,
               "on SIGTERM or SIGINT, seconds running requests may take to finish before they "
               "are ended",
               kSeconds),
          flag("--threads", "N", &S::threads,
               "compute threads (default: every core but one, left to the HTTP thread)",
               at_least(1)),
      },
      nest(&S::format, serving_format_flags()),
      {flag("--lora", "NAME=PATH", &S::lora,
            "serve a LoRA adapter of the model (a PEFT adapter folder or a LoRA run's folder or "
            "step) to requests whose model is NAME or MODEL:NAME, batched with the others; "
            "repeatable"),
       flag("--lora-dir", "DIR", &S::lora_dir,
            "let clients load adapters found in DIR, and unload adapters, while serving (POST "
            "/v1/load_lora_adapter and /v1/unload_lora_adapter, as vLLM)")},
      nest(&S::format,
           Settings<serve::ServingFormat>{
               flag("--max-loras", "N", &serve::ServingFormat::lora_slots,
                    "adapters held at once (default: as many as --lora gives, and 4 more with "
                    "--lora-dir)",
                    at_least(0)),
               flag("--max-lora-rank", "R", &serve::ServingFormat::max_lora_rank,
                    "the highest rank an adapter may have", at_least(1))}),
      nest(&S::engine, engine_flags()),
      nest(&S::routes, Settings<serve::RouteOptions>{negated(
                           flag("--protect-metrics", "", &serve::RouteOptions::open_metrics,
                                "require the API key on /metrics too (default: /metrics is "
                                "open)"))}),
      nest(&S::http, http_flags()),
  });
}

}  // namespace tessera::cli
