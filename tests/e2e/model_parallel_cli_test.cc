// Tensor, sequence and expert parallelism under real mpirun: every layout follows the single-rank
// loss curve for the same global batch and seed, its gradients after one step equal the single
// rank's parameter by parameter, its checkpoints resume on other layouts, and layouts the model
// cannot take end every rank with one clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// GPT-2 with four heads, so tp = 2 and 4 split it.
const std::string kGpt2 = kSmallModel + " --set model.n_head=4";
// Llama with grouped-query attention: 4 query heads over 2 key/value heads, so tp = 4 replicates
// each kv head on two ranks.
const std::string kLlamaGqa = kGpt2 + kLlamaGqaFlags;
// A dropless mixture of four experts, top-2.
const std::string kMoe = kGpt2 + kMoeFlags;

class ModelParallelCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  std::string args(const std::string& out, const std::string& model, const std::string& extra,
                   int steps = 20) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + model +
           " --set train.steps=" + std::to_string(steps) + " --set train.threads=1 " + extra;
  }
  // Trains on `ranks` ranks (one without mpirun) and returns the losses.
  std::vector<double> losses(int ranks, const std::string& out, const std::string& model,
                             const std::string& extra, int steps = 20) {
    const CliResult r = ranks == 1 ? run_cli(args(out, model, extra, steps))
                                   : run_mpi(ranks, args(out, model, extra, steps));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return training_losses(dir / out);
  }
  TempDir dir{"tessera-mp-cli"};
};

// Each model's layouts against its single-rank run, with and without gradient accumulation.
TEST_F(ModelParallelCli, EveryLayoutFollowsTheSingleRankLossCurve) {
  const std::vector<std::tuple<std::string, std::string, std::vector<JobLayout>>> cases = {
      {"gpt2",
       kGpt2,
       {{2, "--set mesh.tp=2"},
        {4, "--set mesh.tp=4"},
        {2, "--set mesh.tp=2 --set mesh.sequence_parallel=true"},
        {4, "--set mesh.tp=2 --set mesh.dp=2 --set train.zero=1"},
        {4, "--set mesh.tp=2 --set mesh.dp=2 --set train.zero=3 --set mesh.sequence_parallel=true"},
        {2, "--set mesh.tp=2 --set train.recompute=full"},
        {2, "--set mesh.tp=2 --set mesh.sequence_parallel=true --set train.recompute=selective"}}},
      {"gpt2-50257",
       kGpt2 + " --set model.vocab_size=50257",
       {{2, "--set mesh.tp=2"}, {4, "--set mesh.tp=4 --set mesh.sequence_parallel=true"}}},
      {"llama-gqa",
       kLlamaGqa,
       {{2, "--set mesh.tp=2"},
        {4, "--set mesh.tp=4"},
        {4, "--set mesh.tp=4 --set mesh.sequence_parallel=true"}}},
      {"moe",
       kMoe,
       {{4, "--set mesh.dp=4"},
        {4, "--set mesh.dp=4 --set mesh.ep=2"},
        {4, "--set mesh.dp=4 --set mesh.ep=4 --set train.zero=2"},
        {4, "--set mesh.dp=2 --set mesh.tp=2 --set mesh.ep=2"}}},
      {"moe-capacity",
       kMoe + " --set model.moe_capacity_factor=1",
       {{4, "--set mesh.dp=4 --set mesh.ep=2 --set train.zero=3"},
        {4, "--set mesh.dp=2 --set mesh.tp=2 --set mesh.ep=2 --set train.recompute=full"}}},
  };
  for (const auto& [name, model, layouts] : cases) {
    for (const std::string accum : {"1", "2"}) {
      SCOPED_TRACE(name + ", grad_accum " + accum);
      const std::string extra = " --set train.grad_accum=" + accum;
      const std::vector<double> reference = losses(1, name + "-one-" + accum, model, extra, 10);
      ASSERT_EQ(reference.size(), 10u);
      int i = 0;
      for (const JobLayout& l : layouts) {
        SCOPED_TRACE(l.mesh);
        std::printf("%s, grad_accum %s, %s:\n", name.c_str(), accum.c_str(), l.mesh.c_str());
        const std::string out = name + "-" + std::to_string(i++) + "-" + accum;
        expect_same_losses(losses(l.ranks, out, model, extra + " " + l.mesh, 10), reference);
      }
    }
  }
}

