// LoRA training from the command line (train.lora_*): adapters trained on a model imported from a
// Hugging Face folder while it stays frozen, checkpoints holding the adapters alone beside the
// base they need, exact resumption, the memory the run accounts for against the adapter formula,
// and the adapters' losses on every parallel layout against one rank's.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tessera/interop/safetensors.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

const std::string kLoraGpt2 = kSmallModel + " --set model.n_head=4 --set train.threads=1";
const std::string kLoraFlags =
    " --set train.lora_rank=4 --set train.lora_alpha=8 --set train.lr=1e-2 --set train.threads=1";

class LoraCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  TempDir dir{"tessera-lora-cli"};
};

nlohmann::json manifest(const fs::path& step_dir) {
  return nlohmann::json::parse(read_all((step_dir / "manifest.json").string()));
}

TEST_F(LoraCli, AdaptersTrainOnAFrozenImportedModelAndResumeExactly) {
  ASSERT_EQ(run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / "base") +
                    kLoraGpt2 + " --set train.steps=6")
                .exit_code,
            0);
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "base") + " --out " + (dir / "hf")).exit_code,
      0);
  auto tune = [&](const std::string& out, const std::string& extra) {
    return run_cli("train --config " + (dir / "hf") + " --data " + (dir / "corpus.txt") +
                   " --out " + (dir / out) +
                   " --set train.batch_size=4 --set train.seq_len=32 --set train.warmup_steps=2"
                   " --set train.eval_every=0 --set train.log_every=1 --set train.steps=12"
                   " --set checkpoint.every=4 --set checkpoint.keep_last=2"
                   " --set checkpoint.async=false" +
                   kLoraFlags + extra);
  };
  const CliResult whole = tune("whole", "");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_NE(whole.output.find("training LoRA adapters on the frozen imported weights"),
            std::string::npos)
      << whole.output;

  // The run's own accounting: gradients and AdamW moments of the adapters alone. Per block,
  // rank x (d_model + 3 d_model) for qkv, 2 x rank x d_model for the attention's projection, and
  // rank x (d_model + 4 d_model) for each MLP matrix: 16 rank d_model.
  const int64_t adapter_params = 2 * 16 * 4 * 32;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      whole.output, m,
      std::regex(R"(\((\d+) f32 LoRA adapter parameters.*gradients (\d+) B, optimizer (\d+) B)")))
      << whole.output;
  EXPECT_EQ(std::stoll(m[1]), adapter_params);
  EXPECT_EQ(std::stoll(m[2]), 4 * adapter_params);
  EXPECT_EQ(std::stoll(m[3]), 8 * adapter_params);

  // Checkpoints hold the adapters and their moments; the imported base they name is kept.
  const fs::path ckpts = dir.path() / "whole/checkpoints";
  EXPECT_TRUE(fs::exists(ckpts / "step-000000")) << "the base was pruned";
  EXPECT_FALSE(fs::exists(ckpts / "step-000004"));
  const nlohmann::json latest = manifest(ckpts / "step-000012");
  EXPECT_EQ(latest["metadata"]["lora_base"], "step-000000");  // beside it: named by its folder
  ASSERT_EQ(latest["tensors"].size(), 3u * 2 * 2 * 4);  // params, m, v x blocks x A, B x targets
  for (const auto& t : latest["tensors"]) {
    EXPECT_NE(t["name"].get<std::string>().find(".lora_"), std::string::npos) << t["name"];
  }
  ASSERT_TRUE(std::regex_search(whole.output, m,
                                std::regex(R"(held-out loss ([0-9.]+) -> ([0-9.]+) nats)")))
      << whole.output;
  EXPECT_LT(std::stod(m[2]), std::stod(m[1]) - 0.02) << whole.output;
  const std::vector<double> losses = training_losses(dir / "whole");
  ASSERT_EQ(losses.size(), 12u);

  // Died after step 8: the adapters and the base come back, and the steps after it repeat.
  ASSERT_EQ(tune("split", "").exit_code, 0);
  fs::remove_all(dir.path() / "split/checkpoints/step-000012");
  fs::remove(dir.path() / "split/checkpoints/latest");
  fs::remove(dir.path() / "split/metrics.jsonl");
  const CliResult resumed = tune("split", "");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming"), std::string::npos) << resumed.output;
  const std::vector<double> after = training_losses(dir / "split");
  ASSERT_EQ(after.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(after[i], losses[8 + i]) << "step " << i + 9;

  // Adapters alone cannot resume a run that trains every weight.
  const CliResult full = tune("split", " --set train.lora_rank=0 --set train.steps=16");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.output.find("error: " + (dir / "split/checkpoints/step-000012") +
                             ": holds LoRA adapters alone"),
            std::string::npos)
      << full.output;
}

