// Pipeline schedules measured against their simulation: under mpirun, every rank runs its
// stage of a GPT for each schedule (GPipe, 1F1B, interleaved 1F1B with two stages per rank, ZB-H1
// with its backwards split into input and weight gradients) through runtime::PipelineRuntime, and
// reports the share of each step it spent outside its forwards and backwards (messages and
// waiting) next to the idle share the simulator predicts from the same run's measured forward,
// input-gradient and weight-gradient times on each stage. ZB-H1's table is laid out for the
// stages' matmul costs (parallel::stage_costs). bench/pipeline_idle.sh runs it.
//   mpirun -np P pipeline_bench [--n-layer 8] [--d-model 512] [--vocab 8192] [--batch 4]
//                               [--seq 128] [--micro-batches 8] [--steps 3] [--threads 1]
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "tessera/comm/world.h"
#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/parallel/pipeline_simulator.h"
#include "tessera/parallel/pipeline_stages.h"
#include "tessera/runtime/pipeline_runtime.h"

using namespace tessera;

namespace {

struct Seconds {
  double step = 0, forward = 0, backward = 0, weight = 0;
};

// Runs `steps` steps of the table (after one to warm up) and sums this rank's times.
Seconds time_schedule(const parallel::PipelineTable& table, comm::Communicator& pp,
                      const model::ModelConfig& c, const std::vector<int64_t>& boundaries,
                      const std::vector<runtime::MicroBatch>& batches, int64_t B, int64_t T,
                      int64_t steps) {
  const float scale = 1.0f / float(batches.size());
  runtime::StageModels built =
      runtime::build_stage_models(c, table, pp.rank(), boundaries, B, T, {});
  for (model::Transformer* s : built.stages) s->init_weights(1);
  runtime::PipelineRuntime runtime(table, pp, built.stages, built.slots);
  runtime.run(batches, B, T, scale);  // warm-up
  Seconds t;
  for (int64_t i = 0; i < steps; ++i) {
    pp.barrier();
    const auto start = std::chrono::steady_clock::now();
    runtime.run(batches, B, T, scale);
    t.step += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    t.forward += runtime.forward_seconds();
    t.backward += runtime.backward_seconds();
    t.weight += runtime.weight_gradient_seconds();
  }
  return t;
}

// The simulation with this run's costs: each rank's own mean forward, input gradient and weight
// gradient per micro-batch and stage (a whole backward is all input gradient), so that uneven
// stages wait for each other there as they do here. Collective over pp.
parallel::PipelineSimulation simulate_measured(const parallel::PipelineTable& table,
                                               comm::Communicator& pp, const Seconds& t,
                                               double steps, int m, int v) {
  const int p = pp.size();
  std::vector<double> measured(3 * p, 0.0);
  measured[3 * pp.rank()] = t.forward / steps / (m * v);
  measured[3 * pp.rank() + 1] = (t.backward - t.weight) / steps / (m * v);
  measured[3 * pp.rank() + 2] = t.weight / steps / (m * v);
  pp.all_reduce(measured.data(), int64_t(measured.size()));
  std::vector<parallel::PipelineCosts> stage_costs;
  for (int s = 0; s < table.stages(); ++s) {
    const double* c = measured.data() + 3 * table.rank_of(s);
    stage_costs.push_back({c[0], c[1], c[2]});
  }
  return parallel::simulate_pipeline(table, stage_costs);
}

// Every rank's row: its times per step, and its measured idle share beside the simulated one.
void print_rows(comm::PipelineScheduleKind kind, comm::Communicator& pp, const Seconds& t,
                double steps, const parallel::PipelineSimulation& sim) {
  const int p = pp.size();
  constexpr int kColumns = 4;
  std::vector<double> rows(kColumns * p, 0.0);
  double* mine = rows.data() + kColumns * pp.rank();
  mine[0] = t.step / steps;
  mine[1] = t.forward / steps;
  mine[2] = t.backward / steps;
  mine[3] = t.weight / steps;
  pp.all_reduce(rows.data(), int64_t(rows.size()));
  if (pp.rank() != 0) return;
  for (int r = 0; r < p; ++r) {
    const double* row = rows.data() + kColumns * r;
    std::printf("%-12s %4d %9.1f %9.1f %9.1f %9.1f %13.1f%% %13.1f%%\n",
                std::string(enum_name(kind)).c_str(), r, 1e3 * row[0], 1e3 * row[1], 1e3 * row[2],
                1e3 * row[3], 100 * (1 - (row[1] + row[2]) / row[0]), 100 * sim.idle_fraction[r]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  comm::Communicator& pp = comm::init_world(argc, argv);
  std::map<std::string, int64_t> o = {{"n-layer", 8}, {"d-model", 512}, {"vocab", 8192},
                                      {"batch", 4},   {"seq", 128},     {"micro-batches", 8},
                                      {"steps", 3},   {"threads", 1}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = std::string(argv[i]).substr(2);
    if (!o.count(key)) {
      if (pp.rank() == 0) std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
    o[key] = std::stoll(argv[i + 1]);
  }
  set_num_threads(int(o["threads"]));
  model::ModelConfig c;
  c.vocab_size = o["vocab"];
  c.n_layer = o["n-layer"];
  c.d_model = o["d-model"];
  c.n_head = c.d_model / 64;
  c.max_seq = o["seq"];
  const int64_t B = o["batch"], T = o["seq"];
  const int p = pp.size(), m = int(o["micro-batches"]);

  const CounterRng rng(3, 0);
  std::vector<std::vector<int32_t>> tokens(m);
  std::vector<runtime::MicroBatch> batches;
  for (int i = 0; i < m; ++i) {
    for (int64_t k = 0; k < 2 * B * T; ++k) {
      tokens[i].push_back(int32_t(rng.below(uint64_t(i * 2 * B * T + k), uint64_t(c.vocab_size))));
    }
    batches.push_back({tokens[i].data(), tokens[i].data() + B * T});
  }

  if (pp.rank() == 0) {
    std::printf(
        "%d pipeline ranks, %d thread(s) each; GPT %lld blocks, d_model %lld, vocab %lld; "
        "%d micro-batches of %lld x %lld tokens\n",
        p, int(o["threads"]), static_cast<long long>(c.n_layer), static_cast<long long>(c.d_model),
        static_cast<long long>(c.vocab_size), m, static_cast<long long>(B),
        static_cast<long long>(T));
    std::printf("%-12s %4s %9s %9s %9s %9s %14s %14s\n", "schedule", "rank", "step_ms", "fwd_ms",
                "bwd_ms", "of_it_W", "measured_idle", "simulated_idle");
  }
  const std::vector<std::pair<comm::PipelineScheduleKind, int>> schedules = {
      {comm::PipelineScheduleKind::kGPipe, 1},
      {comm::PipelineScheduleKind::k1F1B, 1},
      {comm::PipelineScheduleKind::kInterleaved1F1B, 2},
      {comm::PipelineScheduleKind::kZeroBubbleH1, 1}};
  for (const auto& [kind, v] : schedules) {
    if (p == 1 && v > 1) continue;
    const std::vector<int64_t> boundaries =
        parallel::stage_boundaries(parallel::stage_blocks(c, int64_t(p) * v, {}));
    const parallel::PipelineTable table =
        parallel::make_pipeline_table(kind, p, v, m, parallel::stage_costs(c, boundaries));
    const Seconds t = time_schedule(table, pp, c, boundaries, batches, B, T, o["steps"]);
    const double steps = double(o["steps"]);
    print_rows(kind, pp, t, steps, simulate_measured(table, pp, t, steps, m, v));
  }
  return 0;
}
