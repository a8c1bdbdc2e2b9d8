#include "tessera/train/dry_run.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/model/model_layout.h"
#include "tessera/parallel/pipeline_simulator.h"
#include "tessera/parallel/pipeline_stages.h"

namespace tessera::train {

namespace {

// Elements of each canonical parameter that one model replica's layouts hold: every pipeline
// stage and tp rank, and the ep ranks' expert stacks. Each must come to the whole parameter once,
// twice for a tied embedding whose last stage keeps a copy.
class Coverage {
 public:
  explicit Coverage(const model::ModelConfig& config)
      : canonical_(model::canonical_model_layout(config)),
        tied_copy_(model_spec(config).tied_head) {}

  void add(const model::ModelLayout& layout, bool experts_only) {
    const auto& entries = layout.params.entries();
    for (const model::ParamInfo& e : entries) {
      const bool expert = (e.offset >= layout.experts_begin && e.offset < layout.adapters_begin) ||
                          e.offset >= layout.expert_adapters_begin;
      if (experts_only && !expert) continue;
      int64_t held = 0;
      for (const model::Placement::Rows& r : e.placement.rows) {
        held += r.count * e.placement.cols * (layout.sharding.tp / r.copies);
      }
      held_[e.name] += held;
    }
    if (layout.has_head && !layout.has_embedding) copied_ = true;
  }

  // `tp`: every element was counted tp / copies times by each of the tp ranks that hold it.
  void check_complete(int64_t tp) const {
    for (const model::ParamInfo& e : canonical_.params.entries()) {
      const int64_t copies = tied_copy_ && copied_ && e.name == "wte.weight" ? 2 : 1;
      const auto it = held_.find(e.name);
      const int64_t held = it == held_.end() ? 0 : it->second;
      check(held == copies * tp * e.global_shape.numel(),
            "the stages' layouts hold {} of {} elements of {} ({} expected): the split of the "
            "model over the mesh is incomplete",
            held / tp, e.global_shape.numel(), e.name, copies * e.global_shape.numel());
    }
    check(held_.size() == canonical_.params.entries().size(),
          "the stages' layouts hold {} parameters, the model {}", held_.size(),
          canonical_.params.entries().size());
  }

 private:
  model::ModelLayout canonical_;
  bool tied_copy_;
  bool copied_ = false;
  std::map<std::string, int64_t> held_;
};

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / double(1 << 30)); }

std::string count(double n) {
  if (n >= 1e12) return fmt::format("{:.2f}T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  return fmt::format("{:.0f}", n);
}

}  // namespace

DryRun dry_run(const RunConfig& run, int64_t world_size) {
  const comm::MeshShape& mesh = run.mesh;
  comm::check_mesh(mesh, world_size);
  const model::ModelConfig& config = run.model;
  DryRun plan;
  plan.mesh = mesh;
  plan.micro_batches = run.train.grad_accum;

  const std::vector<int64_t> boundaries = parallel::stage_boundaries(
      parallel::stage_blocks(config, mesh.pp * mesh.pp_virtual, mesh.pp_layers));
  parallel::PipelineSimulation simulation;
  bool split_backward = false;
  if (mesh.pp > 1) {
    const parallel::PipelineTable table =
        parallel::run_pipeline_table(config, mesh, boundaries, plan.micro_batches);
    simulation = parallel::simulate_pipeline(table);
    split_backward = table.splits_backward();
    plan.bubble = simulation.bubble;
  } else {
    simulation.peak_in_flight = {1};
    simulation.stage_peak_in_flight.assign(mesh.pp_virtual, 1);
    simulation.idle_fraction = {0};
  }

  // Every distinct stage layout (pipeline rank, tp rank, ep rank), built once and checked.
  Coverage coverage(config);
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> parameters;
  for (int64_t p = 0; p < mesh.pp; ++p) {
    for (int64_t t = 0; t < mesh.tp; ++t) {
      for (int64_t e = 0; e < mesh.ep; ++e) {
        int64_t held = 0;
        const model::Sharding sharding{.tp = mesh.tp, .tp_rank = t, .ep = mesh.ep, .ep_rank = e};
        for (const model::Sharding& stage :
             parallel::rank_stages(sharding, boundaries, mesh.pp, p)) {
          const model::ModelLayout layout = model::model_layout(config, stage);
          coverage.add(layout, e > 0);
          held += layout.params.total();
          ++plan.layouts_checked;
        }
        parameters[{p, t, e}] = held;
      }
    }
  }
  coverage.check_complete(mesh.tp);

  parallel::MemoryModel memory(config);
  const parallel::TrainingShape shape{
      int(run.train.zero), mesh.dp * mesh.cp,
      model::ActivationOptions{.max_batch = run.train.batch_size / mesh.dp,
                               .max_seq = run.train.seq_len / mesh.cp,
                               .training = true,
                               .precision = run.train.precision,
                               .recompute = run.train.recompute,
                               .sequence_parallel = mesh.sequence_parallel,
                               .batch_ranks = mesh.dp,
                               .split_backward = split_backward,
                               .document_mask = run.train.document_mask,
                               .context_ranks = mesh.cp}};
  plan.ranks.resize(world_size);
  for (int64_t rank = 0; rank < world_size; ++rank) {
    DryRunRank& r = plan.ranks[rank];
    r.rank = rank;
    r.coords = comm::mesh_coords(mesh, rank);
    const int64_t ep_rank = r.coords.dp % mesh.ep;
    const parallel::RankWork work = parallel::rank_work(
        {.tp = mesh.tp, .tp_rank = r.coords.tp, .ep = mesh.ep, .ep_rank = ep_rank}, boundaries,
        mesh.pp, r.coords.pp, simulation.stage_peak_in_flight);
    r.stages = work.stages;
    r.parameters = parameters.at({r.coords.pp, r.coords.tp, ep_rank});
    r.in_flight = simulation.peak_in_flight[r.coords.pp];
    r.idle_fraction = simulation.idle_fraction[r.coords.pp];
    r.memory = memory.rank(work, shape);
    if (r.memory.total() > plan.ranks[plan.fullest].memory.total()) plan.fullest = rank;
  }
  return plan;
}

