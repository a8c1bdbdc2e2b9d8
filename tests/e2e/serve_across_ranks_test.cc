// `mpirun tessera serve --tp/--pp/--ep` against one rank, over real HTTP: for GPT-2 with GPT-2's
// vocabulary, Llama with grouped-query attention and a mixture of experts at tp = 2, pp = 2 and
// tp = 2 x pp = 2, and the mixture at ep = 2, 16 prompts sent at once get the same greedy
// completions, and the log-probabilities of every generated token agree to 1e-5 (f32). In bf16 and
// with int8 weights the ranks round and quantise their own slices, so there only the first token's
// log-probability is compared, within kLowPrecisionTolerance.
#include <fmt/format.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/e2e/server_process.h"
#include "tests/metric_value.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

constexpr int kPrompts = 16;
constexpr double kF32Tolerance = 1e-5;
constexpr double kLowPrecisionTolerance = 0.05;

const std::string kModelShape =
    " --set model.n_layer=2 --set model.n_head=4 --set model.d_model=32 --set model.max_seq=64"
    " --set train.batch_size=4 --set train.seq_len=64 --set train.steps=15"
    " --set train.eval_every=0 --set train.log_every=10 --set train.threads=1";
const std::string kServedGpt2 = kModelShape + " --set model.vocab_size=50257";
const std::string kServedLlamaGqa = kModelShape + kLlamaGqaFlags;
const std::string kServedMoe = kModelShape + kMoeFlags;

struct Completion {
  std::string text;
  std::vector<double> logprobs;  // of each generated token
};

// The 16 prompts' greedy completions, all requested at once.
std::vector<Completion> complete_all(int port) {
  std::vector<std::future<Completion>> replies;
  for (int i = 0; i < kPrompts; ++i) {
    replies.push_back(std::async(std::launch::async, [port, i] {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(60);
      const json body = {{"model", "tiny"},
                         {"prompt", "In the beginning the word was " + std::to_string(i % 7) +
                                        std::string(size_t(i), ' ') + "and"},
                         {"max_tokens", 8},
                         {"temperature", 0},
                         {"logprobs", 1}};
      const auto r = client.Post("/v1/completions", body.dump(), "application/json");
      if (!r || r->status != 200) return Completion{"request failed: " + (r ? r->body : ""), {}};
      const json reply = json::parse(r->body);
      const json& choice = reply["choices"][0];
      return Completion{choice["text"].get<std::string>(),
                        choice["logprobs"]["token_logprobs"].get<std::vector<double>>()};
    }));
  }
  std::vector<Completion> out;
  for (auto& r : replies) out.push_back(r.get());
  return out;
}

// Checks that every completion's text is the expected one and its tokens' log-probabilities are
// within kF32Tolerance of it; returns the largest difference.
double expect_same_completions(const std::vector<Completion>& got,
                               const std::vector<Completion>& expected) {
  double worst = 0;
  for (int i = 0; i < kPrompts; ++i) {
    EXPECT_EQ(got[i].text, expected[i].text) << "prompt " << i;
    if (got[i].logprobs.size() != expected[i].logprobs.size()) {
      ADD_FAILURE() << "prompt " << i << ": " << got[i].text;
      continue;
    }
    for (size_t t = 0; t < got[i].logprobs.size(); ++t) {
      worst = std::max(worst, std::abs(got[i].logprobs[t] - expected[i].logprobs[t]));
    }
  }
  EXPECT_LE(worst, kF32Tolerance);
  return worst;
}

class ServeAcrossRanks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new TempDir("serve-across-ranks"); }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
    runs_.clear();
  }
  // The run directory of `model`, trained once for the suite.
  static std::string train(const std::string& name, const std::string& model) {
    if (runs_.count(name) == 0) {
      write_file(*dir_ / "corpus.txt", small_corpus());
      const CliResult r =
          run_cli("train --data " + (*dir_ / "corpus.txt") + " --out " + (*dir_ / name) + model);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      runs_[name] = *dir_ / name;
    }
    return runs_[name];
  }
  static std::vector<Completion> served(const std::string& run, const std::string& format,
                                        int ranks, std::string* metrics = nullptr) {
    ServerProcess server("--checkpoint " + run + " --model-name tiny --threads 1 " + format, ranks);
    std::vector<Completion> out = complete_all(server.port());
    if (metrics != nullptr) {
      const auto m = httplib::Client("127.0.0.1", server.port()).Get("/metrics");
      *metrics = m ? m->body : "";
    }
    server.expect_clean_stop();
    return out;
  }
  static inline TempDir* dir_ = nullptr;
  static inline std::map<std::string, std::string> runs_;
};

struct ServingLayout {
  int tp, pp, ep;
  // Speculative decoding: the leader's plan carries the drafts (GPT-2's tp=2 x pp=2 only, as
  // Llama's and the mixture's cover that layout without).
  int draft_tokens = 0;
};

