#include "tessera/parallel/pipeline_simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "tessera/core/error.h"

namespace tessera::parallel {
namespace {

using Kind = PipelineAction::Kind;

std::string describe(const PipelineTable& t) {
  return fmt::format("pipeline table {} (pp={}, {} stages per rank, {} micro-batches)",
                     enum_name(t.kind), t.ranks, t.virtual_stages, t.micro_batches);
}

constexpr int kKinds = 8;

// Per (kind, stage, micro-batch) of a table: a flat array, since tables of thousands of
// micro-batches are simulated while the planner searches.
template <typename T>
class PerAction {
 public:
  PerAction(const PipelineTable& t, T initial)
      : stages_(t.stages()),
        micro_batches_(t.micro_batches),
        values_(size_t(kKinds) * stages_ * micro_batches_, initial) {}
  T& operator()(Kind k, int stage, int micro_batch) {
    return values_[(size_t(k) * stages_ + stage) * micro_batches_ + micro_batch];
  }
  T operator()(Kind k, int stage, int micro_batch) const {
    return values_[(size_t(k) * stages_ + stage) * micro_batches_ + micro_batch];
  }

 private:
  size_t stages_, micro_batches_;
  std::vector<T> values_;
};

// What the ranks have done so far (every action is its own stage's, so one array serves all).
class Done {
 public:
  explicit Done(const PipelineTable& t) : done_(t, 0) {}
  void add(const PipelineAction& a) { done_(a.kind, a.stage, a.micro_batch) = 1; }
  bool has(Kind k, int stage, int micro_batch) const { return done_(k, stage, micro_batch) != 0; }
  bool has_input_gradient(int stage, int micro_batch) const {
    return has(Kind::kBackward, stage, micro_batch) ||
           has(Kind::kBackwardInput, stage, micro_batch);
  }

