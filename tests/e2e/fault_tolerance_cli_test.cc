// Fault tolerance as an operator meets it: ranks killed at random under the supervisor, SIGTERM
// on one rank, injected NaN gradients, a diverging learning rate, and a restart on fewer ranks.
// Each run's losses are checked against an uninterrupted run of the same config.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kRootAllowed[] = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Every f32 tensor of every committed checkpoint under `run_dir` holds only finite values.
void expect_finite_checkpoints(const std::string& run_dir) {
  int checked = 0;
  for (const auto& step : fs::directory_iterator(fs::path(run_dir) / "checkpoints")) {
    if (!fs::exists(step.path() / "COMMIT")) continue;
    const auto manifest = nlohmann::json::parse(read_all(step.path() / "manifest.json"));
    for (const auto& t : manifest["tensors"]) {
      if (t["dtype"] != "f32") continue;
      std::ifstream data(step.path() / t["file"].get<std::string>(), std::ios::binary);
      data.seekg(t["offset"].get<int64_t>());
      std::vector<float> values(t["nbytes"].get<size_t>() / sizeof(float));
      data.read(reinterpret_cast<char*>(values.data()), std::streamsize(t["nbytes"].get<size_t>()));
      ASSERT_TRUE(data.good()) << step.path();
      for (float v : values) ASSERT_TRUE(std::isfinite(v)) << step.path() << " " << t["name"];
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no committed checkpoint in " << run_dir;
}

// Each step's loss as first trained, before any rollback trained the step again.
std::map<int64_t, double> first_losses(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::map<int64_t, double> losses;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("loss")) losses.emplace(record["step"].get<int64_t>(), record["loss"]);
  }
  return losses;
}

class FaultToleranceCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("tessera-fault-cli");
    write_file(*dir_ / "corpus.txt", small_corpus());
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string train_args(const std::string& out, const std::string& extra) {
    return "train --data " + (*dir_ / "corpus.txt") + " --out " + (*dir_ / out) + kSmallModel +
           " --set train.threads=1 --set dist.bucket_mb=0.02 " + extra;
  }
  static std::string mpirun(int ranks, const std::string& args) {
    return "mpirun --oversubscribe -np " + std::to_string(ranks) + " " + TESSERA_BINARY + " " +
           args;
  }
  static std::string mpi(int ranks, const std::string& args) {
    return kRootAllowed + mpirun(ranks, args);
  }
  // The losses of an uninterrupted run of `extra` on `ranks` ranks, trained once per config.
  static std::map<int64_t, double> reference(int ranks, const std::string& extra) {
    static std::map<std::string, std::map<int64_t, double>> runs;
    const std::string key = std::to_string(ranks) + extra;
    if (!runs.count(key)) {
      const std::string out = "reference-" + std::to_string(runs.size());
      const CliResult r = ranks > 1 ? run_command(mpi(ranks, train_args(out, extra)))
                                    : run_cli(train_args(out, extra));
      EXPECT_EQ(r.exit_code, 0) << r.output;
      runs[key] = losses_by_step(*dir_ / out);
    }
    return runs[key];
  }
  static TempDir* dir_;
};
TempDir* FaultToleranceCli::dir_ = nullptr;

