#include "tessera/parallel/pipeline_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::parallel {
namespace {

using Kind = PipelineAction::Kind;

// A rank's computations in order, before the sends and receives are put around them.
using ComputeOrder = std::vector<PipelineAction>;

ComputeOrder gpipe(int rank, int micro_batches) {
  ComputeOrder order;
  for (int m = 0; m < micro_batches; ++m) order.push_back({Kind::kForward, rank, m});
  for (int m = 0; m < micro_batches; ++m) order.push_back({Kind::kBackward, rank, m});
  return order;
}

// Megatron's interleaved 1F1B (one stage per rank is plain 1F1B): the rank's k-th forward runs
// chunk (k / p) % v on micro-batch (k / (p v)) p + k % p, its backwards go through the chunks in
// reverse, and warm-up forwards fill the pipeline before one forward alternates with one backward.
ComputeOrder one_f_one_b(int rank, int ranks, int virtual_stages, int micro_batches) {
  const int p = ranks, v = virtual_stages, total = micro_batches * v;
  auto micro_batch = [&](int k) { return k / (p * v) * p + k % p; };
  auto forward = [&](int k) {
    return PipelineAction{Kind::kForward, (k / p) % v * p + rank, micro_batch(k)};
  };
  auto backward = [&](int k) {
    return PipelineAction{Kind::kBackward, (v - 1 - (k / p) % v) * p + rank, micro_batch(k)};
  };
  const int warmup =
      v == 1 ? std::min(p - rank - 1, total) : std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  ComputeOrder order;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int j = 0; j + warmup < total; ++j) {
    order.push_back(forward(warmup + j));
    order.push_back(backward(j));
  }
  for (int k = std::max(0, total - warmup); k < total; ++k) order.push_back(backward(k));
  return order;
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): the backward is split into its input
// gradient, which the previous stage waits for, and its weight gradient, which nothing waits for
// and which fills the time 1F1B spends waiting. Built by list scheduling over each stage's costs:
// whichever rank can start an action soonest takes one, a ready input gradient first, then a
// forward while fewer than p - rank micro-batches await their input gradient (1F1B's bound) and
// fewer than 2 p - 1 their weight gradient (the first rank's p and the p - 1 weight gradients it
// defers to its cool-down), then a pending weight gradient whenever nothing else can start.
// Placing actions by what they cost keeps the weight gradients where the rank would wait: a table
// laid out for equal costs leaves gaps behind a costlier forward.
std::vector<ComputeOrder> zero_bubble_h1(int ranks, int micro_batches,
                                         std::span<const PipelineCosts> costs) {
  const int p = ranks, m = micro_batches;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // Completion times per [rank][micro-batch].
  std::vector<std::vector<double>> forward_done(p, std::vector<double>(m, kNever));
  std::vector<std::vector<double>> input_done = forward_done;
  std::vector<int> forwards(p, 0), inputs(p, 0), weights(p, 0);
  std::vector<double> free_at(p, 0);
  std::vector<ComputeOrder> orders(p);
  for (int scheduled = 0; scheduled < 3 * p * m; ++scheduled) {
    // The rank that can start an action soonest, and that action.
    double soonest = kNever;
    int rank = -1;
    Kind kind = Kind::kForward;
    for (int r = 0; r < p; ++r) {
      const int f = forwards[r], b = inputs[r];
      double input_at = kNever, forward_at = kNever, weight_at = kNever;
      if (b < m && forward_done[r][b] < kNever) {
        input_at = std::max(free_at[r], r == p - 1 ? forward_done[r][b] : input_done[r + 1][b]);
      }
      if (f < m && f - b < p - r && f - weights[r] < 2 * p - 1) {
        forward_at = std::max(free_at[r], r == 0 ? 0.0 : forward_done[r - 1][f]);
      }
      if (weights[r] < b) weight_at = free_at[r];
      const double at = std::min({input_at, forward_at, weight_at});
      if (at >= soonest) continue;
      soonest = at;
      rank = r;
      kind = input_at <= at     ? Kind::kBackwardInput
             : forward_at <= at ? Kind::kForward
                                : Kind::kBackwardWeight;
    }
    check(rank >= 0, "the ZB-H1 list scheduler found no action to take");
    const PipelineCosts& c = costs[rank];
    if (kind == Kind::kBackwardInput) {
      orders[rank].push_back({kind, rank, inputs[rank]});
      free_at[rank] = input_done[rank][inputs[rank]++] = soonest + c.backward_input;
    } else if (kind == Kind::kForward) {
      orders[rank].push_back({kind, rank, forwards[rank]});
      free_at[rank] = forward_done[rank][forwards[rank]++] = soonest + c.forward;
    } else {
      orders[rank].push_back({kind, rank, weights[rank]++});
      free_at[rank] = soonest + c.backward_weight;
    }
  }
  return orders;
}

