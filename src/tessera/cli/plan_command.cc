#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/ckpt/hf_convert.h"
#include "tessera/cli/flags.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/dist/launch.h"
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

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

std::string model_summary(const model::ModelConfig& m);

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

void explain_no_fit(const PlanInputs& in, const plan::Accelerator& a,
                    const plan::SearchResult& found) {
  std::string why =
      fmt::format("no layout of {} {} chips fits {}", in.chips, a.name, model_summary(in.model));
  if (found.smallest_misfit) {
    why += fmt::format(": the leanest ({}) needs {} per chip, {} usable",
                       found.smallest_misfit->layout.str(),
                       plan::human_bytes(found.smallest_misfit->memory.total()),
                       plan::human_bytes(found.smallest_misfit->usable_memory));
  } else {
    why += ": no layout divides the model and the global batch";
  }
  const std::optional<int64_t> smallest = plan::smallest_feasible_chips(in.model, a, in.workload);
  why += smallest ? fmt::format("; the smallest feasible count is {} chips", *smallest)
                  : std::string("; it fits on no count up to 2^20 chips");
  fail("{}", why);
}

int run_search(const PlanInputs& in, const plan::Accelerator& a, plan::RankBy rank_by, int64_t top,
               bool json) {
  const plan::SearchResult found =
      plan::search_layouts(in.model, a, in.chips, in.workload, rank_by);
  if (found.ranked.empty()) explain_no_fit(in, a, found);
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
  return 0;
}

int run_compare(const PlanInputs& in, const plan::HardwareCatalog& catalog,
                const std::vector<std::string>& names, plan::RankBy rank_by, bool json) {
  nlohmann::json out = nlohmann::json::array();
  std::string table =
      fmt::format("{:<10} {:<66} {:>6} {:>10} {:>9} {:>11} {:>14}\n", "hardware", "best layout",
                  "MFU", "tokens/s", "days", "on-demand", "$ per 1M tok");
  for (const std::string& name : names) {
    const plan::Accelerator& a = catalog.find(name);
    const plan::SearchResult found =
        plan::search_layouts(in.model, a, in.chips, in.workload, rank_by);
    if (found.ranked.empty()) explain_no_fit(in, a, found);
    const plan::Estimate& e = found.ranked.front();
    nlohmann::json j = plan::estimate_json(e);
    j["hardware"] = name;
    j["usd_per_million_tokens_on_demand"] = nullptr;
    std::string per_million = "-";
    if (e.cost_on_demand) {
      const double usd = *e.cost_on_demand / in.workload.tokens * 1e6;
      j["usd_per_million_tokens_on_demand"] = usd;
      per_million = fmt::format("${:.3f}", usd);
    }
    out.push_back(j);
    table +=
        fmt::format("{:<10} {:<66} {:>5.1f}% {:>10} {:>9.1f} {:>11} {:>14}\n", name, e.layout.str(),
                    100 * e.mfu, plan::human_count(e.tokens_per_s), e.days,
                    e.cost_on_demand ? plan::human_dollars(*e.cost_on_demand) : "-", per_million);
  }
  if (!json) print_header(in, nullptr);
  std::printf("%s", json ? (out.dump(2) + "\n").c_str() : table.c_str());
  return 0;
}

int run_layout(const PlanInputs& in, const plan::Accelerator& a, const std::string& text,
               bool json) {
  const plan::Layout layout = plan::parse_layout(text);
  check(layout.chips() == in.chips, "--layout: dp x tp x pp = {} but --chips is {}", layout.chips(),
        in.chips);
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
      "step: compute %.3f s, pipeline bubble %.3f s, tensor parallel %.3f s, pipeline p2p %.3f "
      "s, expert all-to-all %.3f s, data parallel (exposed) %.3f s, optimizer %.3f s\n"
      "per chip: %.1f TFLOP/s model, %.1f TFLOP/s hardware; MFU %.1f%%, HFU %.1f%%\n",
      plan::human_bytes(e.memory.params).c_str(), plan::human_bytes(e.memory.grads).c_str(),
      plan::human_bytes(e.memory.optimizer).c_str(),
      plan::human_bytes(e.memory.activations).c_str(), plan::human_bytes(e.usable_memory).c_str(),
      e.fits ? "" : " -- DOES NOT FIT", e.time.compute, e.time.bubble, e.time.tensor_parallel,
      e.time.pipeline_p2p, e.time.expert_all_to_all, e.time.data_parallel, e.time.optimizer,
      e.model_tflops_per_chip, e.hardware_tflops_per_chip, 100 * e.mfu, 100 * e.hfu);
  return 0;
}

