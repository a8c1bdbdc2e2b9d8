// Context parallelism under real mpirun: with each sequence split over cp ranks, GPT-2 and Llama
// with grouped-query attention follow the single-rank loss curve for 20 steps (and its held-out
// losses), alone and with
// tensor, sequence, data and pipeline parallelism, ZeRO and recomputation, over packed documents
// too; checkpoints move between cp and other layouts; bad layouts end with one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

const std::string kGpt2 = kSmallModel + " --set model.n_head=4";
const std::string kLlamaGqa = kGpt2 + kLlamaGqaFlags;

class ContextParallelCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  // Trains 20 steps on `ranks` ranks (one without mpirun) and returns the losses.
  std::vector<double> losses(int ranks, const std::string& out, const std::string& flags,
                             const std::string& data = "corpus.txt") {
    const std::string args = "train --data " + (dir / data) + " --out " + (dir / out) + flags +
                             " --set train.steps=20 --set train.threads=1";
    const CliResult r = ranks == 1 ? run_cli(args) : run_mpi(ranks, args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return training_losses(dir / out);
  }
  // Each layout's training losses, and its held-out losses before and after, against the single
  // rank's, within 1e-5 relative.
  void expect_layouts_follow(const std::string& name, const std::string& flags,
                             const std::vector<JobLayout>& layouts,
                             const std::string& data = "corpus.txt") {
    const std::vector<double> reference = losses(1, name + "-one", flags, data);
    const std::vector<double> held_out = training_losses(dir / (name + "-one"), "val_loss");
    ASSERT_EQ(reference.size(), 20u);
    ASSERT_EQ(held_out.size(), 2u);
    int i = 0;
    for (const JobLayout& l : layouts) {
      SCOPED_TRACE(name + ": " + l.mesh);
      std::printf("%s, %s:\n", name.c_str(), l.mesh.c_str());
      const std::string out = name + "-" + std::to_string(i++);
      expect_same_losses(losses(l.ranks, out, flags + " " + l.mesh, data), reference);
      expect_same_losses(training_losses(dir / out, "val_loss"), held_out);
    }
  }
  TempDir dir{"tessera-cp-cli"};
};

TEST_F(ContextParallelCli, EveryLayoutFollowsTheSingleRankLossCurve) {
  expect_layouts_follow("gpt2", kGpt2,
                        {{2, "--set mesh.cp=2"},
                         {4, "--set mesh.cp=2 --set mesh.tp=2"},
                         {4, "--set mesh.cp=2 --set mesh.tp=2 --set mesh.sequence_parallel=true"},
                         {4, "--set mesh.cp=2 --set mesh.dp=2 --set train.zero=3"}});
  expect_layouts_follow("llama-gqa", kLlamaGqa,
                        {{2, "--set mesh.cp=2"},
                         {4, "--set mesh.cp=2 --set mesh.tp=2"},
                         {4, "--set mesh.cp=4 --set train.recompute=full"}});
  expect_layouts_follow("llama-gqa-accum2", kLlamaGqa + " --set train.grad_accum=2",
                        {{4, "--set mesh.cp=2 --set mesh.pp=2"}});
}

// Short documents packed into each sequence, so that documents cross the ranks' chunks: a query
// sees only its own document's keys, wherever they are held.
TEST_F(ContextParallelCli, PackedDocumentsFollowTheSingleRankCurve) {
  ASSERT_EQ(run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                    (dir / "corpus.txt"))
                .exit_code,
            0);
  std::string files;
  for (int i = 0; i < 60; ++i) {
    std::string text;
    for (int line = 0; line <= i % 3; ++line) {
      text += "Document " + std::to_string(i) + " says " + std::to_string(i % 7 + line) + ".\n";
    }
    write_file(dir / ("doc" + std::to_string(i) + ".txt"), text);
    files += " " + (dir / ("doc" + std::to_string(i) + ".txt"));
  }
  const CliResult prepared =
      run_cli("prepare --tokenizer " + (dir / "tok") + " --out " + (dir / "docs") + files);
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const std::string documents = " --set model.vocab_size=300 --set train.document_mask=true";
  expect_layouts_follow("gpt2-documents", kGpt2 + documents,
                        {{2, "--set mesh.cp=2"},
                         {4, "--set mesh.cp=2 --set mesh.tp=2 --set mesh.sequence_parallel=true"}},
                        "docs");
  expect_layouts_follow("llama-gqa-documents", kLlamaGqa + documents,
                        {{2, "--set mesh.cp=2"}, {4, "--set mesh.cp=2 --set mesh.tp=2"}}, "docs");
}

// A checkpoint of a cp run (its optimizer state sharded over dp x cp) resumes on one rank and on
// another cp layout, continuing the uninterrupted run's losses.
TEST_F(ContextParallelCli, CheckpointsReshardAcrossContextParallelRanks) {
  const std::string flags = kLlamaGqa + " --set checkpoint.every=10";
  const std::vector<double> reference =
      losses(4, "cp2dp2", flags + " --set mesh.cp=2 --set mesh.dp=2 --set train.zero=1");
  ASSERT_EQ(reference.size(), 20u);
  const fs::path step10 = fs::path(dir / "cp2dp2") / "checkpoints" / "step-000010";
  ASSERT_TRUE(fs::exists(step10 / "COMMIT"));
  int i = 0;
  for (const JobLayout& l :
       {JobLayout{1, ""}, JobLayout{4, "--set mesh.cp=4 --set train.zero=1"}}) {
    SCOPED_TRACE(l.mesh);
    const std::string out = "resumed-" + std::to_string(i++);
    fs::create_directories(fs::path(dir / out) / "checkpoints");
    fs::copy(step10, fs::path(dir / out) / "checkpoints" / "step-000010",
             fs::copy_options::recursive);
    std::printf("resumed at step 10 on %s:\n", l.mesh.empty() ? "one rank" : l.mesh.c_str());
    expect_same_losses(losses(l.ranks, out, flags + " " + l.mesh),
                       std::vector<double>(reference.begin() + 10, reference.end()));
  }
}

TEST_F(ContextParallelCli, BadLayoutsEndWithOneClearError) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {kGpt2, "--set mesh.cp=2 --set train.seq_len=30",
       "train.seq_len (30) must be a multiple of 2 x mesh.cp = 4"},
      {kGpt2 + kMoeFlags, "--set mesh.cp=2", "mesh.cp = 2 with a mixture of experts"},
      {kGpt2, "--set mesh.cp=4", "mesh.dp x mesh.cp x mesh.tp x mesh.pp = 1 x 4 x 1 x 1 = 4 ranks"},
  };
  int i = 0;
  for (const auto& [model, mesh, message] : cases) {
    SCOPED_TRACE(mesh);
    const CliResult r = run_mpi(2, "train --data " + (dir / "corpus.txt") + " --out " +
                                       (dir / ("bad-" + std::to_string(i++))) + model + " " + mesh);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace tessera::testing
