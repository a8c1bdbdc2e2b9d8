#include "tessera/dist/pipeline_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::dist {
namespace {

using Kind = PipelineAction::Kind;

constexpr std::array<std::pair<std::string_view, PipelineScheduleKind>, 4> kScheduleNames = {{
    {"gpipe", PipelineScheduleKind::kGPipe},
    {"1f1b", PipelineScheduleKind::k1F1B},
    {"interleaved", PipelineScheduleKind::kInterleaved1F1B},
    {"zb-h1", PipelineScheduleKind::kZeroBubbleH1},
}};

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
// and which fills the time 1F1B spends waiting. Built by list scheduling with forward, input- and
// weight-gradient taking one unit of time each: a free rank runs a ready input gradient first,
// then a forward while fewer than p - rank micro-batches await their input gradient (1F1B's
// bound) and fewer than 2 p - 1 their weight gradient (the first rank's p and the p - 1 weight
// gradients it defers to its cool-down), then a pending weight gradient.
std::vector<ComputeOrder> zero_bubble_h1(int ranks, int micro_batches) {
  const int p = ranks, m = micro_batches;
  constexpr int kNever = -1;
  // Completion times per [rank][micro-batch].
  std::vector<std::vector<int>> forward_done(p, std::vector<int>(m, kNever));
  std::vector<std::vector<int>> input_done = forward_done;
  std::vector<int> forwards(p, 0), inputs(p, 0), weights(p, 0), busy_until(p, 0);
  std::vector<ComputeOrder> orders(p);
  auto done_by = [](int at, int t) { return at != kNever && at <= t; };
  for (int t = 0; std::any_of(weights.begin(), weights.end(), [&](int w) { return w < m; }); ++t) {
    for (int r = 0; r < p; ++r) {
      if (busy_until[r] > t) continue;
      const int f = forwards[r], b = inputs[r];
      const bool input_ready = b < m && done_by(forward_done[r][b], t) &&
                               (r == p - 1 || done_by(input_done[r + 1][b], t));
      const bool forward_ready = f < m && f - b < p - r && f - weights[r] < 2 * p - 1 &&
                                 (r == 0 || done_by(forward_done[r - 1][f], t));
      if (input_ready) {
        orders[r].push_back({Kind::kBackwardInput, r, b});
        input_done[r][b] = t + 1;
        ++inputs[r];
      } else if (forward_ready) {
        orders[r].push_back({Kind::kForward, r, f});
        forward_done[r][f] = t + 1;
        ++forwards[r];
      } else if (weights[r] < inputs[r] && done_by(input_done[r][weights[r]], t)) {
        orders[r].push_back({Kind::kBackwardWeight, r, weights[r]});
        ++weights[r];
      } else {
        continue;
      }
      busy_until[r] = t + 1;
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

PipelineScheduleKind parse_pipeline_schedule(std::string_view name) {
  for (const auto& [n, kind] : kScheduleNames) {
    if (n == name) return kind;
  }
  fail(
      "mesh.pp_schedule = '{}' is not a pipeline schedule; choose gpipe, 1f1b, interleaved or "
      "zb-h1",
      name);
}

std::string_view pipeline_schedule_name(PipelineScheduleKind kind) {
  for (const auto& [n, k] : kScheduleNames) {
    if (k == kind) return n;
  }
  return "?";
}

std::string to_string(const PipelineAction& a) {
  static constexpr std::array<std::string_view, 8> kNames = {"F",     "B",     "Bi",    "W",
                                                             "sendA", "recvA", "sendG", "recvG"};
  return fmt::format("{}(s{},m{})", kNames[static_cast<int>(a.kind)], a.stage, a.micro_batch);
}

PipelineTable make_pipeline_table(PipelineScheduleKind kind, int ranks, int virtual_stages,
                                  int micro_batches) {
  const std::string_view name = pipeline_schedule_name(kind);
  check(ranks >= 1, "a pipeline needs at least one rank, got mesh.pp = {}", ranks);
  check(micro_batches >= 1,
        "the {} schedule needs at least one micro-batch, got train.grad_accum = {}", name,
        micro_batches);
  if (kind == PipelineScheduleKind::kInterleaved1F1B) {
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
  if (kind == PipelineScheduleKind::kZeroBubbleH1) {
    orders = zero_bubble_h1(ranks, micro_batches);
  } else {
    for (int r = 0; r < ranks; ++r) {
      orders[r] = kind == PipelineScheduleKind::kGPipe
                      ? gpipe(r, micro_batches)
                      : one_f_one_b(r, ranks, virtual_stages, micro_batches);
    }
  }
  for (int r = 0; r < ranks; ++r) table.actions.push_back(with_messages(table, r, orders[r]));
  return table;
}

}  // namespace tessera::dist