std::string dry_run_report(const RunConfig& run, const DryRun& plan) {
  const comm::MeshShape& mesh = plan.mesh;
  const model::ParameterCount parameters = model::count_parameters(run.model);
  std::string out = fmt::format(
      "dry run: {} ranks ({}{}), {} schedule over {} micro-batches of {} x {} tokens, bubble "
      "{:.1f}%\n"
      "model: {} parameters; {} stage layouts built, each parameter held once per model "
      "replica\n",
      plan.ranks.size(), mesh.str(),
      mesh.pp_virtual > 1 ? fmt::format(", {} stages per pipeline rank", mesh.pp_virtual) : "",
      mesh.pp > 1 ? enum_name(mesh.pp_schedule) : "no pipeline", plan.micro_batches,
      run.train.batch_size / mesh.dp, run.train.seq_len, 100 * plan.bubble,
      count(double(parameters.total)), plan.layouts_checked);
  out += fmt::format("{:<8} {:>6} {:>12} {:>10} {:>11} {:>11} {:>11} {:>11} {:>9} {:>6} {:>11}\n",
                     "stage", "rank", "blocks", "parameters", "params", "grads", "optimizer",
                     "activations", "in flight", "idle", "total");
  auto row = [&](const char* name, const DryRunRank& r) {
    std::string blocks;
    for (const model::Sharding& s : r.stages) {
      const int64_t last = s.block_end - 1;
      blocks += blocks.empty() ? "" : ",";
      blocks += s.block_begin == last ? fmt::format("{}", last)
                                      : fmt::format("{}-{}", s.block_begin, last);
    }
    out += fmt::format(
        "{:<8} {:>6} {:>12} {:>10} {:>11} {:>11} {:>11} {:>11} {:>9} {:>5.1f}% {:>11}\n", name,
        r.rank, blocks, count(double(r.parameters)), gib(r.memory.params), gib(r.memory.grads),
        gib(r.memory.optimizer), gib(r.memory.activations), r.in_flight, 100 * r.idle_fraction,
        gib(r.memory.total()));
  };
  auto first_rank_of_stage = [&](int64_t p) -> const DryRunRank& {
    return plan.ranks[p * mesh.dp * mesh.cp * mesh.tp];  // rank 0 of the stage's tp, cp and dp
  };
  row("first", first_rank_of_stage(0));
  if (mesh.pp > 2) row("middle", first_rank_of_stage(mesh.pp / 2));
  if (mesh.pp > 1) row("last", first_rank_of_stage(mesh.pp - 1));
  const DryRunRank& fullest = plan.ranks[plan.fullest];
  out += fmt::format("fullest: rank {} (pipeline stage {}, tp rank {}), {}\n", fullest.rank,
                     fullest.coords.pp, fullest.coords.tp, gib(fullest.memory.total()));
  return out;
}

}  // namespace tessera::train