TEST_F(ServeAcrossRanks, EveryLayoutCompletesAsOneRankDoes) {
  const std::vector<std::tuple<std::string, std::string, std::vector<ServingLayout>>> cases = {
      {"gpt2-50257", kServedGpt2, {{2, 1, 1}, {1, 2, 1}, {2, 2, 1, 4}}},
      {"llama-gqa", kServedLlamaGqa, {{2, 1, 1}, {1, 2, 1}, {2, 2, 1}}},
      {"moe", kServedMoe, {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1}}}};
  for (const auto& [name, model, layouts] : cases) {
    const std::string run = train(name, model);
    const std::vector<Completion> one = served(run, "", 1);
    for (const ServingLayout& layout : layouts) {
      const std::string mesh = fmt::format("--tp {} --pp {} --ep {} --draft-tokens {}", layout.tp,
                                           layout.pp, layout.ep, layout.draft_tokens);
      SCOPED_TRACE(name + " " + mesh);
      std::string metrics;
      const std::vector<Completion> two =
          served(run, mesh, layout.tp * layout.pp * layout.ep, &metrics);
      EXPECT_EQ(metric_value(metrics, "tessera_tensor_parallel_ranks"), layout.tp) << metrics;
      EXPECT_EQ(metric_value(metrics, "tessera_pipeline_stages"), layout.pp) << metrics;
      EXPECT_EQ(metric_value(metrics, "tessera_expert_parallel_ranks"), layout.ep) << metrics;
      EXPECT_GT(metric_value(metrics, "tessera_model_communication_seconds_total"), 0) << metrics;
      EXPECT_EQ(metric_value(metrics, "tessera_spec_decode_drafts_total") > 0,
                layout.draft_tokens > 0)
          << metrics;
      const double worst = expect_same_completions(two, one);
      std::printf("  %s with %s: worst log-probability difference %.2e over %d prompts\n",
                  name.c_str(), mesh.c_str(), worst, kPrompts);
    }
  }
}

TEST_F(ServeAcrossRanks, TwoRanksInBf16AndInt8StayCloseToOne) {
  const std::string run = train("gpt2-50257", kServedGpt2);
  for (const std::string format : {"--precision bf16", "--quantize int8"}) {
    SCOPED_TRACE(format);
    const std::vector<Completion> one = served(run, format, 1);
    const std::vector<Completion> two = served(run, format + " --tp 2", 2);
    double worst = 0;
    int same = 0;
    for (int i = 0; i < kPrompts; ++i) {
      ASSERT_FALSE(one[i].logprobs.empty() || two[i].logprobs.empty()) << two[i].text;
      worst = std::max(worst, std::abs(two[i].logprobs[0] - one[i].logprobs[0]));
      same += two[i].text == one[i].text;
    }
    EXPECT_LE(worst, kLowPrecisionTolerance);
    std::printf(
        "  %s: worst first-token log-probability difference %.2e, %d of %d completions "
        "identical\n",
        format.c_str(), worst, same, kPrompts);
  }
}

// A Hugging Face folder exported from a checkpoint loads onto two tensor-parallel ranks, each
// taking its slices of the folder's whole tensors, and completes as the checkpoint does on one.
TEST_F(ServeAcrossRanks, AHuggingFaceFolderServesSplitAsItsCheckpointDoes) {
  const std::string run = train("llama-gqa", kServedLlamaGqa);
  const std::string hf = *dir_ / "llama-gqa-hf";
  const CliResult exported = run_cli("convert export --checkpoint " + run + " --out " + hf);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const std::vector<Completion> one = served(run, "", 1);
  expect_same_completions(served(hf, "--tp 2", 2), one);
}

// The rank of an mpirun job (a child of the launcher) whose environment names it `rank`; -1 if
// none.
pid_t rank_process(pid_t launcher, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    pid_t parent = 0;
    if (!(stat >> pid >> comm >> state >> parent) || parent != launcher) continue;
    std::ifstream environ(entry.path() / "environ");
    const std::string env((std::istreambuf_iterator<char>(environ)), {});
    if (env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) {
      return pid_t(std::stoi(pid));
    }
  }
  return -1;
}

TEST_F(ServeAcrossRanks, ARankThatDiesEndsTheJobNamingIt) {
  const std::string run = train("gpt2-50257", kServedGpt2);
  ServerProcess server("--checkpoint " + run + " --model-name tiny --threads 1 --tp 2", 2);
  ASSERT_EQ(complete_all(server.port()).size(), size_t(kPrompts));
  const pid_t follower = rank_process(server.pid(), 1);
  ASSERT_GT(follower, 0) << "no rank 1 under mpirun (pid " << server.pid() << ")";
  ASSERT_EQ(kill(follower, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  server.stop(0);  // waits for the job to end by itself
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 15) << server.output();
  EXPECT_NE(server.output().find("rank 1"), std::string::npos) << server.output();
  std::printf("  the job ended %.1f s after rank 1 was killed\n", seconds);
}

}  // namespace
}  // namespace tessera::testing
