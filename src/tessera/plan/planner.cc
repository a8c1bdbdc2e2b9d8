#include "tessera/plan/planner.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/split_commas.h"
#include "tessera/model/model_layout.h"
#include "tessera/plan/collectives.h"
#include "tessera/plan/hardware.h"
#include "tessera/plan/layout.h"
#include "tessera/plan/report.h"
#include "tessera/plan/serving_report.h"

namespace tessera::plan {
namespace {

// One question: the model and workload on a count of chips.
struct Inputs {
  model::ModelConfig model;
  int64_t chips = 0;
  Workload workload;
};

// The smallest multiple of the chips that is at least `sequences`.
int64_t multiple_of_chips(int64_t sequences, const Inputs& in) {
  return (sequences + in.chips - 1) / in.chips * in.chips;
}

// About 4M tokens per step, rounded up to a multiple of the chips.
int64_t default_global_batch(const Inputs& in) {
  return multiple_of_chips(int64_t(std::ceil(4.0 * (1 << 20) / double(in.workload.seq_len))), in);
}

std::string model_summary(const model::ModelConfig& m) {
  const model::ParameterCount n = model::count_parameters(m);
  std::string s = fmt::format("{} parameters ({} layers, d_model {}, {} heads)",
                              human_count(double(n.total)), m.n_layer, m.d_model, m.n_head);
  if (m.is_moe()) s += fmt::format(", {} active", human_count(double(n.active)));
  return s;
}

// What is being planned, above a table once the plan has succeeded.
std::string header(const Inputs& in, const Accelerator* a) {
  std::string out = fmt::format("model: {}, {} x {} tokens per step, {} tokens to train\n",
                                model_summary(in.model), in.workload.global_batch,
                                in.workload.seq_len, human_count(in.workload.tokens));
  if (a == nullptr) return out;
  return out + fmt::format("hardware: {} x {} ({}): {:.0f} TFLOP/s bf16, {} HBM\n", in.chips,
                           a->name, a->description, a->peak_bf16_flops / 1e12,
                           human_bytes(a->hbm_bytes));
}

// Why no layout of the chips fits; with `suggest`, the smallest chip count that does (a search).
std::string no_fit_reason(const Inputs& in, const Accelerator& a, const SearchResult& found,
                          bool suggest) {
  std::string why;
  if (found.smallest_misfit) {
    why = fmt::format(
        "no layout of {} {} chips fits {}: the leanest ({}) needs {} per chip, {} usable", in.chips,
        a.name, model_summary(in.model), found.smallest_misfit->layout.str(),
        human_bytes(found.smallest_misfit->memory.total()),
        human_bytes(found.smallest_misfit->usable_memory));
  } else {
    // Nothing was too big: every layout was refused for its shape, so the batch is the cause.
    const int64_t batch = in.workload.global_batch;
    why = fmt::format(
        "no layout of {} {} chips can split a global batch of {} sequences: data parallelism "
        "(chips / (tp x pp)) must divide it, with tp dividing the {} heads within a scale-up "
        "domain of {} chips and at most one pipeline stage per layer ({}); a multiple of the "
        "chips, such as "
        "--global-batch {}, can be split",
        in.chips, a.name, batch, in.model.n_head, a.scaleup_domain, in.model.n_layer,
        multiple_of_chips(batch, in));
  }
  if (!suggest) return why;
  const std::optional<int64_t> smallest = smallest_feasible_chips(in.model, a, in.workload);
  why += smallest
             ? fmt::format("; with this batch the smallest feasible count is {} chips", *smallest)
             : std::string("; with this batch it fits on no count up to 2^20 chips");
  return why;
}

// The failure model behind the goodput column, said once under a table.
std::string goodput_basis(const Reliability& r) {
  return fmt::format(
      "goodput: {:.3g} failures per chip-hour (default: Llama 3's 419 unexpected interruptions in "
      "54 days on 16,384 GPUs), {:.0f} min per restart, checkpoints written at {:.3g} GB/s per "
      "chip (default: Llama 3's 2 TB/s storage over 16,384 GPUs) at the Young-Daly interval; days "
      "and cost include it\n",
      r.failures_per_chip_hour, r.restart_s / 60, r.checkpoint_bytes_per_s_per_chip / 1e9);
}

std::string search_report(const Inputs& in, const Accelerator& a, const PlanQuery& query) {
  const SearchResult found = search_layouts(in.model, a, in.chips, in.workload, query.rank_by);
  if (found.ranked.empty()) fail("{}", no_fit_reason(in, a, found, true));
  const size_t shown = std::min<size_t>(size_t(query.top), found.ranked.size());
  const std::vector<Estimate> best(found.ranked.begin(), found.ranked.begin() + shown);
  if (query.json) {
    nlohmann::json out = {{"hardware", a.name},
                          {"chips", in.chips},
                          {"evaluated", found.evaluated},
                          {"too_big", found.too_big},
                          {"layouts", nlohmann::json::array()}};
    for (const Estimate& e : best) out["layouts"].push_back(estimate_json(e));
    return out.dump(2) + "\n";
  }
  std::string out = header(in, &a);
  out +=
      fmt::format("{} layouts of {} chips evaluated: {} fit, {} exceed {} usable of HBM\n",
                  human_count(double(found.evaluated)), in.chips, found.evaluated - found.too_big,
                  found.too_big, human_bytes(found.ranked.front().usable_memory));
  out += layout_table(best);
  if (auto warning = mfu_warning(best.front(), a)) out += *warning + "\n";
  return out + goodput_basis(in.workload.reliability);
}

std::string price_cell(const std::optional<double>& usd) { return usd ? human_dollars(*usd) : "-"; }

// The best row of a frontier that trains within the deadline: the cheapest at on-demand prices,
// rows with a price before rows without.
struct Cheapest {
  std::string name;
  int64_t chips = 0;
  double days = 0, cost = 0;
  bool priced = false;

