#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "tessera/cli/flags.h"
#include "tessera/comm/world.h"
#include "tessera/core/error.h"
#include "tessera/launch/supervisor.h"
#include "tessera/train/divergence_guard.h"

namespace {

constexpr const char* kUsage =
    "usage: tessera <command> [flags]\n\n"
    "commands:\n"
    "  prepare    tokenise text into a dataset of token shards\n"
    "  train      train a GPT-2 or Llama model, dense or mixture-of-experts, on text or a\n"
    "             prepared dataset\n"
    "  generate   continue a prompt with a trained checkpoint\n"
    "  serve      answer requests over an OpenAI-compatible HTTP API\n"
    "  tokenizer  train a BPE vocabulary; encode or decode text\n"
    "  convert    export to or import from Hugging Face safetensors\n"
    "  plan       choose the parallel layout, accelerator and budget of a training run\n"
    "  supervise  run a job and restart it from its last checkpoint when it fails\n"
    "  report     write a training run's charts into one HTML file\n\n"
    "Run 'tessera <command> --help' for the flags of one command, 'tessera --version' for\n"
    "the build and the CPU features it uses.\n";

}  // namespace

int main(int argc, char** argv) {
  // First, before anything reads argv: MPI may remove its own arguments.
  const bool many_ranks = tessera::comm::init_world(argc, argv).size() > 1;
  spdlog::set_pattern("[%H:%M:%S] %v");
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    if (command == "--version") return tessera::cli::version_command();
    if (command == "prepare") return tessera::cli::prepare_command(argc - 2, argv + 2);
    if (command == "train") return tessera::cli::train_command(argc - 2, argv + 2);
    if (command == "generate") return tessera::cli::generate_command(argc - 2, argv + 2);
    if (command == "serve") return tessera::cli::serve_command(argc - 2, argv + 2);
    if (command == "tokenizer") return tessera::cli::tokenizer_command(argc - 2, argv + 2);
    if (command == "convert") return tessera::cli::convert_command(argc - 2, argv + 2);
    if (command == "plan") return tessera::cli::plan_command(argc - 2, argv + 2);
    if (command == "supervise") return tessera::cli::supervise_command(argc - 2, argv + 2);
    if (command == "report") return tessera::cli::report_command(argc - 2, argv + 2);
    std::fprintf(stderr, "error: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const tessera::train::DivergedError& e) {
    // Every rank judges the same reduced figures, so all of them end here together.
    if (tessera::comm::world().rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return tessera::launch::kExitDiverged;
  } catch (const tessera::Error& e) {
    // With several ranks, one that fails alone would leave the others waiting for it.
    if (many_ranks) tessera::comm::abort_job(e.what());
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::exception& e) {
    if (many_ranks) tessera::comm::abort_job(std::string("internal failure: ") + e.what());
    std::fprintf(stderr, "error: internal failure: %s\n", e.what());
  }
  return 1;
}
