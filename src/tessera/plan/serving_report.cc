#include "tessera/plan/serving_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/model/model_layout.h"
#include "tessera/plan/report.h"

namespace tessera::plan {
namespace {

std::string dollars(const std::optional<double>& usd) {
  return usd ? fmt::format("${:.3f}", *usd) : "-";
}

std::string workload_summary(const model::ModelConfig& m, const ServingWorkload& w) {
  const model::ParameterCount n = model::count_parameters(m);
  std::string weights =
      w.weights != model::WeightFormat::kDense
          ? fmt::format("{} matmul weights (beside the f32 parameters)", enum_name(w.weights))
      : w.precision == model::Precision::kF32
          ? "f32 weights"
          : fmt::format("{} matmul weights (beside the f32 parameters)", enum_name(w.precision));
  std::string out = fmt::format(
      "model: {} parameters ({} layers, d_model {}, {} heads, {} kv heads){}\n"
      "serving: prompts of {} tokens, {} generated, room for {} per sequence; {}, KV cache in "
      "{}, as the engine holds them; up to {} sequences per replica",
      human_count(double(n.total)), m.n_layer, m.d_model, m.n_head, m.kv_heads(),
      m.is_moe() ? fmt::format(", {} active", human_count(double(n.active))) : "", w.prompt_tokens,
      w.output_tokens, w.context, weights, enum_name(w.kv_dtype), w.max_running);
  if (w.itl_bound_s > 0)
    out += fmt::format("; at most {:.0f} ms between tokens", 1e3 * w.itl_bound_s);
  if (w.ttft_bound_s > 0)
    out += fmt::format("; first token within {:.0f} ms", 1e3 * w.ttft_bound_s);
  if (w.target_tokens_per_s > 0) {
    out += fmt::format("; {} generated tokens/s in all", human_count(w.target_tokens_per_s));
  }
  return out + "\n";
}

std::string table_header() {
  return fmt::format(
      "{:<16} {:>6} {:>10} {:>10} {:>10} {:>8} {:>6} {:>8} {:>9} {:>10} {:>10} {:>10}\n", "layout",
      "chips", "weights", "activ.", "KV cache", "seqs", "batch", "ITL ms", "TTFT ms", "tok/s",
      "tok/s/chip", "$/1M tok");
}

std::string table_row(const ServingEstimate& e) {
  return fmt::format(
      "{:<16} {:>6} {:>10} {:>10} {:>10} {:>8} {:>6} {:>8.1f} {:>9.0f} {:>10} {:>10.1f} {:>10}\n",
      e.layout(), e.chips(), human_bytes(e.memory.weights), human_bytes(e.memory.activations),
      human_bytes(e.memory.kv()), e.sequences, e.batch, 1e3 * e.itl_s, 1e3 * e.ttft_s,
      human_count(e.tokens_per_s), e.tokens_per_s / double(e.chips()),
      dollars(e.usd_per_million_on_demand));
}

nlohmann::json estimate_json(const ServingEstimate& e, const std::string& hardware) {
  return {{"hardware", hardware},
          {"tp", e.tp},
          {"pp", e.pp},
          {"replicas", e.replicas},
          {"chips", e.chips()},
          {"weights_bytes_per_chip", e.memory.weights},
          {"activation_bytes_per_chip", e.memory.activations},
          {"kv_cache_bytes_per_chip", e.memory.kv()},
          {"kv_bytes_per_token_per_chip", e.memory.kv_per_token},
          {"usable_bytes_per_chip", e.memory.usable},
          {"sequences_at_context", e.sequences},
          {"batch", e.batch},
          {"itl_s", e.itl_s},
          {"ttft_s", e.ttft_s},
          {"decode_read_s", e.read_s},
          {"decode_compute_s", e.compute_s},
          {"decode_tensor_parallel_s", e.tensor_parallel_s},
          {"tokens_per_s", e.tokens_per_s},
          {"usd_per_million_tokens",
           {{"on_demand", optional_json(e.usd_per_million_on_demand)},
            {"spot", optional_json(e.usd_per_million_spot)},
            {"1y", optional_json(e.usd_per_million_1y)},
            {"3y", optional_json(e.usd_per_million_3y)}}}};
}

std::string no_layout(const Accelerator& a, int64_t chips, const ServingSearch& found) {
  std::string out = fmt::format("no serving layout of {} fits",
                                chips > 0 ? fmt::format("{} {} chips", chips, a.name) : a.name);
  if (found.best_misfit) {
    out +=
        fmt::format(" (closest: {}: {})", found.best_misfit->layout(), found.best_misfit->invalid);
  }
  return out;
}

// Where the busiest stage's decode step goes, for the best layout.
std::string decode_note(const ServingEstimate& e) {
  return fmt::format(
      "{}: a decode step of the busiest stage over {} sequences takes {:.2f} ms reading weights "
      "and KV cache at the HBM bandwidth, {:.2f} ms of matmuls, {:.2f} ms of tensor-parallel "
      "all-reduces; {} pipeline stages per token\n",
      e.layout(), (e.batch + e.pp - 1) / e.pp, 1e3 * e.read_s, 1e3 * e.compute_s,
      1e3 * e.tensor_parallel_s, e.pp);
}

}  // namespace

std::string serving_report(const model::ModelConfig& model, const HardwareCatalog& catalog,
                           const std::vector<std::string>& names, int64_t chips,
                           const ServingWorkload& workload, int64_t top, bool json) {
  nlohmann::json out_json = nlohmann::json::array();
  std::string out = workload_summary(model, workload);
  const bool compare = names.size() > 1;
  if (compare) out += fmt::format("{:<10} ", "hardware") + table_header();
  std::string notes;
  std::optional<std::pair<std::string, double>> cheapest;
  for (const std::string& name : names) {
    const Accelerator& a = catalog.find(name);
    const ServingSearch found = search_serving(model, a, chips, workload);
    if (found.ranked.empty()) {
      if (!compare) fail("tessera plan --serve: {}", no_layout(a, chips, found));
      notes += no_layout(a, chips, found) + "\n";
      continue;
    }
    const size_t shown = compare ? 1 : std::min<size_t>(size_t(top), found.ranked.size());
    if (!compare) {
      out +=
          fmt::format("hardware: {} ({}): {:.0f} TFLOP/s bf16, {} HBM at {:.0f} GB/s, {} usable\n",
                      a.name, a.description, a.peak_bf16_flops / 1e12, human_bytes(a.hbm_bytes),
                      a.hbm_bandwidth / 1e9, human_bytes(found.ranked.front().memory.usable));
      out += fmt::format("{} layouts fit; memory is per chip, of the stage with the least room\n",
                         found.ranked.size()) +
             table_header();
    }
    for (size_t i = 0; i < shown; ++i) {
      const ServingEstimate& e = found.ranked[i];
      out_json.push_back(estimate_json(e, name));
      out += (compare ? fmt::format("{:<10} ", name) : "") + table_row(e);
    }
    const ServingEstimate& best = found.ranked.front();
    notes += (compare ? name + " " : "") + decode_note(best);
    if (best.usd_per_million_on_demand &&
        (!cheapest || *best.usd_per_million_on_demand < cheapest->second)) {
      cheapest = {name, *best.usd_per_million_on_demand};
    }
  }
  if (json) return out_json.dump(2) + "\n";
  out += notes;
  if (compare && cheapest) {
    out += fmt::format("cheapest per million generated tokens at on-demand prices: {} (${:.3f})\n",
                       cheapest->first, cheapest->second);
  }
  return out +
         "decode speed is the bound of the bytes each step reads (weights once per step, each "
         "sequence's KV cache) at the HBM bandwidth and its FLOPs at the fitted matmul rate; "
         "time to first token is an idle replica's prefill\n";
}

}  // namespace tessera::plan
