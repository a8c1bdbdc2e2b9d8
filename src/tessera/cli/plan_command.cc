#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/cli/flags.h"
#include "tessera/comm/world.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/core/split_commas.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/model/model_layout.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/report.h"
#include "tessera/plan/search.h"
#include "tessera/train/hf_run.h"
#include "tessera/train/run_config.h"

namespace tessera::cli {

namespace {

struct PlanInputs {
  model::ModelConfig model;
  train::TrainConfig train;
  int64_t chips = 0;
  plan::Workload workload;
};

std::string model_summary(const model::ModelConfig& m);

// The smallest multiple of the chips that is at least `sequences`.
int64_t multiple_of_chips(int64_t sequences, const PlanInputs& in) {
  return (sequences + in.chips - 1) / in.chips * in.chips;
}

// About 4M tokens per step, rounded up to a multiple of the chips.
int64_t default_global_batch(const PlanInputs& in) {
  return multiple_of_chips(int64_t(std::ceil(4.0 * (1 << 20) / double(in.workload.seq_len))), in);
}

// What is being planned, printed above a table once the plan has succeeded.
void print_header(const PlanInputs& in, const plan::Accelerator* a) {
  std::printf("model: %s, %lld x %lld tokens per step, %s tokens to train\n",
              model_summary(in.model).c_str(), static_cast<long long>(in.workload.global_batch),
              static_cast<long long>(in.workload.seq_len),
              plan::human_count(in.workload.tokens).c_str());
  if (a == nullptr) return;
  std::printf("hardware: %lld x %s (%s): %.0f TFLOP/s bf16, %s HBM\n",
              static_cast<long long>(in.chips), a->name.c_str(), a->description.c_str(),
              a->peak_bf16_flops / 1e12, plan::human_bytes(a->hbm_bytes).c_str());
}

std::string model_summary(const model::ModelConfig& m) {
  const model::ParameterCount n = model::count_parameters(m);
  std::string s = fmt::format("{} parameters ({} layers, d_model {}, {} heads)",
                              plan::human_count(double(n.total)), m.n_layer, m.d_model, m.n_head);
  if (m.is_moe()) s += fmt::format(", {} active", plan::human_count(double(n.active)));
  return s;
}

// Why no layout of the chips fits; with `suggest`, the smallest chip count that does (a search).
std::string no_fit_reason(const PlanInputs& in, const plan::Accelerator& a,
                          const plan::SearchResult& found, bool suggest) {
  std::string why;
  if (found.smallest_misfit) {
    why = fmt::format(
        "no layout of {} {} chips fits {}: the leanest ({}) needs {} per chip, {} usable", in.chips,
        a.name, model_summary(in.model), found.smallest_misfit->layout.str(),
        plan::human_bytes(found.smallest_misfit->memory.total()),
        plan::human_bytes(found.smallest_misfit->usable_memory));
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
  const std::optional<int64_t> smallest = plan::smallest_feasible_chips(in.model, a, in.workload);
  why += smallest
             ? fmt::format("; with this batch the smallest feasible count is {} chips", *smallest)
             : std::string("; with this batch it fits on no count up to 2^20 chips");
  return why;
}

// The failure model behind the goodput column, said once under a table.
void print_goodput_basis(const plan::Reliability& r) {
  std::printf(
      "goodput: %.3g failures per chip-hour (default: Llama 3's 419 unexpected interruptions in 54 "
      "days on 16,384 GPUs), %.0f min per restart, checkpoints written at %.3g GB/s per chip "
      "(default: Llama 3's 2 TB/s storage over 16,384 GPUs) at the Young-Daly interval; days and "
      "cost include it\n",
      r.failures_per_chip_hour, r.restart_s / 60, r.checkpoint_bytes_per_s_per_chip / 1e9);
}

int run_search(const PlanInputs& in, const plan::Accelerator& a, plan::RankBy rank_by, int64_t top,
               bool json) {
  const plan::SearchResult found =
      plan::search_layouts(in.model, a, in.chips, in.workload, rank_by);
  if (found.ranked.empty()) fail("{}", no_fit_reason(in, a, found, true));
  const size_t shown = std::min<size_t>(size_t(top), found.ranked.size());
  const std::vector<plan::Estimate> best(found.ranked.begin(), found.ranked.begin() + shown);
  if (json) {
    nlohmann::json out = {{"hardware", a.name},
                          {"chips", in.chips},
                          {"evaluated", found.evaluated},
                          {"too_big", found.too_big},
                          {"layouts", nlohmann::json::array()}};
    for (const plan::Estimate& e : best) out["layouts"].push_back(plan::estimate_json(e));
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  print_header(in, &a);
  std::printf("%s layouts of %lld chips evaluated: %lld fit, %lld exceed %s usable of HBM\n",
              plan::human_count(double(found.evaluated)).c_str(), static_cast<long long>(in.chips),
              static_cast<long long>(found.evaluated - found.too_big),
              static_cast<long long>(found.too_big),
              plan::human_bytes(found.ranked.front().usable_memory).c_str());
  std::printf("%s", plan::layout_table(best).c_str());
  if (auto warning = plan::mfu_warning(best.front(), a)) std::printf("%s\n", warning->c_str());
  print_goodput_basis(in.workload.reliability);
  return 0;
}

std::string price_cell(const std::optional<double>& usd) {
  return usd ? plan::human_dollars(*usd) : "-";
}

// The best layout of each accelerator at each chip count: days and cost at every published price,
// failures included, and with a deadline the cheapest row that meets it.
int run_frontier(const PlanInputs& base, const plan::HardwareCatalog& catalog,
                 const std::vector<std::string>& names, const std::vector<int64_t>& chip_counts,
                 const std::optional<int64_t>& global_batch, plan::RankBy rank_by, bool json,
                 std::optional<double> deadline_days) {
  nlohmann::json out = nlohmann::json::array();
  std::string table =
      fmt::format("{:<10} {:>7} {:<{}} {:>6} {:>8} {:>8} {:>10} {:>10} {:>10} {:>10}\n", "hardware",
                  "chips", "best layout", plan::kLayoutColumn, "MFU", "goodput", "days",
                  "on-demand", "spot", "1y", "3y");
  std::string notes;
  struct Best {
    std::string name;
    int64_t chips = 0;
    double days = 0, cost = 0;
    bool priced = false;
  };
  std::optional<Best> cheapest_in_time;
  for (const std::string& name : names) {
    const plan::Accelerator& a = catalog.find(name);
    for (const int64_t chips : chip_counts) {
      PlanInputs in = base;
      in.chips = chips;
      in.workload.global_batch = global_batch.value_or(default_global_batch(in));
      const plan::SearchResult found =
          plan::search_layouts(in.model, a, in.chips, in.workload, rank_by);
      if (found.ranked.empty()) {
        const std::string why = no_fit_reason(in, a, found, false);
        out.push_back({{"hardware", name}, {"chips", chips}, {"fits", false}, {"why", why}});
        table += fmt::format("{:<10} {:>7} {}\n", name, chips, "no layout fits (see below)");
        notes += why + "\n";
        continue;
      }
      const plan::Estimate& e = found.ranked.front();
      nlohmann::json j = plan::estimate_json(e);
      j["hardware"] = name;
      j["chips"] = chips;
      out.push_back(j);
      if (auto warning = plan::mfu_warning(e, a)) notes += *warning + "\n";
      table += fmt::format(
          "{:<10} {:>7} {:<{}} {:>5.1f}% {:>7.1f}% {:>8.1f} {:>10} {:>10} {:>10} {:>10}\n", name,
          chips, e.layout.str(), plan::kLayoutColumn, 100 * e.mfu, 100 * e.goodput.fraction, e.days,
          price_cell(e.cost_on_demand), price_cell(e.cost_spot), price_cell(e.cost_1y),
          price_cell(e.cost_3y));
      if (deadline_days && e.days <= *deadline_days) {
        const Best row{name, chips, e.days, e.cost_on_demand.value_or(e.days * double(chips)),
                       e.cost_on_demand.has_value()};
        if (!cheapest_in_time || (row.priced && !cheapest_in_time->priced) ||
            (row.priced == cheapest_in_time->priced && row.cost < cheapest_in_time->cost)) {
          cheapest_in_time = row;
        }
      }
    }
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  print_header(base, nullptr);
  std::printf("%s", table.c_str());
  if (!notes.empty()) std::printf("%s", notes.c_str());
  print_goodput_basis(base.workload.reliability);
  for (const std::string& name : names) {
    const plan::Prices& p = catalog.find(name).prices;
    if (p.on_demand || p.spot || p.committed_1y || p.committed_3y) {
      std::printf("prices of %s (USD per chip-hour, %s): %s\n", name.c_str(), p.date.c_str(),
                  p.source.c_str());
    } else {
      std::printf("prices of %s: none published in the catalog (add them with --catalog)\n",
                  name.c_str());
    }
  }
  if (deadline_days) {
    if (cheapest_in_time) {
      std::printf("cheapest within %.1f days at on-demand prices: %lld x %s, %.1f days, %s\n",
                  *deadline_days, static_cast<long long>(cheapest_in_time->chips),
                  cheapest_in_time->name.c_str(), cheapest_in_time->days,
                  cheapest_in_time->priced ? plan::human_dollars(cheapest_in_time->cost).c_str()
                                           : "no published price");
    } else {
      std::printf("none of these finishes within %.1f days: try more chips\n", *deadline_days);
    }
  }
  return 0;
}

int run_layout(const PlanInputs& in, const plan::Accelerator& a, const std::string& text,
               bool json) {
  const plan::Layout layout = plan::parse_layout(text);
  check(layout.chips() == in.chips, "--layout: dp x tp x pp x cp = {} but --chips is {}",
        layout.chips(), in.chips);
  const plan::Estimate e = plan::estimate(in.model, a, layout, in.workload);
  check(e.invalid.empty(), "--layout {}: {}", layout.str(), e.invalid);
  if (json) {
    std::printf("%s\n", plan::estimate_json(e).dump(2).c_str());
    return 0;
  }
  print_header(in, &a);
  std::printf("%s", plan::layout_table({e}).c_str());
  std::printf(
      "memory per chip: parameters %s, gradients %s, optimizer %s, activations %s (%s usable)%s\n"
      "step: compute %.3f s, pipeline bubble %.3f s, tensor parallel %.3f s, context parallel "
      "%.3f s, pipeline p2p %.3f s, expert all-to-all %.3f s, data parallel (exposed) %.3f s, "
      "optimizer %.3f s\n"
      "collectives, whole (hidden or not): data parallel %.3f s (all-reduce by %s)\n"
      "per chip: %.1f TFLOP/s model, %.1f TFLOP/s hardware; MFU %.1f%%, HFU %.1f%%\n"
      "goodput %.1f%%: a failure every %.1f h across the chips, a %.1f s checkpoint every %.1f "
      "min; %.1f days without failures\n",
      plan::human_bytes(e.memory.params).c_str(), plan::human_bytes(e.memory.grads).c_str(),
      plan::human_bytes(e.memory.optimizer).c_str(),
      plan::human_bytes(e.memory.activations).c_str(), plan::human_bytes(e.usable_memory).c_str(),
      e.fits ? "" : " -- DOES NOT FIT", e.time.compute, e.time.bubble, e.time.tensor_parallel,
      e.time.context_parallel, e.time.pipeline_p2p, e.time.expert_all_to_all, e.time.data_parallel,
      e.time.optimizer, e.communication.data_parallel,
      plan::algorithm_name(e.data_parallel_algorithm), e.model_tflops_per_chip,
      e.hardware_tflops_per_chip, 100 * e.mfu, 100 * e.hfu, 100 * e.goodput.fraction,
      e.goodput.mean_time_between_failures_s / 3600, e.goodput.checkpoint_s,
      e.goodput.interval_s / 60, e.days_failure_free);
  if (auto warning = plan::mfu_warning(e, a)) std::printf("%s\n", warning->c_str());
  print_goodput_basis(in.workload.reliability);
  return 0;
}

// Under mpirun every rank measures (the all-reduce needs them all); rank 0 reports.
int run_calibrate(const PlanInputs& in, int64_t data_parallel) {
  comm::Communicator& world = comm::world();
  check(in.train.batch_size % data_parallel == 0,
        "train.batch_size ({}) must be divisible by mesh.dp ({})", in.train.batch_size,
        data_parallel);
  const plan::StepShape step{in.train.batch_size / data_parallel, in.train.seq_len,
                             in.train.recompute, in.train.precision};
  const plan::MachineRates rates = plan::measure_machine(in.model, step, world);
  const plan::StepPrediction p = plan::predict_step(in.model, step, rates);
  if (world.rank() != 0) return 0;
  std::printf(
      "this machine, %d threads: parameter bandwidth %.1f GB/s, activation bandwidth %.1f GB/s",
      rates.threads, rates.parameter_bandwidth / 1e9, rates.activation_bandwidth / 1e9);
  if (rates.ranks > 1) {
    std::printf(", all-reduce %.2f GB/s over %d ranks", rates.allreduce_bandwidth / 1e9,
                rates.ranks);
  }
  std::printf("\n");
  for (const auto& [shape, flops] : rates.gemm_flops) {
    std::printf("  gemm %-28s %7.1f GFLOP/s\n", shape.name().c_str(), flops / 1e9);
  }
  std::printf("  attention forward %.1f GFLOP/s, backward %.1f GFLOP/s\n",
              rates.attention_forward_flops / 1e9, rates.attention_backward_flops / 1e9);
  const std::string precision(model::precision_name(step.precision));
  if (step.precision != model::Precision::kF32) {
    std::printf("  %s casts: narrow %.2f G elements/s, widen %.2f G elements/s\n",
                precision.c_str(), rates.narrow_rate / 1e9, rates.widen_rate / 1e9);
  }
  std::printf(
      "predicted training step (batch %lld x %lld, %s): %.3f s = matmuls %.3f + attention %.3f "
      "+ memory-bound %.3f + casts %.3f + optimizer %.3f + communication %.3f\n",
      static_cast<long long>(step.batch), static_cast<long long>(step.seq), precision.c_str(),
      p.total_s, p.matmul_s, p.attention_s, p.memory_bound_s, p.casts_s, p.optimizer_s,
      p.communication_s);
  return 0;
}

}  // namespace

int plan_command(int argc, char** argv) {
  Flags flags(
      "plan",
      {{"model", "FILE|HF_DIR",
        "model config (TOML; its [model] section is used), or a Hugging Face model folder's "
        "config.json (required)"},
       {"set", "KEY=VALUE", "override a config key, e.g. --set model.n_layer=96", true},
       {"hardware", "NAME", "accelerator from the catalog, e.g. h100, tpu-v5p"},
       {"chips", "N[,N...]",
        "number of chips; several counts print the best layout of each (days and cost frontier)"},
       {"tokens", "N", "tokens to train, e.g. 450e9 (default 1e12)"},
       {"seq-len", "N", "sequence length (default model.max_seq)"},
       {"global-batch", "N",
        "sequences per optimizer step (default: about 4M tokens, rounded up to a multiple of "
        "--chips)"},
       {"layout", "L", "evaluate one layout: dp=,tp=,pp=,ep=,zero=,mb=,recompute=,vpp=,sp=,cp="},
       {"precision", "P", "f32, bf16 or f16: parameters, gradients and activations (default bf16)"},
       {"unfused-attention", "",
        "attention writes its scores to HBM, as Megatron-LM did before flash attention (default: "
        "fused, as the engine)"},
       {"overlapped-sharding", "",
        "ZeRO 2/3 collectives overlap the step's compute, as PyTorch FSDP's and XLA's do (default: "
        "they do not, as in the engine)"},
       {"bf16-activations", "",
        "blocks keep what their backward reads in bf16/f16, as Megatron-LM, MaxText and PyTorch "
        "do (default: in f32, the engine's own memory)"},
       {"gather-per-tensor", "",
        "ZeRO 3 gathers each tensor with its own collective and again for a recomputed forward, as "
        "DeepSpeed's ZeRO-3 of 2021 (default: a block at a time, as the engine and FSDP)"},
       {"compare", "A,B", "best layout on each accelerator, side by side, at each --chips count"},
       {"deadline", "DAYS", "also name the cheapest accelerator and count that trains in time"},
       {"failures-per-chip-hour", "R",
        "expected failures per chip-hour for goodput (default 1.97e-5, Llama 3's)"},
       {"restart-minutes", "M", "minutes from a failure to training again (default 10)"},
       {"checkpoint-gbps", "G",
        "checkpoint write rate per chip, GB/s (default 0.122, Llama 3's storage)"},
       {"rank-by", "time|cost", "order of the search's table (default time)"},
       {"top", "K", "layouts to show (default 10)"},
       {"catalog", "FILE", "extra accelerators or prices (TOML), merged over the built-in", true},
       {"json", "", "print JSON instead of a table"},
       {"calibrate", "", "measure this machine and predict Tessera's own step for the config"}},
      argc, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Plan a training run: memory, step time, MFU, days and cost of parallel "
                         "layouts on an accelerator.")
                   .c_str(),
               stdout);
    return 0;
  }
  const std::optional<std::string> model_file = flags.get("model");
  check(model_file.has_value(), "tessera plan: --model FILE|HF_DIR is required");
  Config config(train::run_config_schema());
  if (interop::is_hf_model_folder(*model_file)) {
    config = train::hf_run_config(interop::read_hf_model_config(*model_file), "byte");
  } else {
    config.load_file(*model_file);
  }
  for (const std::string& assignment : flags.all("set")) config.set_override(assignment);
  const train::RunConfig rc = train::run_config_from(config);
  PlanInputs in{rc.model, rc.train, 0, {}};
  if (flags.has("calibrate")) return run_calibrate(in, rc.mesh.dp);

  plan::HardwareCatalog catalog = plan::HardwareCatalog::builtin();
  for (const std::string& file : flags.all("catalog")) {
    catalog.merge(plan::HardwareCatalog::load(file));
  }
  std::vector<int64_t> chip_counts;
  for (const std::string& count : split_commas(flags.get_or("chips", ""))) {
    int64_t chips = 0;
    const auto [end, error] = std::from_chars(count.data(), count.data() + count.size(), chips);
    check(error == std::errc() && end == count.data() + count.size() && chips >= 1,
          "tessera plan: --chips must be at least 1 (counts separated by commas), got '{}'",
          flags.get_or("chips", ""));
    chip_counts.push_back(chips);
  }
  in.chips = chip_counts.front();
  in.workload.seq_len = flags.get_int("seq-len", rc.model.max_seq);
  check(in.workload.seq_len >= 1 && in.workload.seq_len <= rc.model.max_seq,
        "tessera plan: --seq-len must be in [1, model.max_seq = {}], got {}", rc.model.max_seq,
        in.workload.seq_len);
  std::optional<int64_t> global_batch;
  if (flags.has("global-batch")) {
    global_batch = flags.get_int("global-batch", 0);
    check(*global_batch >= 1, "tessera plan: --global-batch must be at least 1, got {}",
          *global_batch);
  }
  in.workload.global_batch = global_batch.value_or(default_global_batch(in));
  in.workload.tokens = flags.get_double("tokens", 1e12);
  check(in.workload.tokens > 0, "tessera plan: --tokens must be positive, got {}",
        in.workload.tokens);
  const std::string precision = flags.get_or("precision", "bf16");
  try {
    in.workload.precision = model::precision_from_name(precision);
  } catch (const Error& e) {
    fail("tessera plan: --precision: {}", e.what());
  }
  const std::string rank_name = flags.get_or("rank-by", "time");
  check(rank_name == "time" || rank_name == "cost",
        "tessera plan: --rank-by must be time or cost, got '{}'", rank_name);
  const plan::RankBy rank_by = rank_name == "cost" ? plan::RankBy::kCost : plan::RankBy::kTime;
  plan::Reliability& reliability = in.workload.reliability;
  reliability.failures_per_chip_hour =
      flags.get_double("failures-per-chip-hour", reliability.failures_per_chip_hour);
  check(reliability.failures_per_chip_hour >= 0,
        "tessera plan: --failures-per-chip-hour must not be negative, got {}",
        reliability.failures_per_chip_hour);
  reliability.restart_s = 60 * flags.get_double("restart-minutes", reliability.restart_s / 60);
  check(reliability.restart_s >= 0, "tessera plan: --restart-minutes must not be negative");
  reliability.checkpoint_bytes_per_s_per_chip =
      1e9 * flags.get_double("checkpoint-gbps", reliability.checkpoint_bytes_per_s_per_chip / 1e9);
  check(reliability.checkpoint_bytes_per_s_per_chip > 0,
        "tessera plan: --checkpoint-gbps must be positive");
  std::optional<double> deadline;
  if (flags.has("deadline")) {
    deadline = flags.get_double("deadline", 0);
    check(*deadline > 0, "tessera plan: --deadline must be a positive number of days");
  }
  in.workload.flash_attention = !flags.has("unfused-attention");
  in.workload.overlapped_sharding = flags.has("overlapped-sharding");
  in.workload.gather_per_tensor = flags.has("gather-per-tensor");
  in.workload.bf16_activations = flags.has("bf16-activations");
  const bool json = flags.has("json");
  const int64_t top = flags.get_int("top", 10);
  check(top >= 1, "tessera plan: --top must be at least 1, got {}", top);

  const std::optional<std::string> hardware = flags.get("hardware");
  const std::optional<std::string> compared = flags.get("compare");
  check(hardware.has_value() != compared.has_value(),
        "tessera plan: give one of --hardware NAME and --compare A,B");
  const std::vector<std::string> names =
      compared ? split_commas(*compared) : std::vector{*hardware};
  if (auto layout = flags.get("layout")) {
    check(!compared && chip_counts.size() == 1,
          "tessera plan: --layout evaluates one layout: give one --hardware and one --chips count");
    return run_layout(in, catalog.find(*hardware), *layout, json);
  }
  if (compared || chip_counts.size() > 1 || deadline) {
    return run_frontier(in, catalog, names, chip_counts, global_batch, rank_by, json, deadline);
  }
  return run_search(in, catalog.find(*hardware), rank_by, top, json);
}

}  // namespace tessera::cli