// Chat data (targets outside the assistants' turns ignored, over vocabulary shards too) packed
// into documents that do not attend to each other, on tensor-, sequence-, pipeline- and
// data-parallel layouts.
TEST_F(ModelParallelCli, ChatDataInPackedDocumentsFollowsTheSingleRankCurve) {
  ASSERT_EQ(run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                    (dir / "corpus.txt"))
                .exit_code,
            0);
  std::string jsonl;
  for (int i = 0; i < 200; ++i) {
    jsonl += R"({"messages": [{"role": "user", "content": "What was word )" + std::to_string(i) +
             R"(?"}, {"role": "assistant", "content": "The word was )" + std::to_string(i % 7) +
             R"(, and it was good."}]})" + "\n";
  }
  write_file(dir / "chat.jsonl", jsonl);
  write_file(dir / "chat.jinja",
             "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}");
  const CliResult prepared =
      run_cli("prepare --chat --tokenizer " + (dir / "tok") + " --chat-template " +
              (dir / "chat.jinja") + " --out " + (dir / "chat") + " " + (dir / "chat.jsonl"));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const auto chat_losses = [&](int ranks, const std::string& out, const std::string& mesh) {
    const std::string args = "train --data " + (dir / "chat") + " --out " + (dir / out) + kGpt2 +
                             " --set model.vocab_size=300 --set train.steps=10"
                             " --set train.threads=1 --set train.document_mask=true " +
                             mesh;
    const CliResult r = ranks == 1 ? run_cli(args) : run_mpi(ranks, args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return training_losses(dir / out);
  };
  for (const std::string accum : {"1", "2"}) {
    const std::string extra = " --set train.grad_accum=" + accum;
    const std::vector<double> reference = chat_losses(1, "chat-one-" + accum, extra);
    ASSERT_EQ(reference.size(), 10u);
    const std::vector<std::string> meshes =
        accum == "1" ? std::vector<std::string>{"--set mesh.tp=2 --set mesh.sequence_parallel=true",
                                                "--set mesh.dp=2 --set train.zero=1"}
                     : std::vector<std::string>{"--set mesh.pp=2"};
    for (size_t i = 0; i < meshes.size(); ++i) {
      SCOPED_TRACE(meshes[i] + extra);
      std::printf("chat data, grad_accum %s, %s:\n", accum.c_str(), meshes[i].c_str());
      expect_same_losses(
          chat_losses(2, "chat-" + accum + "-" + std::to_string(i), extra + " " + meshes[i]),
          reference);
    }
  }
}

TEST_F(ModelParallelCli, Bf16FollowsItsSingleRankCurveWithinTwoPercent) {
  const std::string bf16 = " --set train.precision=bf16";
  const std::vector<double> reference = losses(1, "bf16-one", kGpt2, bf16);
  expect_same_losses(
      losses(4, "bf16-tp2dp2", kGpt2,
             bf16 + " --set mesh.tp=2 --set mesh.dp=2 --set mesh.sequence_parallel=true"),
      reference, 0.02);
  const std::vector<double> moe_reference = losses(1, "bf16-moe-one", kMoe, bf16);
  expect_same_losses(
      losses(4, "bf16-moe", kMoe, bf16 + " --set mesh.dp=2 --set mesh.tp=2 --set mesh.ep=2"),
      moe_reference, 0.02);
}

// After one step, AdamW's first moment is (1 - beta1) times the clipped gradient: it holds the
// gradient of every parameter, which each layout's checkpoint gives back whole.
std::map<std::string, std::vector<float>> gradients(const fs::path& run) {
  const fs::path step = ckpt::checkpoint_step_dir(run);
  const model::ModelConfig config = ckpt::checkpoint_model_config(step, ckpt::read_manifest(step));
  const model::ModelLayout layout = model::model_layout(config);
  std::vector<float> m(size_t(layout.params.total()));
  ckpt::read_state_range(step, config, layout.params, ckpt::StatePart::kAdamM, 0,
                         layout.params.total(), m.data());
  std::map<std::string, std::vector<float>> out;
  for (const model::ParamInfo& p : layout.params.entries()) {
    out[p.name].assign(m.begin() + p.offset, m.begin() + p.offset + p.shape.numel());
  }
  return out;
}

TEST_F(ModelParallelCli, GradientsAfterOneStepEqualTheSingleRanksPerParameter) {
  const std::vector<std::tuple<std::string, std::string, JobLayout>> cases = {
      {"gpt2-sp", kGpt2, {2, "--set mesh.tp=2 --set mesh.sequence_parallel=true"}},
      {"gpt2-tp2dp2", kGpt2, {4, "--set mesh.tp=2 --set mesh.dp=2 --set train.zero=3"}},
      {"llama-gqa-sp", kLlamaGqa, {4, "--set mesh.tp=4 --set mesh.sequence_parallel=true"}},
      // QK-norm's gains see each rank's own heads, and a key head two ranks share.
      {"qk-norm-tp4", kLlamaGqa + " --set model.qk_norm=true", {4, "--set mesh.tp=4"}},
      {"moe-tp2ep2", kMoe, {4, "--set mesh.dp=2 --set mesh.tp=2 --set mesh.ep=2"}},
  };
  for (const auto& [name, model, layout] : cases) {
    SCOPED_TRACE(name);
    losses(1, name + "-one", model, "", 1);
    losses(layout.ranks, name + "-split", model, layout.mesh, 1);
    const auto want = gradients(dir / (name + "-one"));
    const auto got = gradients(dir / (name + "-split"));
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    std::string worst_name;
    for (const auto& [param, g] : want) {
      const std::vector<float>& h = got.at(param);
      double diff = 0, norm = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        diff += (double(h[i]) - g[i]) * (double(h[i]) - g[i]);
        norm += double(g[i]) * g[i];
      }
      ASSERT_GT(norm, 0) << param << " has no gradient";
      const double relative = std::sqrt(diff / norm);
      EXPECT_LT(relative, 1e-5) << param;
      if (relative > worst) std::tie(worst, worst_name) = std::pair{relative, param};
    }
    std::printf("%s: %zu parameters, worst relative gradient difference %.2e (%s)\n", name.c_str(),
                want.size(), worst, worst_name.c_str());
  }
}