// Acceptance 1: 20 SIGKILLs of a random rank at random moments (a checkpoint is written after
// every step, in the background, so many land mid-write); the supervisor restarts the job until
// it finishes, and every step's loss is bit-identical to the uninterrupted run's.
TEST_F(FaultToleranceCli, RandomKillsUnderTheSupervisorLeaveTheLossesBitIdentical) {
  // Steps of some tens of milliseconds, so that each attempt trains a few before its kill.
  const std::string config =
      "--set mesh.dp=2 --set train.steps=120 --set checkpoint.every=1 --set model.d_model=256 "
      "--set model.n_head=4";
  const std::map<int64_t, double> clean = reference(2, config);
  ASSERT_EQ(clean.size(), 120u);

  const std::string out = *dir_ / "killed";
  Background job(kRootAllowed + std::string(TESSERA_BINARY) +
                     " supervise --max-restarts 40 --backoff-s 0 --log " +
                     (*dir_ / "restarts.jsonl") + " -- " + mpirun(2, train_args("killed", config)),
                 *dir_ / "killed.log");
  std::mt19937 random(20261201);
  int kills = 0;
  size_t steps_seen = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(240);
  while (kills < 20 && job.running() && Clock::now() < deadline) {
    // Each kill waits for a new step, so the run makes progress, then a random moment more.
    const size_t steps = losses_by_step(out).size();
    const std::vector<pid_t> ranks = training_processes(out);
    if (steps == steps_seen || ranks.size() != 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 150)(random)));
    const pid_t victim = ranks[std::uniform_int_distribution<size_t>(0, 1)(random)];
    if (kill(victim, SIGKILL) == 0) ++kills;
    steps_seen = losses_by_step(out).size();
    // The next kill is for the next attempt: wait until this one's ranks are gone.
    while (!training_processes(out).empty() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_EQ(kills, 20) << read_all(*dir_ / "killed.log");
  EXPECT_EQ(job.wait(std::chrono::seconds(240)), 0) << read_all(*dir_ / "killed.log");
  const std::string restarts = read_all(*dir_ / "restarts.jsonl");
  EXPECT_GE(count_of(restarts, "\"action\":\"restart"), size_t(kills)) << restarts;
  EXPECT_EQ(losses_by_step(out), clean) << read_all(*dir_ / "killed.log");
}

// Acceptance 2: SIGTERM to one rank commits a checkpoint of the step it was on, every rank exits
// 0, and the same command continues with no step lost or repeated.
TEST_F(FaultToleranceCli, SigtermOnOneRankCheckpointsAndTheRerunLosesNoStep) {
  const std::string config = "--set mesh.dp=2 --set train.steps=40 --set checkpoint.every=0";
  const std::map<int64_t, double> clean = reference(2, config);
  const std::string out = *dir_ / "preempted";
  {
    Background job(mpi(2, train_args("preempted", config)), *dir_ / "preempted.log");
    while (losses_by_step(out).size() < 3 && job.running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const std::vector<pid_t> ranks = training_processes(out);
    ASSERT_EQ(ranks.size(), 2u);
    ASSERT_EQ(kill(ranks[1], SIGTERM), 0);
    EXPECT_EQ(job.wait(std::chrono::seconds(60)), 0) << read_all(*dir_ / "preempted.log");
  }
  const std::string log = read_all(*dir_ / "preempted.log");
  ASSERT_NE(log.find("preempted: checkpoint of step"), std::string::npos) << log;
  EXPECT_EQ(log.find("another rank failed"), std::string::npos) << log;
  const int64_t stopped_at = losses_by_step(out).rbegin()->first;
  ASSERT_LT(stopped_at, 40) << log;
  EXPECT_TRUE(fs::exists(fs::path(out) / "checkpoints" /
                         ("step-" + std::string(6 - std::to_string(stopped_at).size(), '0') +
                          std::to_string(stopped_at)) /
                         "COMMIT"))
      << log;

  const CliResult rerun = run_command(mpi(2, train_args("preempted", config)));
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("at step " + std::to_string(stopped_at)), std::string::npos)
      << rerun.output;
  // Each step was trained once: the records of both runs, in order, are steps 1..40.
  std::vector<int64_t> steps;
  std::ifstream metrics(out + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("loss")) steps.push_back(record["step"].get<int64_t>());
  }
  ASSERT_EQ(steps.size(), 40u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], int64_t(i + 1));
  EXPECT_EQ(losses_by_step(out), clean);
}

