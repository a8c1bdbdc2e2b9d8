#include "tests/plan/published_runs.h"

#include <toml++/toml.h>

#include <cmath>
#include <optional>

#include "tessera/core/error.h"

namespace tessera::plan {

std::vector<PublishedRun> published_runs(const HardwareCatalog& catalog) {
  const toml::table file = toml::parse_file(TESSERA_SOURCE_DIR "/tests/plan/published_runs.toml");
  std::vector<PublishedRun> runs;
  for (const toml::node& node : *file["run"].as_array()) {
    const toml::table& t = *node.as_table();
    if (t["incomplete"].value_or(false)) continue;
    PublishedRun r;
    r.name = t["name"].value_or(std::string());
    r.hardware = t["hardware"].value_or(std::string());
    const std::string split = t["split"].value_or(std::string());
    check(split == "fitted" || split == "held_out" || split == "shown",
          "published run {}: split must be \"fitted\", \"held_out\" or \"shown\", not \"{}\"",
          r.name, split);
    r.split = split == "fitted"     ? Split::kFitted
              : split == "held_out" ? Split::kHeldOut
                                    : Split::kShown;
    r.shown_because = t["shown_because"].value_or(std::string());
    check(
        (r.split == Split::kShown) == !r.shown_because.empty(),
        "published run {}: shown_because says why a row is shown only, and only such a row has it",
        r.name);
    r.chips = t["chips"].value_or(int64_t{0});
    const auto m = t["model"], l = t["layout"], p = t["published"];
    model::ModelConfig& c = r.config;
    c.arch = enum_from_name<model::Architecture>(m["arch"].value_or(std::string("gpt2")), "arch");
    c.n_layer = m["n_layer"].value_or(int64_t{0});
    c.d_model = m["d_model"].value_or(int64_t{0});
    c.n_head = m["n_head"].value_or(int64_t{0});
    c.n_kv_head = m["n_kv_head"].value_or(int64_t{0});
    c.head_dim_override = m["head_dim"].value_or(int64_t{0});
    c.ffn_hidden = m["ffn_hidden"].value_or(int64_t{0});
    c.vocab_size = m["vocab_size"].value_or(int64_t{0});
    c.max_seq = m["seq_len"].value_or(int64_t{0});
    c.parallel_block = m["parallel_block"].value_or(false);
    r.layout.dp = l["dp"].value_or(int64_t{1});
    r.layout.tp = l["tp"].value_or(int64_t{1});
    r.layout.pp = l["pp"].value_or(int64_t{1});
    r.layout.cp = l["cp"].value_or(int64_t{1});
    r.layout.vpp = l["vpp"].value_or(int64_t{1});
    r.layout.micro_batch = l["micro_batch"].value_or(int64_t{1});
    r.layout.sequence_parallel = l["sequence_parallel"].value_or(false);
    r.vpp_known = bool(l["vpp"]);
    r.micro_batch_known = bool(l["micro_batch"]);
    r.layout.zero = int(l["zero"].value_or(int64_t{0}));
    r.layout.recompute =
        enum_from_name<model::Recompute>(l["recompute"].value_or(std::string("full")), "recompute");
    r.workload.global_batch = l["global_batch"].value_or(int64_t{0});
    r.workload.seq_len = c.max_seq;
    r.workload.tokens = 1e12;
    r.workload.flash_attention = l["flash_attention"].value_or(true);
    r.workload.overlapped_sharding = l["overlapped_sharding"].value_or(false);
    r.workload.gather_per_tensor = l["gather_per_tensor"].value_or(false);
    r.workload.bf16_activations = true;
    const double peak = catalog.find(r.hardware).peak_bf16_flops / 1e12;
    r.hardware_basis = p["tflops_basis"].value_or(std::string()) == "hardware";
    r.tokens_per_s = p["tokens_per_s_per_chip"].value_or(0.0);
    r.tflops = p["tflops_per_chip"].value_or(p["mfu"].value_or(0.0) * peak);
    runs.push_back(std::move(r));
  }
  return runs;
}

double predicted(const PublishedRun& r, const Estimate& e) {
  if (r.tokens_per_s > 0) return e.tokens_per_s / double(r.chips);
  return r.hardware_basis ? e.hardware_tflops_per_chip : e.model_tflops_per_chip;
}

double published(const PublishedRun& r) { return r.tokens_per_s > 0 ? r.tokens_per_s : r.tflops; }

Estimate published_layout_estimate(const PublishedRun& r, const Accelerator& a) {
  return published_layout_estimate(
      r, a, r.split == Split::kHeldOut ? Unstated::kFastest : Unstated::kClosestToPublished);
}

Estimate published_layout_estimate(const PublishedRun& r, const Accelerator& a, Unstated unstated) {
  std::vector<int64_t> mbs = {r.layout.micro_batch}, vpps = {r.layout.vpp};
  if (!r.micro_batch_known) mbs = {1, 2, 4, 8};
  if (!r.vpp_known && r.layout.pp > 1) vpps = {1, 2, 3, 4, 5, 6, 8};
  // Lower is better: the step time, or the distance to the published figure.
  const auto badness = [&](const Estimate& e) {
    if (unstated == Unstated::kFastest) return e.time.total();
    return std::abs(predicted(r, e) / published(r) - 1);
  };
  std::optional<Estimate> best;
  for (int64_t mb : mbs) {
    for (int64_t vpp : vpps) {
      Layout l = r.layout;
      l.micro_batch = mb;
      l.vpp = vpp;
      Estimate e = estimate(r.config, a, l, r.workload);
      if (!e.invalid.empty()) continue;
      if (!best || badness(e) < badness(*best)) best = e;
    }
  }
  if (!best) return estimate(r.config, a, r.layout, r.workload);
  return *best;
}

}  // namespace tessera::plan