// The adapters' losses on each layout against one rank's, for the same global batch and seed.
TEST_F(LoraCli, AdapterLossesFollowOneRankOnEveryLayout) {
  const std::string llama = kLoraGpt2 + kLlamaGqaFlags;
  for (const auto& [name, model] :
       std::vector<std::pair<std::string, std::string>>{{"gpt2", kLoraGpt2}, {"llama", llama}}) {
    auto args = [&](const std::string& out, const std::string& mesh) {
      return "train --data " + (dir / "corpus.txt") + " --out " + (dir / (name + out)) + model +
             kLoraFlags + " --set train.steps=8 " + mesh;
    };
    ASSERT_EQ(run_cli(args("1", "")).exit_code, 0);
    const std::vector<double> one = training_losses(dir / (name + "1"));
    ASSERT_EQ(one.size(), 8u);
    const std::vector<JobLayout> layouts = {
        {2, "--set mesh.dp=2 --set train.zero=2"},
        {2, "--set mesh.tp=2 --set mesh.sequence_parallel=true"},
        // Llama's 2 key/value heads on 4 ranks: qkv's adapters share their rows of B.
        {4, "--set mesh.tp=4"},
        {2, "--set mesh.pp=2 --set train.grad_accum=2 --set mesh.pp_schedule=zb-h1"},
        {8, "--set mesh.dp=2 --set mesh.tp=2 --set mesh.pp=2 --set train.zero=1"}};
    for (size_t i = 0; i < layouts.size(); ++i) {
      SCOPED_TRACE(name + ": " + layouts[i].mesh);
      const std::string out = "-" + std::to_string(i);
      const CliResult r = run_mpi(layouts[i].ranks, args(out, layouts[i].mesh));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      if (layouts[i].mesh.find("grad_accum") != std::string::npos) {
        ASSERT_EQ(run_cli(args("-accum", "--set train.grad_accum=2")).exit_code, 0);
        expect_same_losses(training_losses(dir / (name + out)),
                           training_losses(dir / (name + "-accum")));
      } else {
        expect_same_losses(training_losses(dir / (name + out)), one);
      }
    }
  }
}

