// tessera convert, end to end: train a small model with the CLI, export it, check that a forward
// pass in Hugging Face's conventions (tests/reference/hf_forward.py, run with Debian's
// python3-torch) gives Tessera's logits on the exported folder, import the folder back and check
// the parameters are bit-identical and generate samples the same text; and bad folders fail in
// one line.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/interop/safetensors.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/transformer.h"
#include "tessera/train/run_config.h"
#include "tests/e2e/cli_runner.h"
#include "tests/e2e/run_checkpoint.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// "In the beginning" in the byte tokenizer.
const std::vector<int32_t> kPrompt = {73,  110, 32,  116, 104, 101, 32,  98,
                                      101, 103, 105, 110, 110, 105, 110, 103};

// Tessera's logits [T][V] for the prompt, from the run's newest checkpoint.
std::vector<std::vector<float>> tessera_logits(const std::string& run) {
  const Checkpoint c = load_checkpoint(run);
  model::Transformer m(c.config, 1, int64_t(kPrompt.size()), /*training=*/false);
  std::copy(c.params.begin(), c.params.end(), m.params().begin());
  m.forward(kPrompt.data(), nullptr, 1, int64_t(kPrompt.size()));
  std::vector<std::vector<float>> rows;
  for (size_t t = 0; t < kPrompt.size(); ++t) {
    const float* row = m.logits() + t * c.config.vocab_size;
    rows.emplace_back(row, row + c.config.vocab_size);
  }
  return rows;
}

// The reference's logits [T][V] for the prompt, from the Hugging Face folder.
std::vector<std::vector<double>> reference_logits(const std::string& hf_dir) {
  const std::string tokens = fmt::format("{}", fmt::join(kPrompt, ","));
  const std::string command = "/usr/bin/python3 '" + std::string(TESSERA_SOURCE_DIR) +
                              "/tests/reference/hf_forward.py' --hf '" + hf_dir + "' --tokens " +
                              tokens;
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << "the reference failed (status " << status << "): " << command
                  << "\nIt needs Debian's PyTorch: apt-get install python3-torch";
    return {};
  }
  return nlohmann::json::parse(out).at("logits").get<std::vector<std::vector<double>>>();
}

class ConvertCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }

  void train(const std::string& run, const std::string& model_flags) {
    const CliResult r = run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / run) +
                                kSmallModel + " --set train.steps=3 " + model_flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  // Train, export, compare with the reference, import, compare parameters and samples.
  void round_trip(const std::string& model_flags, const std::string& architecture) {
    ASSERT_NO_FATAL_FAILURE(train("run", model_flags));
    const CliResult e =
        run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf"));
    ASSERT_EQ(e.exit_code, 0) << e.output;
    EXPECT_NE(e.output.find(architecture), std::string::npos) << e.output;

    const auto ours = tessera_logits(dir / "run");
    const auto reference = reference_logits(dir / "hf");
    ASSERT_EQ(reference.size(), ours.size());
    double worst = 0;
    for (size_t t = 0; t < ours.size(); ++t) {
      ASSERT_EQ(reference[t].size(), ours[t].size());
      for (size_t v = 0; v < ours[t].size(); ++v) {
        worst = std::max(worst, std::abs(double(ours[t][v]) - reference[t][v]) /
                                    (1.0 + std::abs(reference[t][v])));
      }
    }
    EXPECT_LT(worst, 2e-5) << "largest relative logit difference";

    const CliResult i = run_cli("convert import --hf " + (dir / "hf") + " --out " + (dir / "back"));
    ASSERT_EQ(i.exit_code, 0) << i.output;
    EXPECT_TRUE(fs::exists(dir / "back/config.toml"));
    const Checkpoint original = load_checkpoint(dir / "run"),
                     imported = load_checkpoint(dir / "back");
    EXPECT_EQ(imported.config.arch, original.config.arch);
    EXPECT_EQ(imported.config.kv_heads(), original.config.kv_heads());
    EXPECT_EQ(imported.config.ffn(), original.config.ffn());
    EXPECT_EQ(imported.config.tie_embeddings, original.config.tie_embeddings);
    EXPECT_EQ(imported.config.moe.n_experts, original.config.moe.n_experts);
    ASSERT_EQ(imported.params.size(), original.params.size());
    EXPECT_EQ(std::memcmp(imported.params.data(), original.params.data(),
                          original.params.size() * sizeof(float)),
              0);

    const std::string sample = " --prompt 'In the' --max-tokens 12 --temperature 0";
    const CliResult a = run_cli("generate --checkpoint " + (dir / "run") + sample);
    const CliResult b = run_cli("generate --checkpoint " + (dir / "back") + sample);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_EQ(a.output, b.output);
  }

  TempDir dir{"tessera-convert-cli"};
};

