// Silent corruption, end to end: a byte changed in a run's manifest, an exported safetensors file
// or a tokenizer file is refused by the command that would use it, naming the file at fault; and
// a second job is refused a run folder that a job is writing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/interop/safetensors.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `path` with its one occurrence of `from` replaced by `to`.
void replace_in(const fs::path& path, const std::string& from, const std::string& to) {
  std::string text = read_bytes(path);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " in " << path;
  ASSERT_EQ(text.find(from, at + 1), std::string::npos) << from << " twice in " << path;
  write_file(path, text.replace(at, from.size(), to));
}

void flip_byte(const fs::path& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  const char c = char(f.get());
  f.seekp(std::streamoff(at));
  f.put(char(c ^ 0x01));
}

// The command failed, and its last line is the error naming the file at fault.
void expect_refused(const CliResult& r, const std::string& mentions) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  std::string last = r.output.substr(0, r.output.find_last_not_of('\n') + 1);
  last = last.substr(last.find_last_of('\n') + 1);
  EXPECT_EQ(last.rfind("error: ", 0), 0u) << r.output;
  EXPECT_NE(last.find(mentions), std::string::npos) << r.output;
}

class CorruptionCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  CliResult train(const std::string& extra) {
    return run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / "run") +
                   kSmallModel + " " + extra);
  }
  TempDir dir{"tessera-corruption-cli"};
};

TEST_F(CorruptionCli, AnEditedManifestIsRefusedOnResumeNamingIt) {
  ASSERT_EQ(train("--set train.steps=2").exit_code, 0);
  const fs::path manifest = dir / "run/checkpoints/step-000002/manifest.json";
  const std::string good = read_bytes(manifest);
  const auto tensors = nlohmann::json::parse(good)["tensors"];
  const std::string crc = std::to_string(tensors[1]["crc32"].get<uint32_t>());
  const std::string offset = std::to_string(tensors[1]["offset"].get<uint64_t>());
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"step\": 2", "\"step\": 3"},
           {"\"samples_consumed\": 8", "\"samples_consumed\": 16"},
           {"\"optimizer_steps\": 2", "\"optimizer_steps\": 1"},
           {"\"crc32\": " + crc + ",", "\"crc32\": 1" + crc + ","},
           {"\"offset\": " + offset + ",", "\"offset\": 0,"}}) {
    write_file(manifest, good);
    replace_in(manifest, from, to);
    const CliResult r = train("--set train.steps=4");
    expect_refused(r, manifest.string() + ": checksum mismatch");
    EXPECT_EQ(r.output.find("rank-00000.bin"), std::string::npos) << from << ": " << r.output;
  }
  write_file(manifest, good);
  EXPECT_EQ(train("--set train.steps=4").exit_code, 0);
}

TEST_F(CorruptionCli, AFlippedByteInAnExportIsRefusedOnImportNamingTheFile) {
  ASSERT_EQ(train("--set train.steps=2").exit_code, 0);
  const CliResult e =
      run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const fs::path weights = dir / "hf/model.safetensors";
  uint64_t at = 0;
  {
    const interop::SafetensorsFile file(weights);
    at = file.header().data_start + file.find("transformer.wte.weight")->begin + 5;
  }
  flip_byte(weights, at);
  expect_refused(run_cli("convert import --hf " + (dir / "hf") + " --out " + (dir / "back")),
                 weights.string() + ": checksum mismatch for tensor 'transformer.wte.weight'");
}

TEST_F(CorruptionCli, AFlippedByteInATokenizerFileIsRefusedNamingTheFile) {
  const CliResult t = run_cli("tokenizer train --vocab-size 280 --out " + (dir / "tok") + " " +
                              (dir / "corpus.txt"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string bpe = "--tokenizer " + (dir / "tok") + " --set model.vocab_size=320";
  ASSERT_EQ(train(bpe + " --set train.steps=2").exit_code, 0);

  // The run folder's copy is what generate reads.
  const fs::path copy = dir / "run/tokenizer/ranks.tiktoken";
  const std::string good = read_bytes(copy);
  flip_byte(copy, good.size() - 10);
  expect_refused(run_cli("generate --checkpoint " + (dir / "run") + " --prompt In --max-tokens 2"),
                 copy.string() + ": checksum mismatch");
  // Resuming rewrites it from the dataset's copy, which is checked as it is read.
  ASSERT_EQ(train(bpe + " --set train.steps=4").exit_code, 0);
  EXPECT_EQ(read_bytes(copy), good);
  const fs::path dataset_copy = dir / "run/dataset/tokenizer/ranks.tiktoken";
  flip_byte(dataset_copy, good.size() - 10);
  expect_refused(train(bpe + " --set train.steps=6"),
                 dataset_copy.string() + ": checksum mismatch");

  // A tokenizer folder of one's own has no digests: its ranks' structure is checked instead.
  const fs::path own = dir / "tok/ranks.tiktoken";
  const std::string ranks = read_bytes(own);
  const size_t last_line = ranks.rfind('\n', ranks.size() - 2) + 1;
  flip_byte(own, last_line);
  const std::string line = std::to_string(std::count(ranks.begin(), ranks.end(), '\n'));
  expect_refused(
      run_cli("tokenizer encode --tokenizer " + (dir / "tok") + " < " + (dir / "corpus.txt")),
      own.string() + ":" + line + ":");
}

TEST_F(CorruptionCli, ASecondJobOnTheSameRunFolderIsRefused) {
  const std::string job = std::string(TESSERA_BINARY) + " train --data " + (dir / "corpus.txt") +
                          " --out " + (dir / "run") + kSmallModel;
  // The first job trains until it is killed; the second starts once the first holds the lock.
  const CliResult r =
      run_command(job + " --set train.steps=1000000 >/dev/null 2>&1 & holder=$!; " +
                  "for i in $(seq 400); do grep -q pid " + (dir / "run/.lock") +
                  " 2>/dev/null && break; sleep 0.05; done; echo holder $holder; " + job +
                  " --set train.steps=2 2>&1; rc=$?; kill $holder; wait $holder; exit $rc");
  const std::string holder = r.output.substr(0, r.output.find('\n'));
  ASSERT_EQ(holder.rfind("holder ", 0), 0u) << r.output;
  expect_refused(r, (dir / "run") + ": another training job (pid " + holder.substr(7) + " on host");
}

}  // namespace
}  // namespace tessera::testing