// A Llama's adapters leave as a PEFT folder, named and shaped as PEFT saves a LoRA of
// LlamaForCausalLM (adapter_model.safetensors: "base_model.model.<module>.lora_A.weight" [r, in]
// and "...lora_B.weight" [out, r]; adapter_config.json: peft_type, r, lora_alpha, target_modules,
// ...), and come back identically; merged into the model, they give the text the adapters give.
TEST_F(LoraCli, AdaptersLeaveAsAPeftFolderComeBackAndMerge) {
  const std::string llama = kLoraGpt2 + kLlamaGqaFlags + " --set model.ffn_hidden=48";
  ASSERT_EQ(run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / "base") + llama +
                    " --set train.steps=4")
                .exit_code,
            0);
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "base") + " --out " + (dir / "hf")).exit_code,
      0);
  const CliResult tuned =
      run_cli("train --config " + (dir / "hf") + " --data " + (dir / "corpus.txt") + " --out " +
              (dir / "tuned") + " --set train.batch_size=4 --set train.seq_len=32" +
              " --set train.steps=6 --set train.eval_every=0" + kLoraFlags);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  const CliResult exported = run_cli("convert export --format peft --checkpoint " +
                                     (dir / "tuned") + " --out " + (dir / "peft"));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;

  const nlohmann::json config = nlohmann::json::parse(read_all(dir / "peft/adapter_config.json"));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8.0);
  EXPECT_EQ(config["bias"], "none");
  EXPECT_EQ(config["fan_in_fan_out"], false);
  EXPECT_EQ(config["use_dora"], false);
  EXPECT_EQ(config["use_rslora"], false);
  EXPECT_EQ(config["target_modules"],
            nlohmann::json({"mlp.down_proj", "mlp.gate_proj", "mlp.up_proj", "self_attn.k_proj",
                            "self_attn.o_proj", "self_attn.q_proj", "self_attn.v_proj"}));
  const interop::SafetensorsFile weights(dir.path() / "peft/adapter_model.safetensors");
  // d_model 32 over 4 heads of 8, 2 key/value heads (16 rows), MLP width 48.
  const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {"self_attn.q_proj", {{4, 32}, {32, 4}}}, {"self_attn.k_proj", {{4, 32}, {16, 4}}},
      {"self_attn.v_proj", {{4, 32}, {16, 4}}}, {"self_attn.o_proj", {{4, 32}, {32, 4}}},
      {"mlp.gate_proj", {{4, 32}, {48, 4}}},    {"mlp.up_proj", {{4, 32}, {48, 4}}},
      {"mlp.down_proj", {{4, 48}, {32, 4}}}};
  EXPECT_EQ(weights.header().tensors.size(), 2u * 2 * shapes.size());
  for (int layer = 0; layer < 2; ++layer) {
    for (const auto& [module, ab] : shapes) {
      const std::string name =
          "base_model.model.model.layers." + std::to_string(layer) + "." + module;
      const interop::SafetensorsEntry* a = weights.find(name + ".lora_A.weight");
      const interop::SafetensorsEntry* b = weights.find(name + ".lora_B.weight");
      ASSERT_TRUE(a != nullptr && b != nullptr) << name;
      EXPECT_EQ(a->shape, ab.first) << name;
      EXPECT_EQ(b->shape, ab.second) << name;
    }
  }

  // Back in, beside the model it adapts, and out again: the same bytes.
  const CliResult imported = run_cli("convert import --hf " + (dir / "hf") + " --peft " +
                                     (dir / "peft") + " --out " + (dir / "imported"));
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  ASSERT_EQ(run_cli("convert export --format peft --checkpoint " + (dir / "imported") + " --out " +
                    (dir / "peft_again"))
                .exit_code,
            0);
  EXPECT_EQ(read_all(dir / "peft/adapter_model.safetensors"),
            read_all(dir / "peft_again/adapter_model.safetensors"));

  // Merged from the run and from the import alike, and writing the same text as the adapters.
  for (const std::string from : {"tuned", "imported"}) {
    const CliResult merged = run_cli("convert merge --checkpoint " + (dir / from) + " --out " +
                                     (dir / ("merged_" + from)));
    ASSERT_EQ(merged.exit_code, 0) << merged.output;
    ASSERT_EQ(run_cli("convert export --checkpoint " + (dir / ("merged_" + from)) + " --out " +
                      (dir / ("hf_" + from)))
                  .exit_code,
              0);
  }
  EXPECT_EQ(read_all(dir / "hf_tuned/model.safetensors"),
            read_all(dir / "hf_imported/model.safetensors"));
  auto greedy = [&](const std::string& checkpoint) {
    const CliResult r = run_cli("generate --checkpoint " + (dir / checkpoint) +
                                " --prompt 'In the beginning' --temperature 0 --max-tokens 24");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  EXPECT_EQ(greedy("tuned"), greedy("merged_tuned"));
  expect_one_line_error(
      run_cli("convert export --checkpoint " + (dir / "tuned") + " --out " + (dir / "refused")),
      "holds LoRA adapters");
}

// In bf16 the frozen model multiplies in bf16 and the adapters in f32 from their master weights:
// the losses follow f32's, and data parallelism's, as bf16 full training does.
TEST_F(LoraCli, Bf16AdaptersFollowTheF32Losses) {
  auto args = [&](const std::string& out, const std::string& extra) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kLoraGpt2 +
           kLoraFlags + " --set train.steps=10 " + extra;
  };
  ASSERT_EQ(run_cli(args("f32", "")).exit_code, 0);
  ASSERT_EQ(run_cli(args("bf16", "--set train.precision=bf16")).exit_code, 0);
  const CliResult dp = run_mpi(2, args("bf16-dp2", "--set train.precision=bf16 --set mesh.dp=2"));
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  const std::vector<double> f32 = training_losses(dir / "f32");
  expect_same_losses(training_losses(dir / "bf16"), f32, 1e-2);
  expect_same_losses(training_losses(dir / "bf16-dp2"), training_losses(dir / "bf16"), 1e-3);
  EXPECT_LT(f32.back(), f32.front() - 0.1);
}