TEST_F(ConvertCli, Gpt2ExportMatchesTheReferenceAndImportsBitExact) {
  round_trip("", "GPT2LMHeadModel");
}

TEST_F(ConvertCli, LlamaWithGqaAndUntiedHeadMatchesTheReference) {
  round_trip(
      "--set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2"
      " --set model.tie_embeddings=false --set model.ffn_hidden=48 --set model.rope_theta=500",
      "LlamaForCausalLM");
}

TEST_F(ConvertCli, MixtralMatchesTheReference) {
  round_trip(
      "--set model.arch=llama --set model.n_head=4 --set model.n_kv_head=1"
      " --set model.ffn_hidden=16 --set model.moe_experts=4 --set model.moe_top_k=2",
      "MixtralForCausalLM");
}

TEST_F(ConvertCli, GgufRefusesAMixtureOfExpertsByName) {
  ASSERT_NO_FATAL_FAILURE(train("run",
                                "--set model.arch=llama --set model.moe_experts=2"
                                " --set model.moe_top_k=1"));
  expect_one_line_error(run_cli("convert export --format gguf --checkpoint " + (dir / "run") +
                                " --out " + (dir / "model.gguf")),
                        "model.moe_experts");
  EXPECT_FALSE(fs::exists(dir / "model.gguf"));
}

TEST_F(ConvertCli, ImportedWeightsFineTuneWithFreshOptimizerState) {
  ASSERT_NO_FATAL_FAILURE(train("run", ""));
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf")).exit_code,
      0);
  ASSERT_EQ(run_cli("convert import --hf " + (dir / "hf") + " --out " + (dir / "back")).exit_code,
            0);
  const CliResult r = run_cli("train --config " + (dir / "back/config.toml") + " --data " +
                              (dir / "corpus.txt") + " --out " + (dir / "back") +
                              " --set train.steps=2 --set train.batch_size=4 "
                              "--set train.seq_len=32 --set train.eval_every=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fine-tuning the imported weights"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "back/checkpoints/step-000002/COMMIT"));
}

TEST_F(ConvertCli, Bf16ExportImportsRoundedWeights) {
  ASSERT_NO_FATAL_FAILURE(train("run", ""));
  const CliResult e = run_cli("convert export --checkpoint " + (dir / "run/checkpoints") +
                              " --out " + (dir / "hf") + " --dtype bf16");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  ASSERT_EQ(run_cli("convert import --hf " + (dir / "hf") + " --out " + (dir / "back")).exit_code,
            0);
  const Checkpoint original = load_checkpoint(dir / "run"),
                   imported = load_checkpoint(dir / "back");
  ASSERT_EQ(imported.params.size(), original.params.size());
  for (size_t i = 0; i < original.params.size(); ++i) {
    ASSERT_EQ(imported.params[i], bf16_to_f32(f32_to_bf16(original.params[i]))) << i;
  }
}

TEST_F(ConvertCli, ImportCopiesATokenizerFolderForGenerate) {
  const CliResult t = run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok300") + " " +
                              (dir / "corpus.txt"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  ASSERT_NO_FATAL_FAILURE(
      train("run", "--tokenizer " + (dir / "tok300") + " --set model.vocab_size=300"));
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf")).exit_code,
      0);
  const CliResult i = run_cli("convert import --hf " + (dir / "hf") + " --out " + (dir / "back") +
                              " --tokenizer " + (dir / "tok300"));
  ASSERT_EQ(i.exit_code, 0) << i.output;
  // The run folder carries its own copy, as a trained run does.
  fs::remove_all(dir / "tok300");
  EXPECT_TRUE(fs::exists(dir / "back/tokenizer"));
  const std::string sample = " --prompt 'In the' --max-tokens 12 --temperature 0";
  const CliResult a = run_cli("generate --checkpoint " + (dir / "run") + sample);
  const CliResult b = run_cli("generate --checkpoint " + (dir / "back") + sample);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(a.output, b.output);
}

