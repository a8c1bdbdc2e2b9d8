#include "tessera/serve/serve_metrics.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace tessera::serve {

namespace {

// From 1 ms to 1 minute, roughly doubling: first-token, queue and request latencies span it.
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,    30,   60};
// Inter-token latency sits between 100 us and a second.
const std::vector<double> kTokenBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                           0.025,  0.05,    0.1,    0.25,  0.5,    1};

// vLLM's names for the same series, which autoscalers already read (Vertex AI's autoscaling reads
// vllm:num_requests_waiting and vllm:gpu_cache_usage_perc), beside Tessera's own: both versions
// of vLLM's KV-cache usage and inter-token latency names.
constexpr std::pair<std::string_view, std::string_view> kVllmNames[] = {
    {"vllm:num_requests_waiting", "tessera_requests_waiting"},
    {"vllm:num_requests_running", "tessera_requests_running"},
    {"vllm:gpu_cache_usage_perc", "tessera_kv_cache_usage_ratio"},
    {"vllm:kv_cache_usage_perc", "tessera_kv_cache_usage_ratio"},
    {"vllm:request_queue_time_seconds", "tessera_request_queue_time_seconds"},
    {"vllm:time_to_first_token_seconds", "tessera_time_to_first_token_seconds"},
    {"vllm:time_per_output_token_seconds", "tessera_inter_token_latency_seconds"},
    {"vllm:inter_token_latency_seconds", "tessera_inter_token_latency_seconds"},
    {"vllm:e2e_request_latency_seconds", "tessera_request_latency_seconds"},
    {"vllm:prompt_tokens_total", "tessera_prompt_tokens_total"},
    {"vllm:generation_tokens_total", "tessera_generation_tokens_total"},
    {"vllm:num_preemptions_total", "tessera_preemptions_total"},
    {"vllm:prefix_cache_queries_total", "tessera_prefix_cache_queries_total"},
    {"vllm:prefix_cache_hits_total", "tessera_prefix_cache_hits_total"},
    {"vllm:spec_decode_num_drafts_total", "tessera_spec_decode_drafts_total"},
    {"vllm:spec_decode_num_draft_tokens_total", "tessera_spec_decode_draft_tokens_total"},
    {"vllm:spec_decode_num_accepted_tokens_total", "tessera_spec_decode_accepted_tokens_total"},
};

}  // namespace

obs::Labels ServeMetrics::labels(obs::Labels more) const {
  more.insert(more.begin(), {"model_name", model_name_});
  return more;
}

ServeMetrics::ServeMetrics(const std::string& model_name)
    : model_name_(model_name),
      connections_(registry_.gauge("tessera_http_connections", "HTTP connections open", labels())),
      waiting_(registry_.gauge("tessera_requests_waiting",
                               "Requests queued for a place in the batch", labels())),
      running_(
          registry_.gauge("tessera_requests_running", "Sequences in the running batch", labels())),
      kv_used_(registry_.gauge("tessera_kv_cache_blocks_used",
                               "KV cache blocks held by running sequences", labels())),
      kv_free_(registry_.gauge("tessera_kv_cache_blocks_free",
                               "KV cache blocks a sequence can take (free or cached)", labels())),
      kv_cached_(registry_.gauge("tessera_kv_cache_blocks_cached",
                                 "KV cache blocks no sequence holds that keep a prefix for reuse",
                                 labels())),
      kv_usage_(registry_.gauge("tessera_kv_cache_usage_ratio",
                                "Share of the KV cache's blocks held by running sequences (0-1)",
                                labels())),
      tensor_parallel_(registry_.gauge("tessera_tensor_parallel_ranks",
                                       "Tensor-parallel ranks that split the served model",
                                       labels())),
      pipeline_stages_(registry_.gauge("tessera_pipeline_stages",
                                       "Pipeline stages that split the served model's blocks",
                                       labels())),
      expert_parallel_(
          registry_.gauge("tessera_expert_parallel_ranks",
                          "Expert-parallel ranks that split the served model's experts", labels())),
      queue_time_(registry_.histogram("tessera_request_queue_time_seconds",
                                      "From a request's arrival to its first place in the batch",
                                      kLatencyBuckets, labels())),
      ttft_(registry_.histogram("tessera_time_to_first_token_seconds",
                                "From a request's arrival to its first generated token",
                                kLatencyBuckets, labels())),
      itl_(registry_.histogram("tessera_inter_token_latency_seconds",
                               "Between consecutive generated tokens of a request", kTokenBuckets,
                               labels())),
      latency_(registry_.histogram("tessera_request_latency_seconds",
                                   "From a request's arrival to its last token", kLatencyBuckets,
                                   labels())),
      prompt_tokens_(
          registry_.counter("tessera_prompt_tokens_total", "Prompt tokens received", labels())),
      prefill_tokens_(registry_.counter(
          "tessera_prefill_tokens_total",
          "Prompt tokens run through the model (recomputation after preemption included); "
          "tokens found in the prefix cache are not run",
          labels())),
      prefix_queries_(registry_.counter(
          "tessera_prefix_cache_queries_total",
          "Tokens looked up in the prefix cache when a sequence joins the batch", labels())),
      prefix_hits_(registry_.counter("tessera_prefix_cache_hits_total",
                                     "Tokens found in the prefix cache, whose prefill was saved",
                                     labels())),
      generated_tokens_(
          registry_.counter("tessera_generation_tokens_total", "Tokens generated", labels())),
      preemptions_(registry_.counter(
          "tessera_preemptions_total",
          "Sequences sent back to the queue because the KV cache ran out of blocks", labels())),
      steps_(registry_.counter("tessera_model_steps_total",
                               "Model steps run, each over every sequence in the batch", labels())),
      step_seconds_(registry_.counter("tessera_model_step_seconds_total",
                                      "Seconds the model's steps took", labels())),
      communication_(registry_.counter(
          "tessera_model_communication_seconds_total",
          "Seconds the model's steps spent in collectives and exchanges between its ranks (plans, "
          "a stage's rows, the logits)",
          labels())),
      drafts_(registry_.counter("tessera_spec_decode_drafts_total",
                                "Drafts of speculated tokens verified, one per sequence and step",
                                labels())),
      draft_tokens_(registry_.counter("tessera_spec_decode_draft_tokens_total",
                                      "Speculated tokens verified", labels())),
      accepted_tokens_(registry_.counter(
          "tessera_spec_decode_accepted_tokens_total",
          "Speculated tokens kept: each equal to the token its position sampled", labels())),
      masked_tokens_(registry_.counter("tessera_structured_output_tokens_total",
                                       "Tokens sampled under a response format's grammar",
                                       labels())),
      mask_seconds_(registry_.counter(
          "tessera_structured_output_mask_seconds_total",
          "Seconds spent finding and applying the tokens a response format allows next", labels())),
      masks_computed_(registry_.counter(
          "tessera_structured_output_masks_computed_total",
          "Grammar states whose allowed tokens were computed rather than found kept", labels())),
      mask_compute_seconds_(registry_.counter(
          "tessera_structured_output_mask_compute_seconds_total",
          "Of the mask seconds, those of masks computed rather than found kept", labels())) {
  registry_.gauge_callback(
      "tessera_prefix_cache_hit_rate",
      "Share of looked-up prompt tokens found in the prefix cache since start (0-1)",
      [this] {
        const double queries = prefix_queries_.value();
        return queries > 0 ? prefix_hits_.value() / queries : 0.0;
      },
      labels());
  for (const auto& [vllm, ours] : kVllmNames) {
    registry_.alias(std::string(vllm), std::string(ours),
                    fmt::format("The same series as {}, by vLLM's name", ours));
  }
}

