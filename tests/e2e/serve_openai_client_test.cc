// The official OpenAI client (npm `openai`) against `tessera serve`: completions and chat, whole
// and streamed, seeded text that holds under concurrent requests, and tool calls. The checks live
// in tests/serve/openai_client/client_test.mjs; scripts/setup.sh --test installs node and the
// client.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/e2e/cli_runner.h"
#include "tests/e2e/server_process.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

TEST(ServeOpenAiClient, OfficialClientPassesEveryCheck) {
  if (run_command("node --version").exit_code != 0) {
    GTEST_SKIP() << "node is missing: run scripts/setup.sh --test";
  }
  if (!fs::exists(kOpenAiClientDir / "node_modules" / "openai")) {
    GTEST_SKIP() << kOpenAiClientDir / "node_modules"
                 << " is missing: run scripts/setup.sh --test";
  }
  TempDir dir("serve-openai-client");
  const std::string run = train_servable_checkpoint(dir, /*max_seq=*/1024);
  // One rank, then the model split over two tensor-parallel ranks under mpirun.
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(fmt::format("{} rank(s)", ranks));
    ServerProcess server("--checkpoint " + run +
                             " --api-key client-test-key --model-name tiny-lm --threads 1 --tp " +
                             std::to_string(ranks),
                         ranks);
    const CliResult client = run_command(
        "node '" + (kOpenAiClientDir / "client_test.mjs").string() +
        "' http://127.0.0.1:" + std::to_string(server.port()) + "/v1 client-test-key tiny-lm");
    EXPECT_EQ(client.exit_code, 0) << client.output << "\n--- server ---\n" << server.output();
    EXPECT_EQ(checks_passed(client.output), 8u) << client.output;
    std::printf("%s", client.output.c_str());
    server.expect_clean_stop();
  }
}

}  // namespace
}  // namespace tessera::testing