// A frozen model held in q8_0 (train.lora_quantize): its block matrices take 34 bytes per 32
// weights, as the run's accounting and the formula agree; its adapters train as near the f32
// model's losses as 8-bit weights allow, follow one rank on data-, tensor- and pipeline-parallel
// layouts (each rank's slices of a row are whole q8_0 blocks, so every layout quantises alike) and
// resume exactly, the base quantised again as it was.
TEST_F(LoraCli, AQ8_0FrozenModelTrainsAdaptersOnEveryLayout) {
  const std::string model =
      kLoraGpt2 + kLlamaGqaFlags + " --set model.d_model=64 --set model.ffn_hidden=128";
  auto args = [&](const std::string& out, const std::string& more) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + model + kLoraFlags +
           " --set train.steps=8 --set train.grad_accum=2 " + more;
  };
  const std::string q8_0 = "--set train.lora_quantize=q8_0 ";
  const CliResult one =
      run_cli(args("q8", q8_0 + "--set checkpoint.every=4 --set checkpoint.async=false"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const CliResult dense = run_cli(args("f32", ""));
  ASSERT_EQ(dense.exit_code, 0) << dense.output;
  const std::vector<double> losses = training_losses(dir / "q8");
  expect_same_losses(losses, training_losses(dir / "f32"), 1e-2);
  EXPECT_LT(losses.back(), losses.front() - 0.1);

  // Per block: 36,864 matrix weights (qkv 128 x 64, projection 64 x 64, gate and up 256 x 64,
  // down 64 x 128) and 128 norm gains. q8_0 holds the matrices at 34 / 32 bytes, the gains in f32
  // and one block's working space in f32 (36,992 values): 68,608 bytes fewer than f32 for two
  // blocks. The memory line's model state is the run's own, its formula the layout's.
  const auto frozen = [](const CliResult& r) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(
        r.output, m,
        std::regex(
            R"(model state (\d+) B = ([0-9.]+) x ZeRO-\d formula \d+ B .*frozen model of (\d+) B)")))
        << r.output;
    EXPECT_EQ(m[2], "1.000") << m[0];
    return std::stoll(m[3]);
  };
  EXPECT_EQ(frozen(dense) - frozen(one),
            2 * 4 * (36864 + 128) - 2 * (36864 / 32 * 34 + 4 * 128) - 4 * (36864 + 128));

  const std::vector<JobLayout> layouts = {{2, "--set mesh.dp=2 --set train.zero=2"},
                                          {2, "--set mesh.tp=2 --set mesh.sequence_parallel=true"},
                                          {2, "--set mesh.pp=2 --set mesh.pp_schedule=zb-h1"}};
  for (size_t i = 0; i < layouts.size(); ++i) {
    SCOPED_TRACE(layouts[i].mesh);
    const std::string out = "q8-" + std::to_string(i);
    const CliResult r = run_mpi(layouts[i].ranks, args(out, q8_0 + layouts[i].mesh));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_losses(training_losses(dir / out), losses);
  }

  fs::remove_all(dir.path() / "q8/checkpoints/step-000008");
  fs::remove(dir.path() / "q8/checkpoints/latest");
  fs::remove(dir.path() / "q8/metrics.jsonl");
  const CliResult resumed =
      run_cli(args("q8", q8_0 + "--set checkpoint.every=4 --set checkpoint.async=false"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::vector<double> after = training_losses(dir / "q8");
  ASSERT_EQ(after.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(after[i], losses[4 + i]) << "step " << i + 5;
}

// A mixture of experts' adapters, on its attention and on each expert, train with its router and
// experts frozen, on data-, tensor-, pipeline- and expert-parallel layouts as on one rank (the
// experts' adapters split over mesh.ep with their experts); mlp targets are refused by name.
TEST_F(LoraCli, AdaptersOfAMixtureFollowOneRank) {
  auto args = [&](const std::string& out, const std::string& more) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kLoraGpt2 +
           kMoeFlags + kLoraFlags +
           " --set train.lora_targets=attention,experts --set train.steps=6"
           " --set train.grad_accum=2 --set checkpoint.every=3 --set checkpoint.async=false " +
           more;
  };
  ASSERT_EQ(run_cli(args("one", "")).exit_code, 0);
  const std::vector<double> one = training_losses(dir / "one");
  ASSERT_EQ(one.size(), 6u);
  EXPECT_LT(one.back(), one.front());
  const std::vector<JobLayout> layouts = {
      {2, "--set mesh.dp=2 --set train.zero=1"},
      {2, "--set mesh.tp=2 --set mesh.sequence_parallel=true"},
      {2, "--set mesh.pp=2"},
      {2, "--set mesh.dp=2 --set mesh.ep=2 --set train.zero=1"},
      {4, "--set mesh.dp=2 --set mesh.ep=2 --set mesh.pp=2 --set train.zero=1"}};
  for (size_t i = 0; i < layouts.size(); ++i) {
    SCOPED_TRACE(layouts[i].mesh);
    const CliResult r =
        run_mpi(layouts[i].ranks, args("split-" + std::to_string(i), layouts[i].mesh));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_losses(training_losses(dir / ("split-" + std::to_string(i))), one);
  }
  // The last layout died after step 3: the experts' adapters and their moments come back from
  // their own shards over ep, and the steps after it repeat.
  const std::string last = "split-" + std::to_string(layouts.size() - 1);
  const std::vector<double> whole = training_losses(dir / last);
  fs::remove_all(dir.path() / last / "checkpoints/step-000006");
  fs::remove(dir.path() / last / "checkpoints/latest");
  fs::remove(dir.path() / last / "metrics.jsonl");
  const CliResult resumed = run_mpi(layouts.back().ranks, args(last, layouts.back().mesh));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::vector<double> after = training_losses(dir / last);
  ASSERT_EQ(after.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(after[i], whole[3 + i]) << "step " << i + 4;

  const std::string base = "train --data " + (dir / "corpus.txt") + " --out " + (dir / "refused") +
                           kLoraGpt2 + kMoeFlags + kLoraFlags;
  expect_one_line_error(run_cli(base + " --set train.lora_targets=attention,mlp"),
                        "train.lora_targets");
}

// Dropout draws its masks by step, micro-batch and data-parallel rank: tensor-parallel ranks
// (each with its columns of a row-parallel adapter's input), pipeline stages and recomputed
// forwards draw what one rank draws, so their losses follow one rank's, and bf16's nearly; and
// the masks change what is trained.
TEST_F(LoraCli, DropoutDrawsOneRanksMasksOnTensorAndPipelineRanks) {
  auto args = [&](const std::string& out, const std::string& more) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kLoraGpt2 +
           kLoraFlags + " --set train.steps=6 --set train.grad_accum=2 " + more;
  };
  ASSERT_EQ(run_cli(args("plain", "")).exit_code, 0);
  ASSERT_EQ(run_cli(args("one", "--set train.lora_dropout=0.2")).exit_code, 0);
  const std::vector<double> one = training_losses(dir / "one");
  ASSERT_EQ(one.size(), 6u);
  EXPECT_NE(one, training_losses(dir / "plain"));
  const CliResult tp = run_mpi(
      2,
      args("tp", "--set train.lora_dropout=0.2 --set mesh.tp=2 --set mesh.sequence_parallel=true"));
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  expect_same_losses(training_losses(dir / "tp"), one);
  const CliResult pp = run_mpi(2, args("pp", "--set train.lora_dropout=0.2 --set mesh.pp=2"));
  ASSERT_EQ(pp.exit_code, 0) << pp.output;
  expect_same_losses(training_losses(dir / "pp"), one);
  ASSERT_EQ(run_cli(args("recompute", "--set train.lora_dropout=0.2 --set train.recompute=full"))
                .exit_code,
            0);
  expect_same_losses(training_losses(dir / "recompute"), one);
  // In bf16 the adapters' input is kept low for backward: widened, it takes the same masks.
  ASSERT_EQ(
      run_cli(args("bf16", "--set train.lora_dropout=0.2 --set train.precision=bf16")).exit_code,
      0);
  expect_same_losses(training_losses(dir / "bf16"), one, 1e-2);
}

TEST_F(LoraCli, SettingsItCannotRunAreRefusedByName) {
  const std::string base =
      "train --data " + (dir / "corpus.txt") + " --out " + (dir / "bad") + kLoraGpt2 + kLoraFlags;
  expect_one_line_error(run_cli(base + " --set train.lora_targets=attention,ffn"),
                        "train.lora_targets");
  expect_one_line_error(run_cli(base + " --set train.device=cuda"), "train.device");
  expect_one_line_error(run_cli(base + " --set train.lora_alpha=0"), "train.lora_alpha");
  expect_one_line_error(run_cli(base + " --set train.lora_dropout=1"), "train.lora_dropout");
  expect_one_line_error(run_cli(base + " --set train.lora_quantize=q4_0"), "train.lora_quantize");
  // d_model 32 over 2 tensor-parallel ranks: the projection's rows are 16 wide on each.
  const CliResult split = run_mpi(2, base + " --set train.lora_quantize=q8_0 --set mesh.tp=2");
  EXPECT_NE(split.exit_code, 0);
  EXPECT_NE(split.output.find("error: rank 0 of 2: train.lora_quantize = \"q8_0\": the rows of "
                              "blocks.0.attn.proj.weight are 16 values wide"),
            std::string::npos)
      << split.output;
  expect_one_line_error(run_cli(base + " --set train.lora_rank=0 --set train.lora_quantize=q8_0"),
                        "train.lora_quantize");
}

}  // namespace
}  // namespace tessera::testing
