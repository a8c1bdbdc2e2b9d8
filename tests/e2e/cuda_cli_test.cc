// Training and generating on a CUDA device from the command line. Where no device is (or the build
// has no CUDA backend) asking for one fails at once with the reason and trains nothing; where one
// is, a run on it follows the same run on the CPU, checkpoints and resumes, and greedy text is the
// CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tessera/kernels/device.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

class CudaCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  CliResult train(const std::string& out, const std::string& extra) {
    return run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kSmallModel +
                   " --set train.steps=8 " + extra);
  }
  TempDir dir{"tessera-cuda-cli"};
};

TEST_F(CudaCli, AskingForAnAbsentDeviceFailsWithTheReason) {
  if (kernels::cuda_device_count() > 0) GTEST_SKIP() << "SKIPPED: this machine has a CUDA device";
  const CliResult r = train("run", "--set train.device=cuda");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("train.device = cuda, but " + kernels::cuda_unavailable_reason()),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "run/checkpoints")) << r.output;
  EXPECT_TRUE(training_losses(dir / "run").empty());

  ASSERT_EQ(train("cpu", "--set train.steps=2").exit_code, 0);
  for (const std::string command : {"generate --prompt In --max-tokens 4", "serve --port 0"}) {
    const CliResult c = run_cli(command + " --checkpoint " + (dir / "cpu") + " --device cuda");
    EXPECT_NE(c.exit_code, 0) << command << ": " << c.output;
    EXPECT_NE(c.output.find("--device cuda, but " + kernels::cuda_unavailable_reason()),
              std::string::npos)
        << command << ": " << c.output;
  }
}

TEST_F(CudaCli, ADeviceRunFollowsTheCpuRunAndResumes) {
  if (kernels::cuda_device_count() == 0) {
    GTEST_SKIP() << "SKIPPED: no CUDA device (" << kernels::cuda_unavailable_reason() << ")";
  }
  ASSERT_EQ(train("cpu", "").exit_code, 0);
  const CliResult r = train("cuda", "--set train.device=cuda --set checkpoint.every=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dense bf16 peak"), std::string::npos) << r.output;
  const std::vector<double> cpu = training_losses(dir / "cpu");
  const std::vector<double> cuda = training_losses(dir / "cuda");
  ASSERT_EQ(cpu.size(), 8u);
  ASSERT_EQ(cuda.size(), 8u);
  for (size_t s = 0; s < cpu.size(); ++s) EXPECT_NEAR(cuda[s], cpu[s], 1e-4 * cpu[s]) << s;

  // As if the run had died after step 4: resuming from its checkpoint repeats steps 5 to 8.
  std::filesystem::remove_all(dir / "cuda/checkpoints/step-000008");
  std::filesystem::remove(dir / "cuda/checkpoints/latest");
  std::filesystem::remove(dir / "cuda/metrics.jsonl");
  const CliResult again = train("cuda", "--set train.device=cuda --set checkpoint.every=4");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resuming"), std::string::npos) << again.output;
  const std::vector<double> resumed = training_losses(dir / "cuda");
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t s = 0; s < 4; ++s) EXPECT_NEAR(resumed[s], cuda[4 + s], 1e-6 * cuda[4 + s]) << s;

  // Greedy text from the CPU's checkpoint is the same on either device.
  const std::string generate = "generate --checkpoint " + (dir / "cpu") +
                               " --prompt 'In the' --max-tokens 16 --temperature 0";
  const CliResult on_cpu = run_cli(generate);
  const CliResult on_cuda = run_cli(generate + " --device cuda");
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.output;
  ASSERT_EQ(on_cuda.exit_code, 0) << on_cuda.output;
  EXPECT_EQ(on_cuda.output, on_cpu.output);
}

}  // namespace
}  // namespace tessera::testing
