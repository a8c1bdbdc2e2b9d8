// LoRA adapters served per request (serve --lora): one server holding three adapters answers 48
// concurrent requests spread over the model and the adapters, each with the text (greedy) that a
// server holding that adapter alone, or the model alone, gives; /v1/models lists the adapters.
// Adapters loaded and unloaded while serving (serve --lora-dir) answer the same, within the
// slots, from the adapter folder alone, and an unloaded adapter's cached prompts never serve the
// adapter loaded into its slot next.
#include <httplib.h>

#include <chrono>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/cli_runner.h"
#include "tests/e2e/server_process.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

std::string bible(const std::string& range) {
  const CliResult r = run_command("bible -f '" + range + "' | cut -d' ' -f2-");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

const std::vector<std::string> kAdapterPrompts = {
    "In the beginning",    "And God said", "And the LORD", "Blessed is the man",
    "The earth was",       "Let there be", "And Moses",    "O LORD",
    "And it came to pass", "Praise ye",    "The heavens",  "And he said"};

// Long enough to fill whole KV blocks, which the prefix cache keeps.
const std::string kLongPrompt =
    "In the beginning God created the heaven and the earth. And the earth was without form";

// The greedy text of each prompt from `model` at `port`, all sent at once.
std::vector<std::string> complete(int port,
                                  const std::vector<std::pair<std::string, std::string>>& asks) {
  std::vector<std::future<std::string>> replies;
  for (const auto& [model, prompt] : asks) {
    replies.push_back(std::async(std::launch::async, [port, model, prompt] {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(120);
      const json body = {{"model", model},
                         {"prompt", prompt},
                         {"max_tokens", prompt == kLongPrompt ? 8 : 16},
                         {"temperature", 0}};
      auto r = client.Post("/v1/completions", body.dump(), "application/json");
      if (!r || r->status != 200)
        return std::string("<failed: ") + (r ? r->body : "no reply") + ">";
      const json reply = json::parse(r->body);
      EXPECT_EQ(reply["model"], model);
      return reply["choices"][0]["text"].get<std::string>();
    }));
  }
  std::vector<std::string> texts;
  for (auto& f : replies) texts.push_back(f.get());
  return texts;
}

// A model (a BPE-tokenized GPT-2 trained on Genesis, exported as a Hugging Face folder, "hf") and
// three adapters of different ranks and targets, each trained on other text, one of them read as
// a PEFT adapter folder: their paths by name.
std::map<std::string, std::string> train_model_and_adapters(const TempDir& dir) {
  write_file(dir / "base.txt", bible("Gen1:1-Gen3:24"));
  write_file(dir / "exodus.txt", bible("Ex1:1-Ex3:22"));
  write_file(dir / "psalms.txt", bible("Ps1:1-Ps9:20"));
  write_file(dir / "counting.txt", small_corpus());
  EXPECT_EQ(run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                    (dir / "base.txt") + " " + (dir / "exodus.txt") + " " + (dir / "psalms.txt"))
                .exit_code,
            0);
  const std::string model =
      " --set model.n_layer=2 --set model.n_head=4 --set model.d_model=64 --set model.max_seq=64"
      " --set model.vocab_size=300 --set train.batch_size=8 --set train.seq_len=64"
      " --set train.eval_every=0 --set train.warmup_steps=2 --set train.threads=1";
  EXPECT_EQ(
      run_cli("train --data " + (dir / "base.txt") + " --tokenizer " + (dir / "tok") + " --out " +
              (dir / "base") + model + " --set train.steps=150 --set train.lr=1e-2")
          .exit_code,
      0);
  EXPECT_EQ(
      run_cli("convert export --checkpoint " + (dir / "base") + " --out " + (dir / "hf")).exit_code,
      0);
  const std::vector<std::pair<std::string, std::string>> adapters = {
      {"exodus", "--set train.lora_rank=8 --set train.lora_targets=attention,mlp"},
      {"psalms", "--set train.lora_rank=4 --set train.lora_targets=qkv,mlp_in"},
      {"counting", "--set train.lora_rank=2 --set train.lora_targets=mlp"}};
  for (const auto& [name, lora] : adapters) {
    const CliResult r = run_cli("train --config " + (dir / "hf") + " --data " +
                                (dir / (name + ".txt")) + " --out " + (dir / name) +
                                " --set train.batch_size=8 --set train.seq_len=64"
                                " --set train.steps=60 --set train.lr=3e-2 --set train.eval_every=0"
                                " --set train.threads=1 " +
                                lora);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  EXPECT_EQ(run_cli("convert export --format peft --checkpoint " + (dir / "counting") + " --out " +
                    (dir / "counting-peft"))
                .exit_code,
            0);
  return {
      {"exodus", dir / "exodus"}, {"psalms", dir / "psalms"}, {"counting", dir / "counting-peft"}};
}

int post(httplib::Client& client, const std::string& path, const json& body) {
  auto r = client.Post(path, body.dump(), "application/json");
  return r ? r->status : -1;
}

// A server that loads adapters from `dir` while it runs, two at a time: each answers as it did
// loaded at start (`mixed`: the 12 prompts of the model, exodus, psalms and counting in turn;
// `psalms_long`: psalms' text of kLongPrompt).
void check_runtime_adapters(const TempDir& dir, const std::vector<std::string>& mixed,
                            const std::string& psalms_long) {
  ServerProcess server("--checkpoint " + (dir / "hf") + " --threads 1 --lora-dir " +
                       dir.path().string() + " --max-loras 2");
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(120);
  const std::string load = "/v1/load_lora_adapter", unload = "/v1/unload_lora_adapter";
  EXPECT_EQ(post(client, load, {{"lora_name", "exodus"}, {"lora_path", "exodus"}}), 200);
  EXPECT_EQ(post(client, load, {{"lora_name", "counting"}, {"lora_path", dir / "counting-peft"}}),
            200);
  EXPECT_EQ(post(client, load, {{"lora_name", "counting"}, {"lora_path", "counting-peft"}}), 400);
  EXPECT_EQ(post(client, load, {{"lora_name", "psalms"}, {"lora_path", "psalms"}}), 400)
      << "a third adapter in two slots";
  EXPECT_EQ(post(client, load, {{"lora_name", "up"}, {"lora_path", "../"}}), 403);
  EXPECT_EQ(post(client, load, {{"lora_name", "etc"}, {"lora_path", "/etc"}}), 403);
  EXPECT_EQ(post(client, load, {{"lora_name", "none"}, {"lora_path", "absent"}}), 404);
  EXPECT_EQ(post(client, unload, {{"lora_name", "absent"}}), 404);

  std::vector<std::pair<std::string, std::string>> asks;
  for (const std::string& m : {"exodus", "hf:counting"}) {
    for (const std::string& p : kAdapterPrompts) asks.push_back({m, p});
  }
  asks.push_back({"exodus", kLongPrompt});
  const std::vector<std::string> texts = complete(server.port(), asks);
  for (size_t i = 0; i < kAdapterPrompts.size(); ++i) {
    EXPECT_EQ(texts[i], mixed[kAdapterPrompts.size() + i]) << "exodus: " << kAdapterPrompts[i];
    EXPECT_EQ(texts[kAdapterPrompts.size() + i], mixed[3 * kAdapterPrompts.size() + i])
        << "counting: " << kAdapterPrompts[i];
  }
  // Unloaded while a request may still run with it: the request ends as usual, new ones find no
  // adapter,
  // and its slot takes another adapter once the request is done.
  auto running = std::async(std::launch::async, [&] {
    return complete(server.port(), {{"exodus", kAdapterPrompts[0]}})[0];
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(post(client, unload, {{"lora_name", "exodus"}}), 200);
  EXPECT_EQ(running.get(), mixed[kAdapterPrompts.size()]);
  EXPECT_EQ(
      post(client, "/v1/completions", {{"model", "exodus"}, {"prompt", "a"}, {"max_tokens", 1}}),
      404);
  EXPECT_EQ(post(client, load, {{"lora_name", "psalms"}, {"lora_path", "psalms"}}), 200);
  auto listed = client.Get("/v1/models");
  ASSERT_TRUE(listed);
  const json models = json::parse(listed->body)["data"];
  ASSERT_EQ(models.size(), 3u) << listed->body;
  EXPECT_EQ(models[1]["id"], "psalms");  // in exodus's slot
  EXPECT_EQ(models[2]["id"], "counting");
  EXPECT_EQ(complete(server.port(), {{"psalms", kLongPrompt}})[0], psalms_long)
      << "the slot's last adapter's cached prompt answered for the new one";
  std::vector<std::pair<std::string, std::string>> psalms;
  for (const std::string& p : kAdapterPrompts) psalms.push_back({"psalms", p});
  const std::vector<std::string> sung = complete(server.port(), psalms);
  for (size_t i = 0; i < kAdapterPrompts.size(); ++i) {
    EXPECT_EQ(sung[i], mixed[2 * kAdapterPrompts.size() + i]) << "psalms: " << kAdapterPrompts[i];
  }
}

// Split over tensor-parallel ranks and pipeline stages, each rank holding its slice of every
// adapter, the server answers as one rank does; so does a LoRA run served whole, its adapters
// merged, over tensor-parallel ranks.
void check_adapters_across_ranks(const TempDir& dir, const std::map<std::string, std::string>& path,
                                 const std::vector<std::string>& mixed) {
  {
    ServerProcess split("--checkpoint " + (dir / "hf") +
                            " --threads 1 --tp 2 --pp 2 --lora exodus=" + path.at("exodus") +
                            " --lora psalms=" + path.at("psalms"),
                        4);
    std::vector<std::pair<std::string, std::string>> asks;
    for (const std::string& m : {"exodus", "psalms"}) {
      for (const std::string& p : kAdapterPrompts) asks.push_back({m, p});
    }
    const std::vector<std::string> texts = complete(split.port(), asks);
    for (size_t i = 0; i < asks.size(); ++i) {
      EXPECT_EQ(texts[i], mixed[kAdapterPrompts.size() + i])
          << asks[i].first << ": " << asks[i].second;
    }
  }
  std::vector<std::pair<std::string, std::string>> asks;
  for (const std::string& p : kAdapterPrompts) asks.push_back({"exodus", p});
  std::vector<std::string> merged;
  {
    ServerProcess one("--checkpoint " + path.at("exodus") + " --threads 1");
    merged = complete(one.port(), asks);
  }
  ServerProcess split("--checkpoint " + path.at("exodus") + " --threads 1 --tp 2", 2);
  EXPECT_EQ(complete(split.port(), asks), merged);
}

TEST(ServeLora, MixedAdaptersAnswerAsEachAlone) {
  TempDir dir{"tessera-serve-lora"};
  const std::map<std::string, std::string> path = train_model_and_adapters(dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::vector<std::pair<std::string, std::string>> asks;  // 48: every prompt with each model
  for (const std::string& m : {"hf", "exodus", "hf:psalms", "counting"}) {
    for (const std::string& p : kAdapterPrompts) asks.push_back({m, p});
  }
  std::vector<std::string> mixed;
  std::string psalms_long;
  double mixed_s = 0, base_s = 0;
  {
    ServerProcess server(
        "--checkpoint " + (dir / "hf") + " --threads 1 --lora exodus=" + path.at("exodus") +
        " --lora psalms=" + path.at("psalms") + " --lora counting=" + path.at("counting"));
    httplib::Client client("127.0.0.1", server.port());
    auto listed = client.Get("/v1/models");
    ASSERT_TRUE(listed && listed->status == 200);
    const json models = json::parse(listed->body)["data"];
    ASSERT_EQ(models.size(), 4u) << listed->body;
    EXPECT_EQ(models[1]["id"], "exodus");
    EXPECT_EQ(models[1]["parent"], "hf");
    const auto t0 = std::chrono::steady_clock::now();
    mixed = complete(server.port(), asks);
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::pair<std::string, std::string>> base_only;
    for (const auto& a : asks) base_only.push_back({"hf", a.second});
    complete(server.port(), base_only);
    const auto t2 = std::chrono::steady_clock::now();
    mixed_s = std::chrono::duration<double>(t1 - t0).count();
    base_s = std::chrono::duration<double>(t2 - t1).count();
    auto unknown =
        client.Post("/v1/completions", R"({"model": "hf:nope", "prompt": "a", "max_tokens": 1})",
                    "application/json");
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->status, 404) << unknown->body;
    EXPECT_EQ(post(client, "/v1/load_lora_adapter", {{"lora_name", "a"}, {"lora_path", "b"}}), 404)
        << "loading while serving without --lora-dir";
    psalms_long = complete(server.port(), {{"psalms", kLongPrompt}})[0];
  }
  check_runtime_adapters(dir, mixed, psalms_long);
  check_adapters_across_ranks(dir, path, mixed);
  std::printf(
      "48 requests of 16 tokens, one server: mixed over the model and 3 adapters %.2f s, "
      "the model alone %.2f s (%.2fx)\n",
      mixed_s, base_s, base_s / mixed_s);
  // Each model alone: its own server.
  int differ = 0;
  for (const std::string& m : {"hf", "exodus", "psalms", "counting"}) {
    const std::string name = m == "hf" ? "hf" : m;
    const std::string lora = m == "hf" ? "" : " --lora " + m + "=" + path.at(m);
    ServerProcess alone("--checkpoint " + (dir / "hf") + " --threads 1" + lora);
    std::vector<std::pair<std::string, std::string>> own;
    for (const std::string& p : kAdapterPrompts) own.push_back({name, p});
    const std::vector<std::string> texts = complete(alone.port(), own);
    for (size_t i = 0; i < kAdapterPrompts.size(); ++i) {
      const size_t at = (m == "hf"       ? 0
                         : m == "exodus" ? 1
                         : m == "psalms" ? 2
                                         : 3) *
                            kAdapterPrompts.size() +
                        i;
      EXPECT_EQ(mixed[at], texts[i]) << m << ": " << kAdapterPrompts[i];
      if (m != "hf" && texts[i] != mixed[i]) ++differ;
    }
  }
  EXPECT_GE(differ, 12) << "the adapters hardly change what the model writes: " << mixed[0] << " / "
                        << mixed[12] << " / " << mixed[24] << " / " << mixed[36];
}

}  // namespace
}  // namespace tessera::testing