 private:
  PerAction<char> done_;
};

// Why action `a` cannot run yet on `rank` after what it has done, or "" when it can (receives are
// matched against sends by the timing pass).
std::string missing_input(const PipelineTable& t, int rank, const PipelineAction& a,
                          const Done& done) {
  const int s = a.stage, m = a.micro_batch, last = t.stages() - 1;
  auto local = [&](int stage) { return t.rank_of(stage) == rank; };
  switch (a.kind) {
    case Kind::kForward:
      if (s == 0) return "";
      if (local(s - 1) ? done.has(Kind::kForward, s - 1, m) : done.has(Kind::kRecvActivation, s, m))
        return "";
      return fmt::format("its input: {} has not run on this rank",
                         local(s - 1) ? to_string({Kind::kForward, s - 1, m})
                                      : to_string({Kind::kRecvActivation, s, m}));
    case Kind::kBackward:
    case Kind::kBackwardInput:
      if (!done.has(Kind::kForward, s, m)) return "its forward has not run";
      if (s == last) return "";
      if (local(s + 1) ? done.has_input_gradient(s + 1, m) : done.has(Kind::kRecvGradient, s, m))
        return "";
      return "the gradient of its output has not arrived";
    case Kind::kBackwardWeight:
      return done.has(Kind::kBackwardInput, s, m) ? "" : "its input gradient has not run";
    case Kind::kSendActivation:
      return done.has(Kind::kForward, s, m) ? "" : "the forward it sends has not run";
    case Kind::kSendGradient:
      return done.has_input_gradient(s, m) ? "" : "the backward it sends has not run";
    case Kind::kRecvActivation:
    case Kind::kRecvGradient:
      return "";
  }
  return "";
}

// Every rank holds exactly its own stages' computations: one forward and one backward (or its
// two halves) per stage and micro-batch, and a receive for every send.
void check_complete(const PipelineTable& t) {
  const std::string where = describe(t);
  check(int(t.actions.size()) == t.ranks, "{}: has actions for {} ranks", where, t.actions.size());
  PerAction<int> count(t, 0);
  for (int r = 0; r < t.ranks; ++r) {
    for (const PipelineAction& a : t.actions[r]) {
      check(a.stage >= 0 && a.stage < t.stages() && a.micro_batch >= 0 &&
                a.micro_batch < t.micro_batches,
            "{}: rank {} has {}, outside its {} stages and {} micro-batches", where, r,
            to_string(a), t.stages(), t.micro_batches);
      check(t.rank_of(a.stage) == r, "{}: rank {} has {}, but stage {} runs on rank {}", where, r,
            to_string(a), a.stage, t.rank_of(a.stage));
      const bool to_next = a.kind == Kind::kSendActivation || a.kind == Kind::kRecvGradient;
      const bool to_previous = a.kind == Kind::kSendGradient || a.kind == Kind::kRecvActivation;
      check(!(to_next && a.stage + 1 == t.stages()) && !(to_previous && a.stage == 0),
            "{}: rank {} has {}, a message past the end of the pipeline", where, r, to_string(a));
      check(++count(a.kind, a.stage, a.micro_batch) == 1, "{}: rank {} has {} twice", where, r,
            to_string(a));
    }
  }
  auto has = [&](Kind k, int s, int m) { return count(k, s, m) > 0; };
  for (int s = 0; s < t.stages(); ++s) {
    for (int m = 0; m < t.micro_batches; ++m) {
      const int r = t.rank_of(s);
      check(has(Kind::kForward, s, m), "{}: rank {} never runs {}", where, r,
            to_string({Kind::kForward, s, m}));
      const bool whole = has(Kind::kBackward, s, m);
      const bool split = has(Kind::kBackwardInput, s, m) && has(Kind::kBackwardWeight, s, m);
      check(whole != split, "{}: rank {} must run either {} or both {} and {}", where, r,
            to_string({Kind::kBackward, s, m}), to_string({Kind::kBackwardInput, s, m}),
            to_string({Kind::kBackwardWeight, s, m}));
      if (s + 1 < t.stages() && t.rank_of(s + 1) != r) {
        check(has(Kind::kSendActivation, s, m) && has(Kind::kRecvActivation, s + 1, m),
              "{}: the output of stage {} for micro-batch {} needs {} on rank {} and {} on rank {}",
              where, s, m, to_string({Kind::kSendActivation, s, m}), r,
              to_string({Kind::kRecvActivation, s + 1, m}), t.rank_of(s + 1));
        check(has(Kind::kSendGradient, s + 1, m) && has(Kind::kRecvGradient, s, m),
              "{}: the input gradient of stage {} for micro-batch {} needs {} on rank {} and {} on "
              "rank {}",
              where, s + 1, m, to_string({Kind::kSendGradient, s + 1, m}), t.rank_of(s + 1),
              to_string({Kind::kRecvGradient, s, m}), r);
      }
    }
  }
}

}  // namespace

PipelineSimulation simulate_pipeline(const PipelineTable& t, const PipelineCosts& costs) {
  const double v = t.virtual_stages;
  const std::vector<PipelineCosts> stage_costs(
      t.stages(), {costs.forward / v, costs.backward_input / v, costs.backward_weight / v});
  return simulate_pipeline(t, std::span<const PipelineCosts>(stage_costs));
}

PipelineSimulation simulate_pipeline(const PipelineTable& t,
                                     std::span<const PipelineCosts> stage_costs) {
  check_complete(t);
  const std::string where = describe(t);
  check(int(stage_costs.size()) == t.stages(), "{}: {} stages given the costs of {}", where,
        t.stages(), stage_costs.size());
  auto duration = [&](const PipelineAction& a) {
    const PipelineCosts& costs = stage_costs[a.stage];
    switch (a.kind) {
      case Kind::kForward:
        return costs.forward;
      case Kind::kBackward:
        return costs.backward_input + costs.backward_weight;
      case Kind::kBackwardInput:
        return costs.backward_input;
      case Kind::kBackwardWeight:
        return costs.backward_weight;
      default:
        return 0.0;  // messages are free
    }
  };

  // Sends never wait (they are buffered until received); a receive waits for its send. Each rank
  // runs its list in order; a pass that moves no rank with actions left is a deadlock.
  constexpr double kUnsent = -1;
  PerAction<double> sent(t, kUnsent);  // when each send ran, by the receive that takes it
  std::vector<size_t> next(t.ranks, 0);
  std::vector<double> clock(t.ranks, 0), busy(t.ranks, 0);
  Done done(t);
  std::vector<int> held(t.ranks, 0), stage_held(t.stages(), 0);
  PipelineSimulation sim;
  sim.peak_in_flight.assign(t.ranks, 0);
  sim.stage_peak_in_flight.assign(t.stages(), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < t.ranks; ++r) {
      for (; next[r] < t.actions[r].size(); ++next[r]) {
        const PipelineAction& a = t.actions[r][next[r]];
        const std::string missing = missing_input(t, r, a, done);
        check(missing.empty(), "{}: rank {} runs {} (action {}) before {}", where, r, to_string(a),
              next[r], missing);
        if (a.kind == Kind::kRecvActivation || a.kind == Kind::kRecvGradient) {
          const double at = sent(a.kind, a.stage, a.micro_batch);
          if (at == kUnsent) break;  // waits for the send
          clock[r] = std::max(clock[r], at);
        } else if (a.kind == Kind::kSendActivation) {
          sent(Kind::kRecvActivation, a.stage + 1, a.micro_batch) = clock[r];
        } else if (a.kind == Kind::kSendGradient) {
          sent(Kind::kRecvGradient, a.stage - 1, a.micro_batch) = clock[r];
        }
        clock[r] += duration(a);
        busy[r] += duration(a);
        if (a.kind == Kind::kForward) {
          sim.peak_in_flight[r] = std::max(sim.peak_in_flight[r], ++held[r]);
          sim.stage_peak_in_flight[a.stage] =
              std::max(sim.stage_peak_in_flight[a.stage], ++stage_held[a.stage]);
        } else if (a.kind == Kind::kBackward || a.kind == Kind::kBackwardWeight) {
          --held[r];
          --stage_held[a.stage];
        }
        done.add(a);
        moved = true;
      }
    }
  }
  std::string waiting;
  for (int r = 0; r < t.ranks; ++r) {
    if (next[r] == t.actions[r].size()) continue;
    waiting += fmt::format("{}rank {} waits in {} (action {})", waiting.empty() ? "" : ", ", r,
                           to_string(t.actions[r][next[r]]), next[r]);
  }
  check(waiting.empty(), "{}: deadlock: {}, and no rank can go on", where, waiting);

  sim.makespan = *std::max_element(clock.begin(), clock.end());
  sim.ideal = *std::max_element(busy.begin(), busy.end());
  sim.bubble = sim.makespan / sim.ideal - 1;
  for (int r = 0; r < t.ranks; ++r) {
    sim.idle_fraction.push_back(sim.makespan > 0 ? 1 - busy[r] / sim.makespan : 0);
  }
  return sim;
}

}  // namespace tessera::parallel
