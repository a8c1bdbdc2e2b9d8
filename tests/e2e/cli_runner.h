// Runs the tessera binary as a user would and captures what it prints.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tessera::testing {

struct CliResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

// The shipped configuration files, as a path prefix.
inline const std::string kConfigs = std::string(TESSERA_SOURCE_DIR) + "/configs/";

// Flags for a model small enough to train in a second or two on two cores.
inline const std::string kSmallModel =
    " --set model.n_layer=2 --set model.n_head=2 --set model.d_model=32 --set model.max_seq=32"
    " --set train.batch_size=4 --set train.seq_len=32 --set train.warmup_steps=2"
    " --set train.eval_every=0 --set train.eval_batches=2 --set train.log_every=1";

// Appended to a model's flags with 4 heads: Llama with grouped-query attention (4 query heads
// over 2 key/value heads, untied), and a dropless top-2 mixture of four experts.
inline const std::string kLlamaGqaFlags =
    " --set model.arch=llama --set model.n_kv_head=2 --set model.tie_embeddings=false";
inline const std::string kMoeFlags =
    " --set model.arch=llama --set model.moe_experts=4 --set model.moe_top_k=2"
    " --set model.tie_embeddings=false";

inline CliResult run_command(const std::string& command_line) {
  std::string command = command_line + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// How many checks a node script of tests/serve/openai_client reported as passed ("ok   NAME"):
// every check ran and reported, not just an early clean exit.
inline size_t checks_passed(const std::string& output) {
  size_t passed = 0;
  for (size_t at = output.find("ok   "); at != std::string::npos;
       at = output.find("ok   ", at + 1)) {
    ++passed;
  }
  return passed;
}

inline CliResult run_cli(const std::string& args) {
  return run_command(std::string(TESSERA_BINARY) + " " + args);
}

// The CLI as `ranks` processes under OpenMPI's mpirun (allowed to run as root, as CI does).
inline CliResult run_mpi(int ranks, const std::string& args) {
  return run_command(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
      "--oversubscribe -np " +
      std::to_string(ranks) + " " + TESSERA_BINARY + " " + args);
}

// A training job's processes and its mesh flags, as run_mpi starts them.
struct JobLayout {
  int ranks;
  std::string mesh;
};

// Each bad input must end in one line "error: ..." naming the problem and a non-zero exit.
inline void expect_one_line_error(const CliResult& r, const std::string& mentions) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(mentions), std::string::npos) << r.output;
}

// A fresh directory under the system temp dir, removed when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& leaf) const { return (path_ / leaf).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A small corpus with enough structure for a model to learn something in a few steps.
inline std::string small_corpus() {
  std::string text;
  for (int i = 0; i < 400; ++i) {
    text += "In the beginning the word was " + std::to_string(i % 7) + ", and it was good.\n";
  }
  return text;
}

// A shell command started in the background, its output in a file.
class Background {
 public:
  Background(const std::string& command, const std::string& log) {
    const std::string line = command + " > " + log + " 2>&1";
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The exit status, or -1 when it did not end within `limit`.
  int wait(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!done_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  bool running() {
    if (!done_ && waitpid(pid_, &status_, WNOHANG) == pid_) done_ = true;
    return !done_;
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
};

inline std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Each step's loss within `tolerance` of the reference's, relative; prints the worst difference.
inline void expect_same_losses(const std::vector<double>& losses,
                               const std::vector<double>& reference, double tolerance = 1e-5) {
  ASSERT_EQ(losses.size(), reference.size());
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    worst = std::max(worst, std::abs(losses[i] / reference[i] - 1));
    EXPECT_NEAR(losses[i] / reference[i], 1.0, tolerance) << "step " << i + 1;
  }
  std::printf("  worst relative loss difference over %zu steps: %.2e\n", losses.size(), worst);
}

// The training losses of metrics.jsonl, in step order (or with key "val_loss" the held-out ones).
inline std::vector<double> training_losses(const std::string& run_dir,
                                           const std::string& key = "loss") {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record.contains(key)) losses.push_back(record[key].get<double>());
  }
  return losses;
}

// A process's /proc/PID/cmdline; empty once the process is gone, which it may be between listing
// /proc and reading the file (a read of a dead process's file fails with ESRCH).
inline std::string process_cmdline(const std::filesystem::path& file) {
  std::string cmdline;
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) return cmdline;
  char buffer[4096];
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;)
    cmdline.append(buffer, size_t(got));
  ::close(fd);
  return cmdline;
}

// The `tessera train` processes whose command line names `out`: the ranks of that job.
inline std::vector<pid_t> training_processes(const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path binary = fs::canonical(TESSERA_BINARY);
  std::vector<pid_t> pids;
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code exe_ec;
    if (fs::read_symlink(it->path() / "exe", exe_ec) != binary || exe_ec) continue;
    const std::string cmdline = process_cmdline(it->path() / "cmdline");
    const size_t first_end = cmdline.find('\0');
    const bool trains = first_end != std::string::npos &&
                        cmdline.compare(first_end, 7, std::string("\0train\0", 7)) == 0;
    if (trains && cmdline.find(out) != std::string::npos) pids.push_back(pid_t(std::stol(name)));
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

// Each step's training loss in metrics.jsonl, the last record of a step winning: a run that
// restarted from a checkpoint trains the steps after it again.
inline std::map<int64_t, double> losses_by_step(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::map<int64_t, double> losses;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("loss")) {
      losses[record["step"].get<int64_t>()] = record["loss"].get<double>();
    }
  }
  return losses;
}

}  // namespace tessera::testing
