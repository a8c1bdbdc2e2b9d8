// GGUF in, end to end: models Tessera exported to GGUF import back with `convert import --gguf`
// as the same model: every hyperparameter (RoPE scaling and QK-norm included), the BPE
// tokenizer, and parameters bit-identical in f32 and rounded as the file rounds them in f16, q8_0
// and q4_0; the imported run, and the f32 file read in place, generate the same text. Files that
// are not a model Tessera runs, or are damaged, are refused in one line. (The block decoders:
// tests/interop/ggml_types_test.cc; the container: tests/interop/gguf_reader_test.cc.)
#include <gtest/gtest.h>

#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/q4_0.h"
#include "tessera/core/q8_0.h"
#include "tessera/interop/ggml_types.h"
#include "tessera/model/transformer.h"
#include "tests/e2e/cli_runner.h"
#include "tests/e2e/run_checkpoint.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

const std::string kLlama =
    " --set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2"
    " --set model.tie_embeddings=false --set model.ffn_hidden=48";

// What a parameter of `shape` reads back as from a GGUF file of weights `dtype`: matrices in
// that type (q8_0 or q4_0 where their rows split into its blocks, else f16; a q4_0 file's head
// in q8_0), vectors in f32.
std::vector<float> as_stored(const std::string& dtype, const model::ModelLayout& layout,
                             std::vector<float> params) {
  if (dtype == "f32") return params;
  for (const model::ParamInfo& p : layout.params.entries()) {
    if (p.shape.rank() < 2) continue;
    const int64_t width = p.shape[p.shape.rank() - 1];
    const std::span<float> values(params.data() + p.offset, size_t(p.shape.numel()));
    const bool head = layout.has_head && p.offset == layout.head_weight();
    if (dtype == "q4_0" && !head && width % kQ4_0BlockSize == 0) {
      std::vector<uint8_t> blocks(values.size() / kQ4_0BlockSize * kQ4_0BlockBytes);
      quantize_q4_0(values, blocks);
      interop::ggml_to_f32(interop::GgmlType::q4_0, blocks, values);
    } else if (dtype != "f16" && width % kQ8BlockSize == 0) {
      std::vector<uint8_t> blocks(values.size() / kQ8BlockSize * kQ8BlockBytes);
      quantize_q8_0(values, blocks);
      dequantize_q8_0(blocks, values);
    } else {
      for (float& v : values) v = f16_to_f32(f32_to_f16(v));
    }
  }
  return params;
}

class GgufImportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir / "corpus.txt", small_corpus());
    ASSERT_EQ(run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                      (dir / "corpus.txt"))
                  .exit_code,
              0);
  }

  // Trains `flags` with the BPE tokenizer, exports it as GGUF `dtype`, imports the file and
  // compares the two runs.
  void round_trip(const std::string& name, const std::string& flags, const std::string& dtype) {
    SCOPED_TRACE(name + " " + dtype);
    const std::string run = dir / name, file = dir / (name + "-" + dtype + ".gguf"),
                      back = dir / (name + "-" + dtype + "-back");
    if (!fs::exists(run)) {
      const CliResult t = run_cli("train --data " + (dir / "corpus.txt") + " --out " + run +
                                  " --tokenizer " + (dir / "tok") + kSmallModel +
                                  " --set model.vocab_size=300 --set train.steps=3" + flags);
      ASSERT_EQ(t.exit_code, 0) << t.output;
    }
    const CliResult e = run_cli("convert export --format gguf --dtype " + dtype + " --checkpoint " +
                                run + " --out " + file);
    ASSERT_EQ(e.exit_code, 0) << e.output;
    const CliResult i = run_cli("convert import --gguf " + file + " --out " + back);
    ASSERT_EQ(i.exit_code, 0) << i.output;
    std::printf("%s", i.output.c_str());
    const Checkpoint original = load_checkpoint(run), imported = load_checkpoint(back);
    EXPECT_TRUE(imported.config == original.config);
    const model::ModelLayout layout = model::model_layout(original.config);
    const std::vector<float> want = as_stored(dtype, layout, original.params);
    ASSERT_EQ(imported.params.size(), want.size());
    EXPECT_EQ(std::memcmp(imported.params.data(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_TRUE(fs::exists(fs::path(back) / "tokenizer"));
    if (dtype != "f32") return;
    const std::string sample = " --prompt 'In the beginning' --max-tokens 12 --temperature 0";
    const CliResult a = run_cli("generate --checkpoint " + run + sample);
    const CliResult b = run_cli("generate --checkpoint " + back + sample);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_EQ(a.output, b.output);
    const CliResult in_place = run_cli("generate --checkpoint " + file + sample);
    ASSERT_EQ(in_place.exit_code, 0) << in_place.output;
    EXPECT_EQ(a.output, in_place.output) << "the GGUF file read in place";
  }

  TempDir dir{"tessera-gguf-import"};
};

TEST_F(GgufImportCli, Gpt2ComesBackAsTheSameModel) {
  for (const std::string dtype : {"f32", "f16", "q8_0", "q4_0"}) round_trip("gpt2", "", dtype);
}

TEST_F(GgufImportCli, LlamaWithGqaUntiedHeadAndRopeScalingComesBack) {
  for (const std::string dtype : {"f32", "q8_0", "q4_0"}) round_trip("llama", kLlama, dtype);
  round_trip("llama3-rope",
             kLlama +
                 " --set model.rope_scaling=llama3 --set model.rope_scaling_factor=8"
                 " --set model.rope_original_max_seq=16 --set model.rope_theta=500000",
             "f32");
  round_trip("yarn",
             kLlama +
                 " --set model.rope_scaling=yarn --set model.rope_scaling_factor=4"
                 " --set model.rope_original_max_seq=8",
             "f32");
  round_trip("qwen3", kLlama + " --set model.qk_norm=true", "f32");
}

// `convert export --config` writes the config's model as init_weights(--init-seed) draws it, for
// benchmarks at sizes no run has trained; it takes a checkpoint or a config, not both.
TEST_F(GgufImportCli, AConfigExportsItsModelFreshlyInitialised) {
  const std::string config = kConfigs + "llama-tiny.toml", file = dir / "init.gguf";
  const CliResult e =
      run_cli("convert export --format gguf --config " + config + " --init-seed 7 --out " + file);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const CliResult i = run_cli("convert import --gguf " + file + " --out " + (dir / "init"));
  ASSERT_EQ(i.exit_code, 0) << i.output;
  const Checkpoint imported = load_checkpoint(dir / "init");
  model::Transformer drawn(imported.config, 1, 1, /*training=*/false);
  drawn.init_weights(7);
  ASSERT_EQ(imported.params.size(), drawn.params().size());
  EXPECT_TRUE(std::equal(imported.params.begin(), imported.params.end(), drawn.params().begin()));
  const CliResult both = run_cli("convert export --format gguf --config " + config +
                                 " --checkpoint " + (dir / "init") + " --out " + file);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("give one of --checkpoint DIR"), std::string::npos) << both.output;
}

TEST_F(GgufImportCli, FilesThatAreNoModelTesseraRunsAreRefusedInOneLine) {
  ASSERT_NO_FATAL_FAILURE(round_trip("gpt2", "", "f32"));
  const std::string good = read_all(dir / "gpt2-f32.gguf");
  const auto bad = [&](const std::string& name, std::string bytes) {
    write_file(dir / name, bytes);
    return run_cli("convert import --gguf " + (dir / name) + " --out " + (dir / (name + "-run")));
  };
  std::string other = good;
  const size_t arch = other.find(std::string("gpt2", 4), other.find("general.architecture"));
  ASSERT_NE(arch, std::string::npos);
  other.replace(arch, 4, "gptj");
  expect_one_line_error(bad("gptj.gguf", other), "general.architecture is 'gptj'");
  expect_one_line_error(bad("cut.gguf", good.substr(0, good.size() / 2)), "cut.gguf");
  expect_one_line_error(bad("text.gguf", "not a model"), "not a GGUF file");
  expect_one_line_error(run_cli("convert import --out " + (dir / "x")), "--hf DIR or --gguf FILE");
  for (const std::string name : {"gptj.gguf-run", "cut.gguf-run", "text.gguf-run"}) {
    EXPECT_FALSE(fs::exists(fs::path(dir / name) / "checkpoints")) << name;
  }
}

}  // namespace
}  // namespace tessera::testing