void ServeMetrics::http_response(const std::string& route, int status) {
  registry_
      .counter("tessera_http_requests_total", "HTTP requests answered, by route and status",
               labels({{"route", route}, {"status", std::to_string(status)}}))
      .inc();
}

void ServeMetrics::request_finished(std::string_view reason) {
  registry_
      .counter("tessera_requests_finished_total", "Generation requests finished, by reason",
               labels({{"reason", std::string(reason)}}))
      .inc();
}

void ServeMetrics::set_open_connections(int64_t connections) {
  connections_.set(double(connections));
}
void ServeMetrics::set_waiting(int64_t requests) { waiting_.set(double(requests)); }
void ServeMetrics::set_running(int64_t sequences) { running_.set(double(sequences)); }

void ServeMetrics::set_kv_blocks(int64_t used, int64_t free, int64_t cached) {
  kv_used_.set(double(used));
  kv_free_.set(double(free));
  kv_cached_.set(double(cached));
  kv_usage_.set(double(used) / double(used + free));
}

void ServeMetrics::queue_time(double seconds) { queue_time_.observe(seconds); }
void ServeMetrics::time_to_first_token(double seconds) { ttft_.observe(seconds); }
void ServeMetrics::inter_token_latency(double seconds) { itl_.observe(seconds); }
void ServeMetrics::request_latency(double seconds) { latency_.observe(seconds); }
void ServeMetrics::prompt_tokens(int64_t n) { prompt_tokens_.inc(double(n)); }
void ServeMetrics::prefill_tokens(int64_t n) { prefill_tokens_.inc(double(n)); }

void ServeMetrics::prefix_cache_lookup(int64_t queried_tokens, int64_t hit_tokens) {
  prefix_queries_.inc(double(queried_tokens));
  prefix_hits_.inc(double(hit_tokens));
}

void ServeMetrics::generated_tokens(int64_t n) { generated_tokens_.inc(double(n)); }
void ServeMetrics::preemption() { preemptions_.inc(); }
void ServeMetrics::drafted(int64_t tokens) {
  drafts_.inc();
  draft_tokens_.inc(double(tokens));
}
void ServeMetrics::draft_kept() { accepted_tokens_.inc(); }
void ServeMetrics::masked_token(double seconds, bool computed) {
  masked_tokens_.inc();
  mask_seconds_.inc(seconds);
  if (computed) {
    masks_computed_.inc();
    mask_compute_seconds_.inc(seconds);
  }
}
void ServeMetrics::set_layout(int64_t tensor_parallel, int64_t pipeline_stages,
                              int64_t expert_parallel) {
  tensor_parallel_.set(double(tensor_parallel));
  pipeline_stages_.set(double(pipeline_stages));
  expert_parallel_.set(double(expert_parallel));
}
void ServeMetrics::model_step(double seconds, double communicating) {
  steps_.inc();
  step_seconds_.inc(seconds);
  communication_.inc(communicating);
}

std::string ServeMetrics::render() const { return registry_.render(); }

}  // namespace tessera::serve
