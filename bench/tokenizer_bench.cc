// Times encoding a text file with a tokenizer directory at each of the given thread counts in
// turn and prints one 'RESULT {...}' JSON line. Per thread count: the first encode by a freshly
// loaded tokenizer (empty piece cache) and the median of the repeats, in MB/s of input. The
// counts run one after the other, not interleaved: after a parallel encode OpenMP's idle
// workers spin for a while, which would slow a single-thread encode right after it.
//   tokenizer_bench TOKENIZER_DIR TEXT_FILE THREADS[,THREADS...] [REPEATS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/threading.h"
#include "tessera/tokenizer/tokenizer.h"

using namespace tessera;

namespace {

double mb_per_s(const tokenizer::Tokenizer& tokenizer, const std::string& text, size_t& tokens) {
  const auto start = std::chrono::steady_clock::now();
  tokens = tokenizer.encode(text).size();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return text.size() / s / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fputs("usage: tokenizer_bench TOKENIZER_DIR TEXT_FILE THREADS[,THREADS...] [REPEATS]\n",
               stderr);
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<int> thread_counts;
  for (std::stringstream list(argv[3]); list.good();) {
    std::string item;
    std::getline(list, item, ',');
    thread_counts.push_back(std::stoi(item));
  }
  const int repeats = argc > 4 ? std::stoi(argv[4]) : 20;

  size_t tokens = 0;
  std::vector<double> cold;
  std::vector<std::vector<double>> warm(thread_counts.size());
  for (size_t i = 0; i < thread_counts.size(); ++i) {
    set_num_threads(thread_counts[i]);
    const auto tokenizer = tokenizer::load_tokenizer(argv[1]);
    cold.push_back(mb_per_s(*tokenizer, text, tokens));
    for (int r = 0; r < repeats; ++r) warm[i].push_back(mb_per_s(*tokenizer, text, tokens));
  }
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < thread_counts.size(); ++i) {
    std::sort(warm[i].begin(), warm[i].end());
    runs.push_back({{"threads", thread_counts[i]},
                    {"cold_mb_per_s", cold[i]},
                    {"mb_per_s", warm[i][warm[i].size() / 2]}});
  }
  const nlohmann::json result = {{"bytes", text.size()}, {"tokens", tokens}, {"runs", runs}};
  std::printf("RESULT %s\n", result.dump().c_str());
  return 0;
}