TEST_F(ConvertCli, TrainFineTunesAHuggingFaceFolderInPlaceAndResumes) {
  const CliResult t = run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok300") + " " +
                              (dir / "corpus.txt"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  ASSERT_NO_FATAL_FAILURE(train("run", "--tokenizer " + (dir / "tok300") +
                                           " --set model.vocab_size=300 --set model.arch=llama"));
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf")).exit_code,
      0);
  const std::string fine_tune = "train --config " + (dir / "hf") + " --data " +
                                (dir / "corpus.txt") + " --out " + (dir / "tuned") +
                                " --set train.batch_size=4 --set train.eval_every=0";
  const CliResult first = run_cli(fine_tune + " --set train.steps=2");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("to fine-tune"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("fine-tuning the imported weights"), std::string::npos)
      << first.output;
  // The folder's own tokenizer came with it: the run trains on its tokens, not on bytes.
  EXPECT_TRUE(fs::exists(dir / "tuned/tokenizer/tokenizer.json"));
  const Checkpoint imported = load_checkpoint(dir / "run");
  EXPECT_EQ(imported.config.vocab_size, 300);

  const CliResult again = run_cli(fine_tune + " --set train.steps=3");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("to fine-tune"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("resum"), std::string::npos) << again.output;
  EXPECT_TRUE(fs::exists(dir / "tuned/checkpoints/step-000003/COMMIT"));
}

TEST_F(ConvertCli, PlanReadsAHuggingFaceFolder) {
  ASSERT_NO_FATAL_FAILURE(train("run", "--set model.arch=llama --set model.n_kv_head=1"));
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf")).exit_code,
      0);
  const std::string plan = " --hardware h100 --chips 8 --tokens 1e9 --json";
  const CliResult from_folder = run_cli("plan --model " + (dir / "hf") + plan);
  const CliResult from_config = run_cli("plan --model " + (dir / "run/config.toml") + plan);
  ASSERT_EQ(from_folder.exit_code, 0) << from_folder.output;
  ASSERT_EQ(from_config.exit_code, 0) << from_config.output;
  EXPECT_EQ(nlohmann::json::parse(from_folder.output)["layouts"],
            nlohmann::json::parse(from_config.output)["layouts"]);
}

