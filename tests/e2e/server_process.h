// A `tessera serve` process for end-to-end tests: started on a free port, its output collected,
// stopped with SIGTERM (a drain of at most 2 s unless args say otherwise) and reaped when the
// object goes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {

// The Node.js clients that talk to a server as users' libraries do (the openai and Hugging Face
// packages), with their node_modules.
inline const std::filesystem::path kOpenAiClientDir =
    std::filesystem::path(TESSERA_SOURCE_DIR) / "tests" / "serve" / "openai_client";

class ServerProcess {
 public:
  // args follow `tessera serve --port 0`; waits up to a minute for "listening on". With several
  // ranks, the server runs under mpirun (args then give --tp and --ep).
  explicit ServerProcess(const std::string& given_args, int ranks = 1) : ranks_(ranks) {
    // A client writing to a connection the server has closed gets EPIPE, not a fatal signal.
    signal(SIGPIPE, SIG_IGN);
    const std::string args = given_args.find("--drain-seconds") == std::string::npos
                                 ? "--drain-seconds 2 " + given_args
                                 : given_args;
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      const std::string launcher =
          ranks == 1 ? ""
                     : "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                       "--oversubscribe -np " +
                           std::to_string(ranks) + " ";
      const std::string command = "exec " + launcher + TESSERA_BINARY + " serve --port 0 " + args;
      execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    std::smatch m;
    const std::regex listening("listening on http://[^:]+:([0-9]+)");
    while (!std::regex_search(output_, m, listening)) {
      if (std::chrono::steady_clock::now() > deadline || !read_some(1000)) {
        throw std::runtime_error("tessera serve did not start:\n" + output_);
      }
    }
    port_ = std::stoi(m[1]);
    drain_ = std::thread([this] {
      while (read_some(-1)) {
      }
    });
  }

  ~ServerProcess() { stop(); }

  // Sends the signal once (0: none) and waits for the process to end; returns its exit code
  // (128 + the signal when a signal killed it).
  int stop(int signal = SIGTERM) {
    if (pid_ > 0) {
      kill(pid_, signal);
      int status = 0;
      waitpid(pid_, &status, 0);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
      drain_.join();
      close(fd_);
    }
    return exit_code_;
  }

  // Stops the server with SIGTERM and checks that it drained and ended cleanly. Open MPI's mpirun
  // exits 1 whenever it is sent SIGTERM, however its ranks end, so a server of several ranks is
  // judged by its leader's last line and the absence of errors.
  void expect_clean_stop() {
    const int exit_code = stop();
    const std::string out = output();
    if (ranks_ == 1) {
      EXPECT_EQ(exit_code, 0) << out;
    } else {
      EXPECT_NE(out.find("\nstopped\n"), std::string::npos) << out;
      EXPECT_EQ(out.find("error"), std::string::npos) << out;
    }
  }

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string output() const {
    std::lock_guard lock(mutex_);
    return output_;
  }

 private:
  // Appends what the server printed; false once its output has ended (or on timeout).
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return timeout_ms >= 0 && pid_alive();
    char buffer[4096];
    const ssize_t n = read(fd_, buffer, sizeof buffer);
    if (n <= 0) return false;
    std::lock_guard lock(mutex_);
    output_.append(buffer, size_t(n));
    return true;
  }
  bool pid_alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

  int ranks_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int fd_ = -1;
  int port_ = 0;
  mutable std::mutex mutex_;
  std::string output_;
  std::thread drain_;
};

// Trains a small model for a few steps into dir/run and returns the run directory. max_seq sets
// the context a server will have.
inline std::string train_servable_checkpoint(const TempDir& dir, int max_seq = 64, int d_model = 32,
                                             int n_layer = 2) {
  write_file(dir / "corpus.txt", small_corpus());
  const std::string size = std::to_string(max_seq);
  const CliResult r = run_cli(
      "train --data " + (dir / "corpus.txt") + " --out " + (dir / "run") +
      " --set model.n_layer=" + std::to_string(n_layer) +
      " --set model.n_head=2 --set model.d_model=" + std::to_string(d_model) +
      " --set model.max_seq=" + size + " --set train.batch_size=2 --set train.seq_len=" + size +
      " --set train.steps=3 --set train.eval_every=0 --set train.log_every=1");
  if (r.exit_code != 0) throw std::runtime_error("training failed:\n" + r.output);
  return dir / "run";
}

// A test suite whose tests serve one small checkpoint with a 1024-token context, trained once
// for the suite (a suite that needs a larger model defines SetUpTestSuite calling train_once).
// serve_args gives the flags every server of the suite shares.
class ServedCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { train_once(32, 2); }
  static void train_once(int d_model, int n_layer) {
    dir_ = new TempDir("served-checkpoint");
    run_ = new std::string(train_servable_checkpoint(*dir_, 1024, d_model, n_layer));
  }
  static void TearDownTestSuite() {
    delete run_;
    delete dir_;
    run_ = nullptr;
    dir_ = nullptr;
  }
  // One compute thread: CTest runs another test beside this one on the two cores.
  static std::string serve_args(const std::string& extra = "") {
    return "--checkpoint " + *run_ + " --model-name tiny --threads 1 " + extra;
  }

  static inline TempDir* dir_ = nullptr;
  static inline std::string* run_ = nullptr;  // the run directory
};

}  // namespace tessera::testing