// Under mpirun every rank measures (the all-reduce needs them all); rank 0 reports.
int run_calibrate(const PlanInputs& in, int64_t data_parallel) {
  dist::Communicator& world = dist::world();
  check(in.train.batch_size % data_parallel == 0,
        "train.batch_size ({}) must be divisible by mesh.dp ({})", in.train.batch_size,
        data_parallel);
  const plan::StepShape step{in.train.batch_size / data_parallel, in.train.seq_len,
                             in.train.recompute};
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
  std::printf(
      "predicted training step (batch %lld x %lld, f32): %.3f s = matmuls %.3f + attention %.3f "
      "+ memory-bound %.3f + optimizer %.3f + communication %.3f\n",
      static_cast<long long>(step.batch), static_cast<long long>(step.seq), p.total_s, p.matmul_s,
      p.attention_s, p.memory_bound_s, p.optimizer_s, p.communication_s);
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
       {"chips", "N", "number of chips"},
       {"tokens", "N", "tokens to train, e.g. 450e9 (default 1e12)"},
       {"seq-len", "N", "sequence length (default model.max_seq)"},
       {"global-batch", "N",
        "sequences per optimizer step (default: about 4M tokens, rounded up to a multiple of "
        "--chips)"},
       {"layout", "L", "evaluate one layout: dp=,tp=,pp=,ep=,zero=,mb=,recompute=,vpp=,sp="},
       {"precision", "P", "f32, bf16 or f16: parameters, gradients and activations (default bf16)"},
       {"compare", "A,B", "best layout on each accelerator, side by side"},
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
  if (ckpt::is_hf_model_folder(*model_file)) {
    config = train::hf_run_config(ckpt::read_hf_model_config(*model_file), "byte");
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
  in.chips = flags.get_int("chips", 0);
  check(in.chips >= 1, "tessera plan: --chips must be at least 1, got {}", in.chips);
  in.workload.seq_len = flags.get_int("seq-len", rc.model.max_seq);
  check(in.workload.seq_len >= 1 && in.workload.seq_len <= rc.model.max_seq,
        "tessera plan: --seq-len must be in [1, model.max_seq = {}], got {}", rc.model.max_seq,
        in.workload.seq_len);
  const int64_t default_batch =
      (int64_t(std::ceil(4.0 * (1 << 20) / double(in.workload.seq_len))) + in.chips - 1) /
      in.chips * in.chips;
  in.workload.global_batch = flags.get_int("global-batch", default_batch);
  check(in.workload.global_batch >= 1, "tessera plan: --global-batch must be at least 1, got {}",
        in.workload.global_batch);
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
  const bool json = flags.has("json");
  const int64_t top = flags.get_int("top", 10);
  check(top >= 1, "tessera plan: --top must be at least 1, got {}", top);

  if (auto names = flags.get("compare")) {
    return run_compare(in, catalog, split_commas(*names), rank_by, json);
  }
  const std::optional<std::string> hardware = flags.get("hardware");
  check(hardware.has_value(), "tessera plan: --hardware NAME (or --compare A,B) is required");
  const plan::Accelerator& a = catalog.find(*hardware);
  if (auto layout = flags.get("layout")) return run_layout(in, a, *layout, json);
  return run_search(in, a, rank_by, top, json);
}

}  // namespace tessera::cli