  bool better_than(const std::optional<Cheapest>& other) const {
    return !other || (priced && !other->priced) || (priced == other->priced && cost < other->cost);
  }
};

std::string prices_and_deadline(const HardwareCatalog& catalog,
                                const std::vector<std::string>& names,
                                const std::optional<double>& deadline,
                                const std::optional<Cheapest>& cheapest) {
  std::string out;
  for (const std::string& name : names) {
    const Prices& p = catalog.find(name).prices;
    if (p.on_demand || p.spot || p.committed_1y || p.committed_3y) {
      out += fmt::format("prices of {} (USD per chip-hour, {}): {}\n", name, p.date, p.source);
    } else {
      out += fmt::format("prices of {}: none published in the catalog (add them with --catalog)\n",
                         name);
    }
  }
  if (!deadline) return out;
  if (!cheapest) {
    return out +
           fmt::format("none of these finishes within {:.1f} days: try more chips\n", *deadline);
  }
  return out +
         fmt::format("cheapest within {:.1f} days at on-demand prices: {} x {}, {:.1f} days, {}\n",
                     *deadline, cheapest->chips, cheapest->name, cheapest->days,
                     cheapest->priced ? human_dollars(cheapest->cost) : "no published price");
}

// The best layout of each accelerator at each chip count: days and cost at every published price,
// failures included, and with a deadline the cheapest row that meets it.
std::string frontier_report(const Inputs& base, const HardwareCatalog& catalog,
                            const std::vector<std::string>& names,
                            const std::vector<int64_t>& chip_counts, const PlanQuery& query) {
  nlohmann::json json = nlohmann::json::array();
  std::string table = fmt::format(
      "{:<10} {:>7} {:<{}} {:>6} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10}\n", "hardware", "chips",
      "best layout", kLayoutColumn, "MFU", "goodput", "days", "on-demand", "spot", "1y", "3y");
  std::string notes;
  std::optional<Cheapest> cheapest;
  for (const std::string& name : names) {
    const Accelerator& a = catalog.find(name);
    for (const int64_t chips : chip_counts) {
      Inputs in = base;
      in.chips = chips;
      in.workload.global_batch = query.global_batch.value_or(default_global_batch(in));
      const SearchResult found = search_layouts(in.model, a, chips, in.workload, query.rank_by);
      if (found.ranked.empty()) {
        const std::string why = no_fit_reason(in, a, found, false);
        json.push_back({{"hardware", name}, {"chips", chips}, {"fits", false}, {"why", why}});
        table += fmt::format("{:<10} {:>7} {}\n", name, chips, "no layout fits (see below)");
        notes += why + "\n";
        continue;
      }
      const Estimate& e = found.ranked.front();
      nlohmann::json j = estimate_json(e);
      j["hardware"] = name;
      j["chips"] = chips;
      json.push_back(j);
      if (auto warning = mfu_warning(e, a)) notes += *warning + "\n";
      table += fmt::format(
          "{:<10} {:>7} {:<{}} {:>5.1f}% {:>7.1f}% {:>8.1f} {:>10} {:>10} {:>10} {:>10}\n", name,
          chips, e.layout.str(), kLayoutColumn, 100 * e.mfu, 100 * e.goodput.fraction, e.days,
          price_cell(e.cost_on_demand), price_cell(e.cost_spot), price_cell(e.cost_1y),
          price_cell(e.cost_3y));
      const Cheapest row{name, chips, e.days, e.cost_on_demand.value_or(e.days * double(chips)),
                         e.cost_on_demand.has_value()};
      if (query.deadline_days && e.days <= *query.deadline_days && row.better_than(cheapest)) {
        cheapest = row;
      }
    }
  }
  if (query.json) return json.dump(2) + "\n";
  return header(base, nullptr) + table + notes + goodput_basis(base.workload.reliability) +
         prices_and_deadline(catalog, names, query.deadline_days, cheapest);
}

std::string layout_report(const Inputs& in, const Accelerator& a, const std::string& text,
                          bool json) {
  const Layout layout = parse_layout(text);
  check(layout.chips() == in.chips, "--layout: dp x tp x pp x cp = {} but --chips is {}",
        layout.chips(), in.chips);
  const Estimate e = estimate(in.model, a, layout, in.workload);
  check(e.invalid.empty(), "--layout {}: {}", layout.str(), e.invalid);
  if (json) return estimate_json(e).dump(2) + "\n";
  std::string out = header(in, &a) + layout_table({e});
  out += fmt::format(
      "memory per chip: parameters {}, gradients {}, optimizer {}, activations {} ({} usable){}\n"
      "step: compute {:.3f} s, pipeline bubble {:.3f} s, tensor parallel {:.3f} s, context "
      "parallel {:.3f} s, pipeline p2p {:.3f} s, expert all-to-all {:.3f} s, data parallel "
      "(exposed) {:.3f} s, optimizer {:.3f} s\n"
      "collectives, whole (hidden or not): data parallel {:.3f} s (all-reduce by {})\n"
      "per chip: {:.1f} TFLOP/s model, {:.1f} TFLOP/s hardware; MFU {:.1f}%, HFU {:.1f}%\n"
      "goodput {:.1f}%: a failure every {:.1f} h across the chips, a {:.1f} s checkpoint every "
      "{:.1f} min; {:.1f} days without failures\n",
      human_bytes(e.memory.params), human_bytes(e.memory.grads), human_bytes(e.memory.optimizer),
      human_bytes(e.memory.activations), human_bytes(e.usable_memory),
      e.fits ? "" : " -- DOES NOT FIT", e.time.compute, e.time.bubble, e.time.tensor_parallel,
      e.time.context_parallel, e.time.pipeline_p2p, e.time.expert_all_to_all, e.time.data_parallel,
      e.time.optimizer, e.communication.data_parallel, algorithm_name(e.data_parallel_algorithm),
      e.model_tflops_per_chip, e.hardware_tflops_per_chip, 100 * e.mfu, 100 * e.hfu,
      100 * e.goodput.fraction, e.goodput.mean_time_between_failures_s / 3600,
      e.goodput.checkpoint_s, e.goodput.interval_s / 60, e.days_failure_free);
  if (auto warning = mfu_warning(e, a)) out += *warning + "\n";
  return out + goodput_basis(in.workload.reliability);
}

std::vector<int64_t> chip_counts(const std::string& text) {
  std::vector<int64_t> counts;
  for (const std::string& count : split_commas(text)) {
    int64_t chips = 0;
    const auto [end, error] = std::from_chars(count.data(), count.data() + count.size(), chips);
    check(error == std::errc() && end == count.data() + count.size() && chips >= 1,
          "tessera plan: --chips must be at least 1 (counts separated by commas), got '{}'", text);
    counts.push_back(chips);
  }
  return counts;
}

// Serving plans: one chip count at most, the context from --seq-len.
std::string serve_report(const model::ModelConfig& model, const HardwareCatalog& catalog,
                         const std::vector<std::string>& names, const PlanQuery& query) {
  check(!query.layout && !query.deadline_days && !query.global_batch,
        "tessera plan --serve: --layout, --deadline and --global-batch plan training");
  const std::vector<int64_t> counts =
      query.chips.empty() ? std::vector<int64_t>{} : chip_counts(query.chips);
  check(counts.size() <= 1, "tessera plan --serve: give at most one --chips count, got '{}'",
        query.chips);
  ServingWorkload w = query.serving;
  w.context = query.seq_len.value_or(model.max_seq);
  if (w.prompt_tokens == 0) w.prompt_tokens = w.context / 2;
  w.precision = query.workload.precision;
  check(w.weights == model::WeightFormat::kDense || w.precision == model::Precision::kF32,
        "tessera plan --serve: --quantize {} needs --precision f32, as serve's does",
        enum_name(w.weights));
  const int64_t chips = counts.empty() ? 0 : counts.front();
  return serving_report(model, catalog, names, chips, w, query.top, query.json);
}

}  // namespace

std::string plan_report(const model::ModelConfig& model, const PlanQuery& query) {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  for (const std::string& file : query.catalogs) catalog.merge(HardwareCatalog::load(file));
  check(query.hardware.has_value() != query.compare.has_value(),
        "tessera plan: give one of --hardware NAME and --compare A,B");
  const std::vector<std::string> names =
      query.compare ? split_commas(*query.compare) : std::vector{*query.hardware};
  if (query.serve) return serve_report(model, catalog, names, query);
  const std::vector<int64_t> counts = chip_counts(query.chips);
  Inputs in{model, counts.front(), query.workload};
  in.workload.seq_len = query.seq_len.value_or(model.max_seq);
  check(in.workload.seq_len <= model.max_seq,
        "tessera plan: --seq-len must be in [1, model.max_seq = {}], got {}", model.max_seq,
        in.workload.seq_len);
  in.workload.global_batch = query.global_batch.value_or(default_global_batch(in));
  if (query.layout) {
    check(!query.compare && counts.size() == 1,
          "tessera plan: --layout evaluates one layout: give one --hardware and one --chips count");
    return layout_report(in, catalog.find(*query.hardware), *query.layout, query.json);
  }
  if (query.compare || counts.size() > 1 || query.deadline_days) {
    return frontier_report(in, catalog, names, counts, query);
  }
  return search_report(in, catalog.find(*query.hardware), query);
}

std::string calibration_report(const model::ModelConfig& model, const StepShape& step,
                               comm::Communicator& world) {
  const MachineRates rates = measure_machine(model, step, world);
  const StepPrediction p = predict_step(model, step, rates);
  std::string out = fmt::format(
      "this machine, {} threads: parameter bandwidth {:.1f} GB/s, activation bandwidth {:.1f} GB/s",
      rates.threads, rates.parameter_bandwidth / 1e9, rates.activation_bandwidth / 1e9);
  if (rates.ranks > 1) {
    out += fmt::format(", all-reduce {:.2f} GB/s over {} ranks", rates.allreduce_bandwidth / 1e9,
                       rates.ranks);
  }
  out += "\n";
  for (const auto& [shape, flops] : rates.gemm_flops) {
    out += fmt::format("  gemm {:<28} {:7.1f} GFLOP/s\n", shape.name(), flops / 1e9);
  }
  out += fmt::format("  attention forward {:.1f} GFLOP/s, backward {:.1f} GFLOP/s\n",
                     rates.attention_forward_flops / 1e9, rates.attention_backward_flops / 1e9);
  const std::string_view precision = enum_name(step.precision);
  if (step.precision != model::Precision::kF32) {
    out += fmt::format("  {} casts: narrow {:.2f} G elements/s, widen {:.2f} G elements/s\n",
                       precision, rates.narrow_rate / 1e9, rates.widen_rate / 1e9);
  }
  return out + fmt::format(
                   "predicted training step (batch {} x {}, {}): {:.3f} s = matmuls {:.3f} + "
                   "attention {:.3f} + memory-bound {:.3f} + casts {:.3f} + optimizer {:.3f} + "
                   "communication {:.3f}\n",
                   step.batch, step.seq, precision, p.total_s, p.matmul_s, p.attention_s,
                   p.memory_bound_s, p.casts_s, p.optimizer_s, p.communication_s);
}

}  // namespace tessera::plan