// The compute order with each receive put just before the computation that needs it and each
// send just after the computation that produced it.
std::vector<PipelineAction> with_messages(const PipelineTable& table, int rank,
                                          const ComputeOrder& order) {
  std::vector<PipelineAction> actions;
  const int last = table.stages() - 1;
  auto remote = [&](int stage) { return table.rank_of(stage) != rank; };
  for (const PipelineAction& a : order) {
    const bool forward = a.kind == Kind::kForward;
    const bool input_gradient = a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput;
    if (forward && a.stage > 0 && remote(a.stage - 1)) {
      actions.push_back({Kind::kRecvActivation, a.stage, a.micro_batch});
    }
    if (input_gradient && a.stage < last && remote(a.stage + 1)) {
      actions.push_back({Kind::kRecvGradient, a.stage, a.micro_batch});
    }
    actions.push_back(a);
    if (forward && a.stage < last && remote(a.stage + 1)) {
      actions.push_back({Kind::kSendActivation, a.stage, a.micro_batch});
    }
    if (input_gradient && a.stage > 0 && remote(a.stage - 1)) {
      actions.push_back({Kind::kSendGradient, a.stage, a.micro_batch});
    }
  }
  return actions;
}

}  // namespace

std::string to_string(const PipelineAction& a) {
  static constexpr std::array<std::string_view, 8> kNames = {"F",     "B",     "Bi",    "W",
                                                             "sendA", "recvA", "sendG", "recvG"};
  return fmt::format("{}(s{},m{})", kNames[static_cast<int>(a.kind)], a.stage, a.micro_batch);
}

PipelineTable make_pipeline_table(comm::PipelineScheduleKind kind, int ranks, int virtual_stages,
                                  int micro_batches, std::span<const PipelineCosts> stage_costs) {
  const std::string_view name = enum_name(kind);
  check(ranks >= 1, "a pipeline needs at least one rank, got mesh.pp = {}", ranks);
  check(micro_batches >= 1,
        "the {} schedule needs at least one micro-batch, got train.grad_accum = {}", name,
        micro_batches);
  if (kind == comm::PipelineScheduleKind::kInterleaved1F1B) {
    check(virtual_stages >= 2,
          "the interleaved schedule needs mesh.pp_virtual >= 2 stages per rank, got {}",
          virtual_stages);
    check(micro_batches % ranks == 0,
          "the interleaved schedule runs micro-batches in groups of mesh.pp = {}: train.grad_accum "
          "= {} must be a multiple of it",
          ranks, micro_batches);
  } else {
    check(virtual_stages == 1,
          "the {} schedule runs one stage per rank; mesh.pp_virtual = {} needs the interleaved "
          "schedule",
          name, virtual_stages);
  }
  PipelineTable table{kind, ranks, virtual_stages, micro_batches, {}};
  std::vector<ComputeOrder> orders(ranks);
  if (kind == comm::PipelineScheduleKind::kZeroBubbleH1) {
    const std::vector<PipelineCosts> alike(ranks);
    check(stage_costs.empty() || int(stage_costs.size()) == ranks,
          "ZB-H1 over {} stages was given the costs of {}", ranks, stage_costs.size());
    orders = zero_bubble_h1(ranks, micro_batches, stage_costs.empty() ? alike : stage_costs);
  } else {
    for (int r = 0; r < ranks; ++r) {
      orders[r] = kind == comm::PipelineScheduleKind::kGPipe
                      ? gpipe(r, micro_batches)
                      : one_f_one_b(r, ranks, virtual_stages, micro_batches);
    }
  }
  for (int r = 0; r < ranks; ++r) table.actions.push_back(with_messages(table, r, orders[r]));
  return table;
}

}  // namespace tessera::parallel