TEST_F(ConvertCli, SpecialTokensAreRecognisedOnlyWhenAllowed) {
  const CliResult t = run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok300") + " " +
                              (dir / "corpus.txt"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  auto encode = [&](const std::string& text, const std::string& flags) {
    const CliResult r =
        run_command("printf '" + text + "' | " + std::string(TESSERA_BINARY) +
                    " tokenizer encode --json --tokenizer " + (dir / "tok300") + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output).get<std::vector<int32_t>>();
  };
  const std::vector<int32_t> separator = encode("<|endoftext|>", " --allow-special");
  ASSERT_EQ(separator.size(), 1u);
  const std::vector<int32_t> plain_ids = encode("word<|endoftext|>", "");
  const std::vector<int32_t> allowed_ids = encode("word<|endoftext|>", " --allow-special");
  ASSERT_FALSE(allowed_ids.empty());
  EXPECT_EQ(allowed_ids.back(), separator[0]);
  EXPECT_EQ(std::count(plain_ids.begin(), plain_ids.end(), separator[0]), 0);
  EXPECT_GT(plain_ids.size(), allowed_ids.size());

  ASSERT_NO_FATAL_FAILURE(
      train("run", "--tokenizer " + (dir / "tok300") + " --set model.vocab_size=300"));
  const std::string generate = "generate --checkpoint " + (dir / "run") +
                               " --prompt 'In the<|endoftext|>' --max-tokens 4 --temperature 0";
  EXPECT_EQ(run_cli(generate).exit_code, 0);
  const CliResult g = run_cli(generate + " --allow-special");
  EXPECT_EQ(g.exit_code, 0) << g.output;
}

class ConvertBadInput : public ConvertCli {
 protected:
  void SetUp() override {
    ConvertCli::SetUp();
    ASSERT_NO_FATAL_FAILURE(train("run", ""));
    const CliResult e =
        run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf"));
    ASSERT_EQ(e.exit_code, 0) << e.output;
    weights = dir / "hf/model.safetensors";
  }

  std::string read_weights() {
    std::ifstream in(weights, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void write_weights(const std::string& bytes) {
    std::ofstream(weights, std::ios::binary | std::ios::trunc) << bytes;
  }
  CliResult import() {
    return run_cli("convert import --hf " + (dir / "hf") + " --out " + (dir / "imported"));
  }

  std::string weights;
};

TEST_F(ConvertBadInput, CorruptedHeader) {
  std::string bytes = read_weights();
  bytes[8 + 20] = '\x01';
  write_weights(bytes);
  expect_one_line_error(import(), "model.safetensors: the header is not valid JSON");
  uint64_t too_long = bytes.size();
  std::memcpy(bytes.data(), &too_long, 8);
  write_weights(bytes);
  expect_one_line_error(import(), "runs past the end of the file");
}

TEST_F(ConvertBadInput, OverlappingOffsets) {
  const std::string bytes = read_weights();
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const std::string data = bytes.substr(8 + n);
  // Two tensors of the same shape: the later one's bytes now alias the earlier one's.
  header["transformer.h.0.ln_1.bias"]["data_offsets"] =
      header["transformer.h.0.ln_1.weight"]["data_offsets"];
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  n = text.size();
  std::string length(8, '\0');
  std::memcpy(length.data(), &n, 8);
  write_weights(length + text + data);
  const CliResult r = import();
  expect_one_line_error(r, "overlaps tensor");
  EXPECT_NE(r.output.find("transformer.h.0.ln_1."), std::string::npos) << r.output;
}

TEST_F(ConvertBadInput, MissingTensor) {
  const interop::SafetensorsFile file(weights);
  std::vector<std::pair<const interop::SafetensorsEntry*, std::vector<float>>> kept;
  for (const interop::SafetensorsEntry& e : file.header().tensors) {
    if (e.name == "transformer.h.1.attn.c_proj.weight") continue;
    kept.emplace_back(&e, std::vector<float>(size_t(e.numel())));
    file.read_f32(e, kept.back().second);
  }
  std::vector<interop::SafetensorsTensor> tensors;
  for (const auto& [entry, values] : kept) {
    tensors.push_back({entry->name, entry->shape, [&values = values](std::span<float> out) {
                         std::copy(values.begin(), values.end(), out.begin());
                       }});
  }
  const fs::path rewritten = dir / "rewritten.safetensors";
  interop::write_safetensors(rewritten, tensors, DType::f32, {{"format", "pt"}});
  fs::rename(rewritten, weights);
  expect_one_line_error(import(), "missing tensor 'transformer.h.1.attn.c_proj.weight'");
  EXPECT_FALSE(fs::exists(dir / "imported/checkpoints"));
}

TEST_F(ConvertBadInput, FlagsAndFolders) {
  expect_one_line_error(run_cli("convert export --checkpoint " + (dir / "run") + " --out " +
                                (dir / "x") + " --dtype f16"),
                        "--dtype");
  expect_one_line_error(run_cli("convert import --hf " + (dir / "hf")), "--out");
  expect_one_line_error(
      run_cli("convert import --hf " + (dir / "nowhere") + " --out " + (dir / "x")),
      "nowhere/config.json");
  // Any trained vocabulary holds more than the byte model's 256 tokens.
  ASSERT_EQ(run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                    (dir / "corpus.txt"))
                .exit_code,
            0);
  expect_one_line_error(run_cli("convert import --hf " + (dir / "hf") + " --out " + (dir / "x") +
                                " --tokenizer " + (dir / "tok")),
                        "vocab_size");
  ASSERT_EQ(import().exit_code, 0);
  expect_one_line_error(import(), "already holds checkpoint");
  const CliResult r = run_cli("convert frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown subcommand 'frobnicate'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessera::testing
