// `tessera train --dry-run` through the real CLI: Narayanan et al.'s 1T layout on 3072 ranks is
// planned in seconds and little memory, its fullest rank holds what `tessera plan --layout`
// reports for the same layout, and --world without --dry-run or a world the mesh does not fit is
// refused.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

TEST(DryRunCli, ATrillionParametersOn3072RanksInSecondsAndThePlannersMemory) {
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = run_cli("train --dry-run --config " + kConfigs + "gpt-1t.toml");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 30);
  rusage children{};
  getrusage(RUSAGE_CHILDREN, &children);
  EXPECT_LT(children.ru_maxrss, 2L << 20) << "KiB";  // the largest child so far, this one included
  for (const char* part : {"dry run: 3072 ranks", "interleaved", "1.01T parameters", "first ",
                           "middle ", "last ", "fullest: rank 0"}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  }

  const CliResult planned = run_cli("plan --model " + kConfigs +
                                    "gpt-1t.toml --hardware a100-80gb --chips 3072 "
                                    "--global-batch 3072 --precision bf16 --json --layout "
                                    "dp=6,tp=8,pp=64,zero=0,mb=1,recompute=full,vpp=2,sp=0");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const double total = nlohmann::json::parse(planned.output)["memory_bytes"]["total"].get<double>();
  const std::string fullest = fmt::format(
      "fullest: rank 0 (pipeline stage 0, tp rank 0), {:.2f} GiB", total / double(1 << 30));
  EXPECT_NE(r.output.find(fullest), std::string::npos) << fullest << "\n" << r.output;
}

TEST(DryRunCli, AWorldIsForTheDryRunAndMustFitTheMesh) {
  expect_one_line_error(run_cli("train --world 4"), "--world is for --dry-run");
  expect_one_line_error(run_cli("train --dry-run --world 3"), "the job has 3");
}

}  // namespace
}  // namespace tessera::testing