// A run stops at step 10 on one layout and resumes from its checkpoint on another: the losses
// continue those of the uninterrupted run.
TEST_F(ModelParallelCli, CheckpointsResumeOnOtherLayouts) {
  const std::string every = " --set checkpoint.every=10";
  const std::vector<std::tuple<std::string, std::string, JobLayout, std::vector<JobLayout>>> cases =
      {
          {"tp2dp2-zero3",
           kGpt2,
           {4, "--set mesh.tp=2 --set mesh.dp=2 --set train.zero=3"},
           {{4, "--set mesh.dp=4 --set train.zero=1"}, {4, "--set mesh.tp=4"}}},
          {"moe-ep4", kMoe, {4, "--set mesh.dp=4 --set mesh.ep=4"}, {{1, ""}}},
      };
  for (const auto& [name, model, first, next] : cases) {
    SCOPED_TRACE(name);
    const std::vector<double> reference =
        losses(first.ranks, name, model, every + " " + first.mesh);
    ASSERT_EQ(reference.size(), 20u);
    const fs::path step10 = fs::path(dir / name) / "checkpoints" / "step-000010";
    ASSERT_TRUE(fs::exists(step10 / "COMMIT"));
    const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(step10 / "manifest.json"));
    ASSERT_TRUE(manifest["metadata"].contains("placed")) << manifest["metadata"].dump();
    int i = 0;
    for (const JobLayout& l : next) {
      SCOPED_TRACE(l.mesh);
      const std::string out = name + "-resumed-" + std::to_string(i++);
      fs::create_directories(fs::path(dir / out) / "checkpoints");
      fs::copy(step10, fs::path(dir / out) / "checkpoints" / "step-000010",
               fs::copy_options::recursive);
      std::printf("%s resumed at step 10 on %s:\n", name.c_str(),
                  l.mesh.empty() ? "one rank" : l.mesh.c_str());
      expect_same_losses(losses(l.ranks, out, model, every + " " + l.mesh),
                         std::vector<double>(reference.begin() + 10, reference.end()));
    }
  }
  // Every tool reads a sharded checkpoint.
  const CliResult sample = run_cli("generate --checkpoint " + (dir / "tp2dp2-zero3") +
                                   " --prompt the --max-tokens 8 --temperature 0");
  EXPECT_EQ(sample.exit_code, 0) << sample.output;
  const CliResult exported =
      run_cli("convert export --checkpoint " + (dir / "tp2dp2-zero3") + " --out " + (dir / "hf"));
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
}

// Each bad layout: every rank ends with the same one-line error, before the model is built.
TEST_F(ModelParallelCli, BadLayoutsEndEveryRankWithOneClearError) {
  const std::string six_heads =
      kSmallModel +
      " --set model.arch=llama --set model.n_head=6 --set model.d_model=36"
      " --set model.n_kv_head=2 --set model.tie_embeddings=false";
  const std::vector<std::tuple<int, std::string, std::string, std::string>> cases = {
      {2, kSmallModel + " --set model.n_head=3 --set model.d_model=33", "--set mesh.tp=2",
       "mesh.tp = 2 does not divide model.n_head = 3"},
      {3, six_heads, "--set mesh.tp=3", "mesh.tp = 3 and model.n_kv_head = 2"},
      {3, kMoe, "--set mesh.dp=3 --set mesh.ep=3 --set train.batch_size=3",
       "mesh.ep = 3 does not divide model.moe_experts = 4"},
      {2, kMoe, "--set mesh.dp=2 --set mesh.ep=4", "mesh.ep = 4 does not divide mesh.dp = 2"},
      {3, kGpt2, "--set mesh.tp=2", "= 2 ranks, but the job has 3"},
  };
  int i = 0;
  for (const auto& [ranks, model, mesh, message] : cases) {
    SCOPED_TRACE(mesh);
    const CliResult r = run_mpi(ranks, args("bad-" + std::to_string(i++), model, mesh));
    EXPECT_NE(r.exit_code, 0) << r.output;
    for (int rank = 0; rank < ranks; ++rank) {
      const std::string line =
          "error: rank " + std::to_string(rank) + " of " + std::to_string(ranks) + ": ";
      const size_t at = r.output.find(line);
      ASSERT_NE(at, std::string::npos) << r.output;
      EXPECT_NE(r.output.substr(at, r.output.find('\n', at) - at).find(message), std::string::npos)
          << r.output;
    }
    EXPECT_EQ(r.output.find("model: "), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace tessera::testing
