// Next-token log-probabilities and greedy continuations of one token sequence, from Tessera's
// forward pass on a checkpoint's weights and from llama.cpp (node-llama-cpp's prebuilt CPU build,
// tests/llama_cpp/reference.mjs) on a GGUF file, for the tests that set them side by side.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/model/transformer.h"
#include "tests/e2e/cli_runner.h"
#include "tests/e2e/run_checkpoint.h"

namespace tessera::testing {

inline const std::filesystem::path kLlamaCppDir =
    std::filesystem::path(TESSERA_SOURCE_DIR) / "tests/llama_cpp";
inline constexpr int64_t kScored = 64;
inline constexpr int64_t kGreedy = 32;
inline const std::string kText = "In the beginning the word was 3, and it was good. The word";

struct Continuation {
  std::vector<double> logprobs;  // of token t + 1 after tokens [0, t]
  std::vector<int32_t> greedy;
  std::vector<int32_t> text_tokens;
  std::vector<std::vector<int32_t>> prompt_greedy;  // greedy tokens after each extra prompt
};

// The log-softmax of `V` logits, in double.
inline std::vector<double> log_softmax(const float* logits, int64_t V) {
  double top = logits[0];
  for (int64_t v = 1; v < V; ++v) top = std::max(top, double(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[v]) - top);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) out[size_t(v)] = double(logits[v]) - top - std::log(sum);
  return out;
}

// Log-probability of each next token, then greedy tokens, from Tessera's forward pass.
inline Continuation tessera_continuation(const Checkpoint& c, std::vector<int32_t> tokens,
                                         const model::ModelOptions& options = {}) {
  const int64_t V = c.config.vocab_size;
  model::Transformer m(c.config, 1, kScored + kGreedy, /*training=*/false, options);
  std::copy(c.params.begin(), c.params.end(), m.params().begin());
  Continuation out;
  m.forward(tokens.data(), nullptr, 1, kScored);
  for (int64_t t = 0; t + 1 < kScored; ++t)
    out.logprobs.push_back(log_softmax(m.logits() + t * V, V)[size_t(tokens[t + 1])]);
  for (int64_t i = 0; i < kGreedy; ++i) {
    const int64_t T = int64_t(tokens.size());
    m.forward(tokens.data(), nullptr, 1, T);
    const float* last = m.logits() + (T - 1) * V;
    tokens.push_back(int32_t(std::max_element(last, last + V) - last));
    out.greedy.push_back(tokens.back());
  }
  return out;
}

// `prompts`: more token sequences, each continued greedily for `prompt_greedy` tokens.
inline Continuation llama_cpp_continuation(const std::filesystem::path& gguf,
                                           const std::vector<int32_t>& tokens,
                                           const std::filesystem::path& work,
                                           const std::vector<std::vector<int32_t>>& prompts = {},
                                           int64_t prompt_greedy = 0) {
  const std::filesystem::path input = work / "llama_cpp_input.json";
  std::ofstream(input) << nlohmann::json{{"tokens", tokens},
                                         {"greedy", kGreedy},
                                         {"text", kText},
                                         {"prompts", prompts},
                                         {"prompt_greedy", prompt_greedy}};
  const CliResult r = run_command("node '" + (kLlamaCppDir / "reference.mjs").string() + "' '" +
                                  gguf.string() + "' '" + input.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return {};
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.rfind("{\"logprobs\"")));
  return {j.at("logprobs").get<std::vector<double>>(), j.at("greedy").get<std::vector<int32_t>>(),
          j.at("text_tokens").get<std::vector<int32_t>>(),
          j.at("prompt_greedy").get<std::vector<std::vector<int32_t>>>()};
}

}  // namespace tessera::testing