// The MPI rank of a process of the job, from the environment mpirun gave it.
int world_rank_of(pid_t pid) {
  const std::string environ = read_all("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = "OMPI_COMM_WORLD_RANK=";
  const size_t at = environ.find(key);
  return at == std::string::npos ? -1 : std::stoi(environ.substr(at + key.size()));
}

// SIGKILL of one pipeline stage's rank mid-step: the ranks before and after it wait for its
// activations and gradients, and none may hang there. The job ends within dist.timeout_s, its
// output naming the rank that died, and every other rank says why it stops.
TEST_F(FaultToleranceCli, SigkillOfOnePipelineRankEndsEveryRankNamingIt) {
  const std::string config =
      "--set model.n_layer=4 --set mesh.pp=4 --set train.grad_accum=8 --set train.steps=100000 "
      "--set checkpoint.every=0 --set dist.timeout_s=30";
  const std::string out = *dir_ / "pipeline-killed", log = *dir_ / "pipeline-killed.log";
  Background job(mpi(4, train_args("pipeline-killed", config)), log);
  while (losses_by_step(out).size() < 3 && job.running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::vector<pid_t> ranks = training_processes(out);
  ASSERT_EQ(ranks.size(), 4u) << read_all(log);
  const int victim = world_rank_of(ranks[2]);
  ASSERT_GE(victim, 0);
  const auto killed = Clock::now();
  ASSERT_EQ(kill(ranks[2], SIGKILL), 0);
  const int status = job.wait(std::chrono::seconds(30));
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  const std::string output = read_all(log);
  ASSERT_NE(status, -1) << "still running 30 s after the kill:\n" << output;
  EXPECT_NE(status, 0) << output;
  std::printf("pipeline rank %d killed: the job ended %.1f s later\n", victim, seconds);
  EXPECT_NE(output.find("process rank " + std::to_string(victim)), std::string::npos) << output;
  EXPECT_NE(output.find("signal 9"), std::string::npos) << output;
  // Every survivor names the rank that ended, from the flight records.
  for (int r = 0; r < 4; ++r) {
    if (r == victim) continue;
    const std::string named = "rank " + std::to_string(r) +
                              " of 4: the launcher stops the job because rank " +
                              std::to_string(victim) + " (pid ";
    EXPECT_NE(output.find(named), std::string::npos)
        << "rank " << r << " did not name rank " << victim << ":\n"
        << output;
  }
  EXPECT_TRUE(training_processes(out).empty());
}

// A second SIGTERM exits at once and leaves the last committed checkpoint as it was. The steps
// are made slow (about a second) so that the second signal lands while the first still waits
// for its step boundary.
TEST_F(FaultToleranceCli, ASecondSigtermExitsAtOnceWithTheCheckpointIntact) {
  const std::string out = *dir_ / "twice", log = *dir_ / "twice.log";
  const std::string slow =
      " --set model.d_model=768 --set model.n_layer=4 --set model.n_head=4"
      " --set train.batch_size=16 --set checkpoint.every=2";
  Background job(
      std::string(TESSERA_BINARY) + " " + train_args("twice", "--set train.steps=100000" + slow),
      log);
  while ((losses_by_step(out).size() < 3 || !fs::exists(out + "/checkpoints/latest")) &&
         job.running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::vector<pid_t> ranks = training_processes(out);
  ASSERT_EQ(ranks.size(), 1u) << read_all(log);
  ASSERT_EQ(kill(ranks[0], SIGTERM), 0);
  while (read_all(log).find("SIGTERM: checkpointing") == std::string::npos && job.running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(ranks[0], SIGTERM);
  EXPECT_EQ(job.wait(std::chrono::seconds(30)), 143) << read_all(log);
  EXPECT_NE(read_all(log).find("second SIGTERM: exiting now"), std::string::npos) << read_all(log);
  EXPECT_EQ(read_all(log).find("preempted: checkpoint"), std::string::npos) << read_all(log);
  const std::string latest = read_all(out + "/checkpoints/latest");
  ASSERT_FALSE(latest.empty());
  const std::string step_dir = out + "/checkpoints/" + latest.substr(0, latest.find('\n'));
  EXPECT_TRUE(fs::exists(step_dir + "/COMMIT")) << step_dir;
  const int64_t step = std::stoll(latest.substr(5));
  const CliResult resumed =
      run_cli(train_args("twice", "--set train.steps=" + std::to_string(step + 1) + slow));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step " + std::to_string(step)), std::string::npos)
      << resumed.output;
}

// Acceptance 5: an injected NaN gradient skips its step; the steps before it match the clean run.
TEST_F(FaultToleranceCli, AnInjectedNanGradientSkipsItsStep) {
  const std::string config = "--set train.steps=8";
  const std::map<int64_t, double> clean = reference(1, config);
  const CliResult r = run_cli(train_args("nan", config + " --set fault.nan_gradient_steps=5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 5 skipped: "), std::string::npos) << r.output;
  const std::map<int64_t, double> losses = losses_by_step(*dir_ / "nan");
  ASSERT_EQ(losses.size(), 8u);
  for (int64_t step = 1; step <= 5; ++step) EXPECT_EQ(losses.at(step), clean.at(step)) << step;
  EXPECT_NE(losses.at(7), clean.at(7)) << "the skipped update should change what follows";
}

// Acceptance 5: K bad steps in a row roll back to the last checkpoint and training continues on
// the batches after them.
TEST_F(FaultToleranceCli, KBadStepsRollBackAndContinue) {
  const std::string config = "--set train.steps=12 --set checkpoint.every=4";
  const std::map<int64_t, double> clean = reference(1, config);
  const CliResult r = run_cli(train_args(
      "rollback", config + " --set fault.nan_gradient_steps=6-8 --set train.max_bad_steps=3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rolled back to step 4"), std::string::npos) << r.output;
  const std::map<int64_t, double> first = first_losses(*dir_ / "rollback");
  for (int64_t step = 1; step <= 6; ++step) EXPECT_EQ(first.at(step), clean.at(step)) << step;
  const std::map<int64_t, double> losses = losses_by_step(*dir_ / "rollback");
  EXPECT_EQ(losses.rbegin()->first, 12);
  for (const auto& [step, loss] : losses) EXPECT_TRUE(std::isfinite(loss)) << step;
}

// Acceptance 5: a learning rate that diverges ends with a clear error once the rollbacks are
// spent, and no checkpoint it leaves holds a non-finite value.
TEST_F(FaultToleranceCli, ADivergingRunEndsWithAnErrorAndFiniteCheckpoints) {
  const CliResult r =
      run_cli(train_args("diverged",
                         "--set train.steps=40 --set train.lr=1e3 --set train.warmup_steps=0 "
                         "--set checkpoint.every=1 --set train.max_bad_steps=2 "
                         "--set train.max_rollbacks=2"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.max_rollbacks"), std::string::npos) << r.output;
  expect_finite_checkpoints(*dir_ / "diverged");
}

// Acceptance 6: a dp=4 run restarted on 2 ranks with dist.elastic continues as a dp=2 run
// resumed from the same checkpoint does.
TEST_F(FaultToleranceCli, AnElasticRestartOnFewerRanksFollowsTheSmallerMesh) {
  const std::string first = "--set mesh.dp=4 --set train.steps=4 --set checkpoint.every=4";
  const CliResult four = run_command(mpi(4, train_args("elastic", first)));
  ASSERT_EQ(four.exit_code, 0) << four.output;
  fs::copy(*dir_ / "elastic", *dir_ / "resharded", fs::copy_options::recursive);
  fs::remove(fs::path(*dir_ / "resharded") / ".lock");

  const CliResult elastic =
      run_command(mpi(2, train_args("elastic",
                                    "--set mesh.dp=4 --set dist.elastic=true --set train.steps=10 "
                                    "--set checkpoint.every=4")));
  ASSERT_EQ(elastic.exit_code, 0) << elastic.output;
  EXPECT_NE(elastic.output.find("mesh.dp 4 -> 2"), std::string::npos) << elastic.output;
  const CliResult plain = run_command(mpi(
      2, train_args("resharded", "--set mesh.dp=2 --set train.steps=10 --set checkpoint.every=4")));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const std::map<int64_t, double> a = losses_by_step(*dir_ / "elastic"),
                                  b = losses_by_step(*dir_ / "resharded");
  ASSERT_EQ(a.size(), 10u);
  for (int64_t step = 5; step <= 10; ++step) {
    EXPECT_NEAR(a.at(step), b.at(step), 1e-5 * std::abs(b.at(step))) << step;
  }
}

// Without dist.elastic, fewer ranks than mesh.dp stays an error.
TEST_F(FaultToleranceCli, FewerRanksWithoutElasticAreRefused) {
  const CliResult r = run_command(mpi(2, train_args("inelastic", "--set mesh.dp=4")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("but the job has 2"), std::string::npos) << r.output;
}

// --max-restarts belongs outside a launcher: under mpirun it is refused with what to do instead.
TEST_F(FaultToleranceCli, TrainMaxRestartsGivesUpWithAClearError) {
  const CliResult r = run_cli(train_args("give-up",
                                         "--max-restarts 2 --restart-backoff 0 "
                                         "--set train.steps=0"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_of(r.output, "train.steps"), 3u) << r.output;
  EXPECT_NE(r.output.find("error: the job failed 3 times (--max-restarts 2)"), std::string::npos)
      << r.output;
  const std::string log = read_all(*dir_ / "give-up/restarts.jsonl");
  EXPECT_EQ(count_of(log, "\"attempt\""), 3u) << log;
}

}  // namespace
}  // namespace tessera::testing
