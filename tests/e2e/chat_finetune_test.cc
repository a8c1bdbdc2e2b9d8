// Fine-tuning on chat data end to end: a Llama trained on verses of the King James Bible, exported
// as a Hugging Face folder, is fine-tuned on questions and answers made from other verses
// (prepare --chat, with packed documents kept apart), and its held-out loss on the answers falls,
// with every weight trained and with LoRA adapters alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/cli_runner.h"

namespace fs = std::filesystem;

namespace tessera::testing {
namespace {

constexpr char kTemplate[] =
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}";

struct Verse {
  std::string reference, text;  // "Ge1:3", "And God said, ..."
};

std::vector<Verse> verses(const std::string& range) {
  const CliResult r = run_command("bible -f '" + range + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<Verse> out;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    if (space != std::string::npos) out.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  return out;
}

// The held-out losses of metrics.jsonl, in step order.
std::vector<double> held_out_losses(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("val_loss")) losses.push_back(record["val_loss"].get<double>());
  }
  return losses;
}

TEST(ChatFineTune, HeldOutAnswerLossFallsAndPromptsAreNotTrainedOn) {
  TempDir dir{"tessera-chat-finetune"};
  std::string corpus, jsonl;
  for (const Verse& v : verses("Gen1:1-Gen5:32")) corpus += v.text + "\n";
  for (const Verse& v : verses("Gen6:1-Gen9:29")) {
    const nlohmann::json example = {
        {"messages",
         {{{"role", "user"}, {"content", "Recite " + v.reference + "."}},
          {{"role", "assistant"}, {"content", v.text}}}}};
    jsonl += example.dump() + "\n";
  }
  write_file(dir / "corpus.txt", corpus);
  write_file(dir / "chat.jsonl", jsonl);
  write_file(dir / "template.jinja", kTemplate);

  ASSERT_EQ(run_cli("tokenizer train --vocab-size 400 --out " + (dir / "tok") + " " +
                    (dir / "corpus.txt"))
                .exit_code,
            0);
  const CliResult base =
      run_cli("train --data " + (dir / "corpus.txt") + " --tokenizer " + (dir / "tok") + " --out " +
              (dir / "base") + kSmallModel +
              " --set model.vocab_size=400 --set model.arch=llama --set model.tie_embeddings=false"
              " --set train.steps=60");
  ASSERT_EQ(base.exit_code, 0) << base.output;
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "base") + " --out " + (dir / "hf")).exit_code,
      0);

  const CliResult prepared =
      run_cli("prepare --chat --tokenizer " + (dir / "hf") + " --chat-template " +
              (dir / "template.jinja") + " --val-fraction 0.1 --out " + (dir / "chat") + " " +
              (dir / "chat.jsonl"));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;

  const CliResult tuned = run_cli(
      "train --config " + (dir / "hf") + " --data " + (dir / "chat") + " --out " + (dir / "tuned") +
      " --set train.batch_size=4 --set train.seq_len=32 --set train.steps=40 --set train.lr=3e-3"
      " --set train.warmup_steps=2 --set train.eval_every=40 --set train.eval_batches=4"
      " --set train.document_mask=true");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("held-out loss"), std::string::npos) << tuned.output;
  EXPECT_NE(tuned.output.find("on the trained tokens"), std::string::npos) << tuned.output;
  const std::vector<double> held_out = held_out_losses(dir / "tuned");
  ASSERT_EQ(held_out.size(), 2u) << tuned.output;
  EXPECT_LT(held_out[1], held_out[0] - 0.2) << tuned.output;
  std::printf("held-out loss on the answers: %.4f -> %.4f\n", held_out[0], held_out[1]);

  // LoRA adapters on the frozen model learn the answers too, if more slowly at this size: the
  // embeddings and the head, which the chat format's new turns most need, stay as they were.
  const CliResult adapted = run_cli(
      "train --config " + (dir / "hf") + " --data " + (dir / "chat") + " --out " +
      (dir / "adapted") +
      " --set train.batch_size=4 --set train.seq_len=32 --set train.steps=40 --set train.lr=1e-2"
      " --set train.warmup_steps=2 --set train.eval_every=40 --set train.eval_batches=4"
      " --set train.document_mask=true --set train.lora_rank=8 --set train.lora_alpha=16");
  ASSERT_EQ(adapted.exit_code, 0) << adapted.output;
  EXPECT_NE(adapted.output.find("training LoRA adapters"), std::string::npos) << adapted.output;
  const std::vector<double> adapted_loss = held_out_losses(dir / "adapted");
  ASSERT_EQ(adapted_loss.size(), 2u) << adapted.output;
  EXPECT_EQ(adapted_loss[0], held_out[0]);  // the same model before its first step
  EXPECT_LT(adapted_loss[1], adapted_loss[0] - 0.01) << adapted.output;
  std::printf("held-out loss on the answers, LoRA rank 8: %.4f -> %.4f\n", adapted_loss[0],
              adapted_loss[1]);

  // The same examples trained on all their tokens score differently from the first evaluation
  // on: the prompts' tokens were left out of the assistant-only loss.
  ASSERT_EQ(run_cli("prepare --chat --chat-loss all --tokenizer " + (dir / "hf") +
                    " --chat-template " + (dir / "template.jinja") + " --val-fraction 0.1 --out " +
                    (dir / "chat_all") + " " + (dir / "chat.jsonl"))
                .exit_code,
            0);
  const CliResult all = run_cli("train --config " + (dir / "hf") + " --data " + (dir / "chat_all") +
                                " --out " + (dir / "all") +
                                " --set train.batch_size=4 --set train.seq_len=32"
                                " --set train.steps=1 --set train.eval_batches=4");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  const std::vector<double> all_tokens = held_out_losses(dir / "all");
  ASSERT_FALSE(all_tokens.empty());
  EXPECT_NE(all_tokens[0], held_out[0]);

  // train.document_mask needs the dataset's end-of-text token.
  ASSERT_EQ(run_cli("prepare --out " + (dir / "bytes") + " " + (dir / "corpus.txt")).exit_code, 0);
  expect_one_line_error(
      run_cli("train --data " + (dir / "bytes") + " --out " + (dir / "byte_run") + kSmallModel +
              " --set train.steps=1 --set train.document_mask=true"),
      "train.document_mask");
}

}  // namespace
}  // namespace tessera::testing
